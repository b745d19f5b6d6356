package runtime

import (
	"errors"
	"fmt"
)

// The error kinds of vkrt. Errors returned by any layer wrap one of these, so
// callers classify them with errors.Is; typed errors carrying the numbers are
// reached with errors.As.
var (
	// ErrNotFound: an unknown, freed or stale handle. Never another
	// allocation's memory.
	ErrNotFound = errors.New("vkrt: handle not found")
	// ErrBufferTooBig: no pool accepts a request of that size.
	ErrBufferTooBig = errors.New("vkrt: buffer too big for every pool")
	// ErrPoolCapacityExceeded: every pool that accepts the size is full at its
	// cap. The typed form is *CapacityError.
	ErrPoolCapacityExceeded = errors.New("vkrt: pool capacity exceeded")
	// ErrOutOfDeviceMemory: the driver refused an allocation.
	ErrOutOfDeviceMemory = errors.New("vkrt: out of device memory")
	// ErrDeviceLost: the device stopped answering; nothing on it is usable.
	ErrDeviceLost = errors.New("vkrt: device lost")
	// ErrClosed: the device, or what stands for it (its storage, a client
	// on it), was used after Close. Every backend's refusals after Close
	// match it; nothing of the closed device is usable any more.
	ErrClosed = errors.New("vkrt: device closed")
	// ErrOverlappingBinds: a sparse submission named some bytes of its
	// range twice, which a device may bind in either order; the storage
	// refused it whole. The typed form is *OverlappingBindsError.
	ErrOverlappingBinds = errors.New("vkrt: sparse binds name the same bytes in one submission")
	// ErrOutOfRange: a handle's bytes lie past the allocation it names, or
	// a transfer is longer than the range it reads or writes; nothing was
	// read or written. The message carries the numbers.
	ErrOutOfRange = errors.New("vkrt: range outside its allocation")
	// ErrZeroSize: an allocation or a virtual range of 0 B was asked of a
	// storage (Alloc, ReserveVirtual), which Vulkan has no such thing as;
	// nothing was made.
	ErrZeroSize = errors.New("vkrt: allocation of 0 B")
	// ErrInvalidArgument: a call's arguments are wrong in themselves,
	// whatever the device holds: a copy whose ranges overlap, a fill not
	// on whole 32-bit words, a sparse bind not on whole granules, a device
	// index past the devices there are, an option out of its range.
	// Nothing was changed; the message says which argument.
	ErrInvalidArgument = errors.New("vkrt: invalid argument")
	// ErrUnsupported: the device lacks what the call needs (a virtual
	// range of a device without sparse residency); the same call succeeds
	// on a device that has it. Nothing was changed.
	ErrUnsupported = errors.New("vkrt: not supported by the device")
)

// CapacityError is ErrPoolCapacityExceeded with the numbers: a request of
// Size bytes met pools capped at Capacity bytes of which InUse were taken.
type CapacityError struct {
	Size     uint64
	Capacity uint64
	InUse    uint64
}

func (e *CapacityError) Error() string {
	return fmt.Sprintf("vkrt: pool capacity exceeded: asked %d B, capacity %d B with %d B in use (%d B free)",
		e.Size, e.Capacity, e.InUse, e.Capacity-min(e.InUse, e.Capacity))
}

// Is makes a *CapacityError match ErrPoolCapacityExceeded.
func (e *CapacityError) Is(target error) bool { return target == ErrPoolCapacityExceeded }

// OutOfMemoryError is ErrOutOfDeviceMemory with the numbers: what was asked
// and what the device said it had.
type OutOfMemoryError struct {
	Size     uint64 // bytes asked: an Alloc's size as given, not rounded (a virtual range's may be in whole granules)
	HeapSize uint64 // bytes of the heap, 0 when unknown
	Budget   uint64 // the heap budget the driver reported, 0 when unknown
	Usage    uint64 // the heap usage the driver or storage reported, 0 when unknown
	Limit    uint64 // the storage's own memory limit, 0 when none
	Detail   string // the driver's or storage's word, may be empty
}

func (e *OutOfMemoryError) Error() string {
	s := fmt.Sprintf("vkrt: out of device memory: asked %d B", e.Size)
	if e.HeapSize != 0 {
		s += fmt.Sprintf(", heap %d B", e.HeapSize)
	}
	if e.Budget != 0 {
		s += fmt.Sprintf(", budget %d B", e.Budget)
	}
	if e.Usage != 0 {
		s += fmt.Sprintf(", in use %d B", e.Usage)
	}
	if e.Limit != 0 {
		s += fmt.Sprintf(", limit %d B", e.Limit)
	}
	if e.Detail != "" {
		s += ": " + e.Detail
	}
	return s
}

// Is makes an *OutOfMemoryError match ErrOutOfDeviceMemory.
func (e *OutOfMemoryError) Is(target error) bool { return target == ErrOutOfDeviceMemory }

// StreamID names a stream of a device; streams own their pools.
type StreamID uint32
