package wasmhost

import (
	"context"
	"errors"
	"fmt"

	"github.com/vkrt/vkrt/client"
	"github.com/vkrt/vkrt/kernel"
	"github.com/vkrt/vkrt/memory"
	vkruntime "github.com/vkrt/vkrt/runtime"
)

// Errno is a status a host function returns: 0 on success, otherwise a WASI
// preview-1 errno number. The numbers are the ABI's; they never change
// within vkrt_v1.
type Errno uint32

// The statuses of ABI version 1.
const (
	ESUCCESS Errno = 0
	E2BIG    Errno = 1  // a size no pool accepts
	EAGAIN   Errno = 6  // the stream is in an error state; transient
	EBADF    Errno = 8  // a handle that is zero, freed, stale, forged or another guest's
	EBUSY    Errno = 10 // install refused while pools hold live bytes
	EDQUOT   Errno = 19 // the guest's quota of device bytes, handles or records is used up
	EFAULT   Errno = 21 // a guest memory range outside the guest's memory
	EINVAL   Errno = 28 // a malformed argument, descriptor or JSON; an invalid layout
	EIO      Errno = 29 // the device failed, or the environment refused a record
	ENOMEM   Errno = 48 // the device or a capped pool is out of memory
	ENOSYS   Errno = 52 // a function this host does not provide
	ENOTSUP  Errno = 58 // a capability the backend lacks
	ERANGE   Errno = 68 // outside the buffer, or an output buffer too small
)

var errnoNames = map[Errno]string{
	ESUCCESS: "ESUCCESS", E2BIG: "E2BIG", EAGAIN: "EAGAIN", EBADF: "EBADF", EBUSY: "EBUSY",
	EDQUOT: "EDQUOT", EFAULT: "EFAULT", EINVAL: "EINVAL", EIO: "EIO", ENOMEM: "ENOMEM",
	ENOSYS: "ENOSYS", ENOTSUP: "ENOTSUP", ERANGE: "ERANGE",
}

func (e Errno) String() string {
	if n, ok := errnoNames[e]; ok {
		return n
	}
	return fmt.Sprintf("errno(%d)", uint32(e))
}

// Error makes an Errno an error a host function's failure can match with
// errors.Is.
func (e Errno) Error() string { return "vkrt_v1: " + e.String() }

// StatusError is a failed host call: the status the guest got and why.
type StatusError struct {
	Status Errno
	Err    error
}

func (e *StatusError) Error() string { return e.Status.String() + ": " + e.Err.Error() }
func (e *StatusError) Unwrap() []error {
	return []error{e.Status, e.Err}
}

// fail is a host-call failure with its status.
func fail(status Errno, format string, args ...any) error {
	return &StatusError{Status: status, Err: fmt.Errorf(format, args...)}
}

// errnoOf classifies an error from the client, the pools or the device into
// the ABI's statuses.
func errnoOf(err error) Errno {
	var se *StatusError
	var ie *memory.InstallError
	switch {
	case err == nil:
		return ESUCCESS
	case errors.As(err, &se):
		return se.Status
	case errors.As(err, &ie):
		switch ie.Kind {
		case memory.PoolsInUse:
			return EBUSY
		case memory.StreamUnavailable:
			return EAGAIN
		case memory.Unsupported:
			return ENOTSUP
		default:
			return EINVAL
		}
	case errors.Is(err, vkruntime.ErrBufferTooBig):
		return E2BIG
	case errors.Is(err, vkruntime.ErrOutOfDeviceMemory), errors.Is(err, vkruntime.ErrPoolCapacityExceeded):
		return ENOMEM
	case errors.Is(err, kernel.ErrInvalidDispatch), errors.Is(err, client.ErrNoPersistentWindow):
		return EINVAL
	case errors.Is(err, vkruntime.ErrDeviceLost):
		return EIO
	case errors.Is(err, vkruntime.ErrNotFound):
		return EBADF
	case errors.Is(err, context.DeadlineExceeded), errors.Is(err, context.Canceled):
		return EIO
	}
	return EIO
}
