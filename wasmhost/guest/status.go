package guest

import (
	"fmt"
	"strings"
)

// Status is what a vkrt_v1 call returns: 0 on success, otherwise a WASI
// preview-1 errno number.
type Status uint32

// The statuses of ABI version 1 (wasmhost/ABI.md, "Statuses"): a closed
// set; the host returns no other.
const (
	OK      Status = 0
	E2BIG   Status = 1  // a size no pool accepts
	EAGAIN  Status = 6  // transient: the stream is in an error state (Install)
	EBADF   Status = 8  // a handle that is zero, freed, stale, forged or another guest's
	EBUSY   Status = 10 // Install while the dynamic pools hold live bytes
	EDQUOT  Status = 19 // the guest's quota of device bytes, handles or records is used up
	EFAULT  Status = 21 // a range outside the guest's memory
	EINVAL  Status = 28 // a malformed argument, descriptor or JSON; an invalid layout; a launch the kernel refuses; EndPersistent with no window open
	EIO     Status = 29 // the device failed; the environment refused a record
	ENOMEM  Status = 48 // the device or a capped pool is out of memory
	ENOSYS  Status = 52 // a function the host does not provide (Record without records; every call outside a host)
	ENOTSUP Status = 58 // a capability the backend lacks
	ERANGE  Status = 68 // an offset/length outside the buffer, or an output buffer too small
)

var statusNames = map[Status]string{
	OK: "OK", E2BIG: "E2BIG", EAGAIN: "EAGAIN", EBADF: "EBADF", EBUSY: "EBUSY", EDQUOT: "EDQUOT",
	EFAULT: "EFAULT", EINVAL: "EINVAL", EIO: "EIO", ENOMEM: "ENOMEM", ENOSYS: "ENOSYS",
	ENOTSUP: "ENOTSUP", ERANGE: "ERANGE",
}

func (s Status) String() string {
	if n, ok := statusNames[s]; ok {
		return n
	}
	return fmt.Sprintf("status %d", uint32(s))
}

// Error makes a Status the sentinel errors.Is matches an *Error against.
func (s Status) Error() string { return "vkrt: " + s.String() }

// Error is a failed call: the function, the status and the host's message
// (last_error), which says what was wrong; Error() names the function
// where the message does not. Calls the SDK
// refuses before asking the host (a nil *Buffer, a malformed batch, a
// length past u32) are an *Error too, with the status the host would give.
type Error struct {
	Op      string
	Status  Status
	Message string
}

func (e *Error) Error() string {
	switch {
	case e.Message == "":
		return fmt.Sprintf("vkrt: %s: %s", e.Op, e.Status.String())
	case !strings.HasPrefix(e.Message, e.Op+":"):
		// Some host messages are the client's, which name no function
		// ("64 B still live in the pools" of memory_install).
		return fmt.Sprintf("vkrt: %s: %s: %s", e.Status.String(), e.Op, e.Message)
	}
	return fmt.Sprintf("vkrt: %s: %s", e.Status.String(), e.Message)
}

// Unwrap is the status, so errors.Is(err, guest.EBADF) holds.
func (e *Error) Unwrap() error { return e.Status }

// check turns a status into an error, asking the host why on failure.
func check(op string, s uint32) error {
	if s == 0 {
		return nil
	}
	msg := lastErrorNow() // first: nothing may allocate before it
	return &Error{Op: op, Status: Status(s), Message: msg}
}
