// Package device is the small interface between vkrt's client and a compute
// device: storage for the memory pools, transfers between host memory and
// that storage, and batches of kernel launches from the kernel package.
//
// Two implementations ship: the Vulkan backend (package vk, which needs
// cgo) and a pure-Go device that runs every kernel on the CPU (package
// device/cpu), the portable one dry runs and tests use without a GPU.
// Tests hand the client deliberately broken devices through the same
// interface.
//
// A backend makes itself the default by calling [Register] from an init
// function; [Open] opens the default device of the backend linked in
// (import _ "github.com/vkrt/vkrt/vk" links Vulkan).
package device

import (
	"context"
	"errors"
	"fmt"
	"sync"

	"github.com/vkrt/vkrt/kernel"
	vkruntime "github.com/vkrt/vkrt/runtime"
)

// Device is what the client needs from a device. Implementations are safe
// for concurrent use; Close comes last.
type Device interface {
	// Name says which device this is, for messages.
	Name() string
	// Properties are the facts the memory pools size themselves by.
	Properties() vkruntime.DeviceProperties
	// Limits are the facts a dispatch is checked against (kernel.Validate).
	Limits() kernel.Limits
	// Storage is the device's one storage, shared by all its users.
	Storage() Storage
	// Upload writes src to the start of the byte range dst; len(src) may be
	// less than dst.Size, not more. A refused transfer moves no byte: one
	// longer than its range, or a range past the end of its allocation, is
	// an error matching runtime.ErrOutOfRange, a released or unknown
	// allocation one matching runtime.ErrNotFound.
	Upload(ctx context.Context, dst vkruntime.StorageHandle, src []byte) error
	// Download reads the start of the byte range src into dst; len(dst) may
	// be less than src.Size, not more. It is refused as Upload is.
	Download(ctx context.Context, src vkruntime.StorageHandle, dst []byte) error
	// Dispatch runs ops in order, each one's writes visible to the next,
	// and waits for them. Every op is checked (kernel.Validate, then that
	// its bindings lie in live allocations) before any runs: a refused
	// batch changes nothing, and its error is that of its first op at
	// fault, which it names in a batch of several ("op 1 of 3: …"). An op
	// Validate refuses is an error matching
	// kernel.ErrInvalidDispatch, a binding of a released allocation one
	// matching runtime.ErrNotFound, one past the end of its allocation one
	// matching runtime.ErrOutOfRange. A checked batch runs on the
	// allocations its check found, one released since included (a GPU's
	// device keeps the memory it binds). When ctx ends first, Dispatch returns ctx.Err()
	// at once; work already handed to the device may still finish, and the
	// device keeps the memory it binds alive and orders later calls after it,
	// but no op starts once ctx has ended, so a batch holds the device past
	// its caller's deadline no longer than the work running then (vk
	// submits a batch under a context that can end in pieces its pace says
	// end within 20 ms, one op at least; cpu stops between work items).
	// An error that came before any op ran may say so (NothingRan): the
	// client then runs the batch again after a cleanup of its pools, where
	// the error is out of device memory; any other may come after part of
	// the batch ran, and running it again would apply those ops twice.
	Dispatch(ctx context.Context, ops []kernel.Op) error
	// Close releases the device once no work of it runs any more. Every
	// call that can fail made afterwards, of the device or of its storage
	// (Alloc, and a sparse storage's ReserveVirtual and Bind), fails with
	// an error matching runtime.ErrClosed, handles made before Close
	// included (an ended context or arguments wrong in themselves may be
	// refused as such first); the calls that cannot fail do nothing
	// harmful. A second Close returns nil or such an error.
	Close() error
}

// Storage is a device's runtime.Storage with the figures the client reads.
// It is safe for concurrent use. Once its device is closed, Alloc fails
// with an error matching runtime.ErrClosed.
type Storage interface {
	vkruntime.Storage
	vkruntime.AllocationLimiter
	// Allocated is the number of bytes of device memory held, deallocated
	// allocations not yet flushed included.
	Allocated() uint64
	// Allocations is the number of device allocations held, counted like
	// Allocated.
	Allocations() int
	// Limit is the memory limit in bytes the storage refuses allocations
	// past (*runtime.OutOfMemoryError), 0 for none beyond the heap.
	Limit() uint64
}

// Config is what a caller may ask of a backend's default device.
type Config struct {
	// Index picks the backend's device (in its own order); 0 is the first.
	Index int
	// MemoryLimit caps the bytes the device's storage may hold; 0: no cap.
	MemoryLimit uint64
	// Validation turns on the backend's own checking of every call, where
	// it has one (the Khronos validation layer for Vulkan).
	Validation bool
}

// Opener opens a backend's device.
type Opener func(ctx context.Context, cfg Config) (Device, error)

// ErrNoBackend: no backend is linked into the program, so there is no
// default device to open.
var ErrNoBackend = errors.New("device: no backend is linked in (the Vulkan one needs cgo and import _ \"github.com/vkrt/vkrt/vk\"; or hand the client a device, such as device/cpu's)")

// ErrUnavailable: the backend is linked in but this machine cannot run it
// (no driver, no device, or a build without cgo). Backends wrap it in their
// own errors; tests skip on it unless VKRT_REQUIRE_DEVICE=1.
var ErrUnavailable = errors.New("device: not available on this machine")

// ErrValidation: the backend's own checking (the Khronos validation layer
// for Vulkan) saw the device misused; what it computed cannot be trusted.
var ErrValidation = errors.New("device: validation errors")

var (
	registryMu sync.Mutex
	backend    string
	opener     Opener
)

// Register makes open the way Open opens a device. Backends call it from an
// init function; a second backend replaces the first.
func Register(name string, open Opener) {
	registryMu.Lock()
	defer registryMu.Unlock()
	backend, opener = name, open
}

// Backend is the name of the registered backend, "" when none is linked in.
func Backend() string {
	registryMu.Lock()
	defer registryMu.Unlock()
	return backend
}

// Open opens a device of the registered backend; without one it fails with
// ErrNoBackend.
func Open(ctx context.Context, cfg Config) (Device, error) {
	registryMu.Lock()
	name, open := backend, opener
	registryMu.Unlock()
	if open == nil {
		return nil, ErrNoBackend
	}
	if err := ctx.Err(); err != nil {
		return nil, err
	}
	d, err := open(ctx, cfg)
	if err != nil {
		return nil, fmt.Errorf("device: opening %s device %d: %w", name, cfg.Index, err)
	}
	return d, nil
}

// ErrNothingRan marks an error of Dispatch returned before any op of the
// batch ran: the batch changed nothing, and running it again once what
// failed is cured (device memory freed) runs each op once. A Dispatch error
// without it may come after part of the batch ran (vk submits a batch in
// pieces), so the client does not run such a batch again.
var ErrNothingRan = errors.New("device: nothing of the batch ran")

// NothingRan is err marked as ErrNothingRan's, its message unchanged; nil
// stays nil.
func NothingRan(err error) error {
	if err == nil {
		return nil
	}
	return &nothingRanError{err}
}

type nothingRanError struct{ err error }

func (e *nothingRanError) Error() string   { return e.err.Error() }
func (e *nothingRanError) Unwrap() []error { return []error{e.err, ErrNothingRan} }
