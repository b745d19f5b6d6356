package client

import (
	"context"
	"errors"
	"fmt"
	"math/bits"
	"sync"

	"github.com/vkrt/vkrt/device"
	"github.com/vkrt/vkrt/dryrun"
	"github.com/vkrt/vkrt/dryrun/trace"
	"github.com/vkrt/vkrt/kernel"
	"github.com/vkrt/vkrt/memory"
	vkruntime "github.com/vkrt/vkrt/runtime"
)

// Stream is an ordered queue of work with pools of its own. Its operations
// are safe for concurrent use and run one at a time.
type Stream struct {
	c  *Client
	id vkruntime.StreamID

	mu     sync.Mutex // guards everything below and the buffers' state
	mgr    *memory.Manager
	layout memory.Layout
	// live holds the stream's live buffers; each knows its index (Buffer.live)
	// so a free is a swap-remove, not a map delete.
	live   []*Buffer
	failed error // the device failure that put the stream in an error state
	closed bool
	trace  *trace.Trace // the allocation stream, while a measurement records it
	// traceFull: the trace reached measuredAllocations and records no
	// more; the measurement fails.
	traceFull bool
	// tight: the op running is the retry after a cleanup, whose
	// reservations, and lazy ones given memory, may take an allocation of
	// their own size where a page does not fit (memory.Manager.ReserveTight
	// and ResolveTight).
	tight bool
	// installs counts the layouts installed on the stream, so that
	// MeasurePlan tells a workload that replaced its plan.
	installs uint64
}

// outsidePersistent is ErrPersistentWindow, naming the stream, where the
// stream is inside a persistent window.
func (s *Stream) outsidePersistent() error {
	return s.locked(func() error {
		if s.mgr.InPersistent() {
			return fmt.Errorf("%w (stream %d): the real run's buffers would all go to its persistent pool, which no plan covers; measure outside Persistent", ErrPersistentWindow, s.id)
		}
		return nil
	})
}

// runUnder is what a run under the layout installed as the stream's
// installs-th left, read under one lock: its spills and report, whether a
// layout was installed since, and ErrClosed where the stream was closed.
// Read apart, an install in between left a report of another layout
// under a count that said none came.
func (s *Stream) runUnder(installs uint64) (spills uint64, rep memory.Report, replaced bool, err error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.closed || s.c.closed.Load() {
		return 0, memory.Report{}, false, s.closedError()
	}
	return s.mgr.Spills(), s.mgr.Report(), s.installs != installs, nil
}

// isNil says whether s is no stream: nil, or zero (NewStream sets c).
func (s *Stream) isNil() bool { return s == nil || s.c == nil }

// ID is the stream's id; the default stream is 0.
func (s *Stream) ID() vkruntime.StreamID {
	if s.isNil() {
		return 0
	}
	return s.id
}

// Client is the client the stream belongs to.
func (s *Stream) Client() *Client {
	if s.isNil() {
		return nil
	}
	return s.c
}

// Err is the device failure that put the stream in an error state, or nil.
func (s *Stream) Err() error {
	if s.isNil() {
		return nil
	}
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.failed
}

// Closed says whether the stream is closed, by its Close or its client's.
// A nil Stream says true: it takes no work (ErrNil).
func (s *Stream) Closed() bool {
	if s.isNil() {
		return true
	}
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.closed || s.c.closed.Load()
}

// Layout is the pool layout installed on the stream.
func (s *Stream) Layout() memory.Layout {
	if s.isNil() {
		return memory.Layout{}
	}
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.layout
}

// Report is the stream's pools now.
func (s *Stream) Report() memory.Report {
	if s.isNil() {
		return memory.Report{}
	}
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.mgr.Report()
}

// Spills counts the ways the stream's run departed from its layout's plan
// since it was installed (memory.Manager.Spills): a reservation a full
// capped pool sent on or an arena's slot missed, a pool grown past the
// plan, the run leaving a virtual plan's stream.
func (s *Stream) Spills() uint64 {
	if s.isNil() {
		return 0
	}
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.mgr.Spills()
}

// Usage is the stream's memory usage now.
func (s *Stream) Usage() memory.Usage {
	if s.isNil() {
		return memory.Usage{}
	}
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.mgr.Usage()
}

// usable is checked under s.mu by every operation that touches the pools or
// the device.
func (s *Stream) usable() error {
	switch {
	case s.closed:
		return s.closedError()
	case s.failed != nil:
		return prefixed(s.failed, "stream %d is in an error state", s.id)
	}
	return nil
}

// closedError is the error of a closed stream; one closed with its client
// also matches runtime.ErrClosed.
func (s *Stream) closedError() error {
	if s.c.closed.Load() {
		return prefixed(errClientClosed, "stream %d", s.id)
	}
	return prefixed(ErrClosed, "stream %d", s.id)
}

// noteDeviceError puts the stream in an error state when err says the device
// can no longer be trusted: lost, or misused as the validation layer saw.
func (s *Stream) noteDeviceError(err error) {
	if errors.Is(err, vkruntime.ErrDeviceLost) || errors.Is(err, device.ErrValidation) {
		s.fail(err)
	}
}

// fail puts the stream in an error state; caller holds s.mu.
func (s *Stream) fail(err error) {
	if s.failed == nil {
		s.failed = err
	}
}

// locked runs op under the stream's lock once the stream is usable.
func (s *Stream) locked(op func() error) error {
	s.mu.Lock()
	defer s.mu.Unlock()
	if err := s.usable(); err != nil {
		return err
	}
	return op()
}

// retryable errors are the ones a cleanup of the pools may cure, of an
// op that may run again: not one the device failed after it may have run
// part of it (ranError).
func retryable(err error) bool {
	var ran *ranError
	if errors.As(err, &ran) {
		return false
	}
	return errors.Is(err, vkruntime.ErrOutOfDeviceMemory) || errors.Is(err, vkruntime.ErrPoolCapacityExceeded)
}

// ranError is the error of work the device may have run part of before it
// failed: a launch batch that ran twice computed twice on outputs written
// in place (a scale by 2 in place gave 8x for 4x, and no error).
type ranError struct{ err error }

func (e *ranError) Error() string { return e.err.Error() }
func (e *ranError) Unwrap() error { return e.err }

// withMemory runs op, an operation that may need size bytes of new memory;
// when the device or a capped pool refuses, it cleans every stream's pools
// up and tries once more, and reports a second refusal in full.
func (s *Stream) withMemory(size uint64, op func() error) error {
	return s.withMemoryOf(&size, op)
}

// withMemoryOf is withMemory for an op that says, in *size, the bytes it
// was refused (a launch learns which of its buffers the device refused as
// it gives them memory).
func (s *Stream) withMemoryOf(size *uint64, op func() error) error {
	err := s.locked(op)
	if !retryable(err) {
		return err
	}
	s.c.cleanup()
	err = s.locked(func() error {
		s.tight = true
		defer func() { s.tight = false }()
		return op()
	})
	if !retryable(err) {
		return err
	}
	var own *opMemoryError
	if errors.As(err, &own) {
		// The op's own memory, not a buffer's: no allocation of *size
		// bytes was refused.
		own.afterCleanup = true
		return err
	}
	return s.c.allocationError(s, *size, err)
}

// opMemoryError is an op the device refused memory of its own for (a
// transfer's staging buffer in host-visible memory, a launch's
// descriptors), every buffer of it holding its memory already. A cleanup
// may free what it needs, so it runs again after one; refused again, it is
// told as the op's refusal, which matches the device's error
// (runtime.ErrOutOfDeviceMemory), not as a *AllocationError of the buffer's
// size, which nothing refused.
type opMemoryError struct {
	stream       vkruntime.StreamID
	what         string // the op: "reading 4 B of buffer 1 at 0"
	own          string // what it needed memory for: "the transfer itself (buffer 1 holds its own)"
	afterCleanup bool
	err          error // the device's
}

func (e *opMemoryError) Error() string {
	again := ""
	if e.afterCleanup {
		again = ", even after a cleanup"
	}
	return fmt.Sprintf("client: stream %d: %s: the device had no memory for %s%s: %v",
		e.stream, e.what, e.own, again, e.err)
}

func (e *opMemoryError) Unwrap() error { return e.err }

// opMemory is err, the device's failure of the op what with its buffers
// backed, as an *opMemoryError where the device says it is out of memory;
// else nil.
func (s *Stream) opMemory(err error, own, what string, args ...any) error {
	if !retryable(err) {
		return nil
	}
	return &opMemoryError{stream: s.id, what: fmt.Sprintf(what, args...), own: own, err: err}
}

// Empty makes a zero-filled buffer of size bytes.
func (s *Stream) Empty(ctx context.Context, size uint64) (*Buffer, error) {
	if s.isNil() {
		return nil, ErrNil
	}
	return s.alloc(ctx, size, nil)
}

// Create makes a buffer holding a copy of data.
func (s *Stream) Create(ctx context.Context, data []byte) (*Buffer, error) {
	if s.isNil() {
		return nil, ErrNil
	}
	return s.alloc(ctx, uint64(len(data)), data)
}

func (s *Stream) alloc(ctx context.Context, size uint64, data []byte) (*Buffer, error) {
	if err := ctxErr(ctx); err != nil {
		return nil, err
	}
	dry := dryrun.Active(ctx)
	mapping := memory.Eager
	if dry {
		mapping = memory.Lazy
	}
	ctx, done := s.c.callContext(ctx, !dry && len(data) >= closeEndsTransfersFrom)
	defer done()
	var b *Buffer
	err := s.withMemory(size, func() error {
		reserve := s.mgr.Reserve
		if s.tight {
			reserve = s.mgr.ReserveTight
		}
		h, err := reserve(size, mapping)
		if err != nil {
			return prefixed(err, "stream %d: buffer of %d B", s.id, size)
		}
		// The reservation goes back however the buffer fails to be made:
		// a device whose Upload or Alloc panicked left it counted in the
		// pools' usage, and its page held, with no buffer to free it.
		made := false
		defer func() {
			if !made {
				_ = s.mgr.Free(h)
			}
		}()
		nb := &Buffer{&buffer{s: s, id: s.c.nextBufferID(), h: h, size: size, traced: -1}}
		if !dry {
			err := s.back(nb)
			if err == nil && len(data) > 0 {
				err = s.upload(ctx, nb, 0, data)
			}
			if err != nil {
				return err
			}
		}
		made = true
		nb.live = len(s.live)
		s.live = append(s.live, nb)
		// The trace is the stream the dynamic pools see, which a plan is
		// made for: a persistent window's reservations never reach them.
		switch {
		case s.trace == nil || s.mgr.InPersistent():
		case s.trace.Allocations >= measuredAllocations:
			s.traceFull = true
		default:
			// A buffer of 0 B takes a place of one alignment unit, as one
			// of 1 B does, and its reservation's ordinal: traced as 1 B,
			// which a trace can say (a plan of a guest that made one was
			// refused as "an allocation of 0 bytes").
			nb.traced = int32(s.trace.Allocations)
			s.trace.Events = append(s.trace.Events, trace.Event{Op: trace.OpAlloc, Index: nb.traced, Size: max(size, 1), Stream: uint32(s.id)})
			s.trace.Allocations++
		}
		b = nb
		return nil
	})
	if err != nil {
		return nil, closedBy(ctx, err)
	}
	return b, nil
}

// back gives b device memory: its page is resolved, which materializes a
// lazy one. The contents are zeros from then on, but clearing them on the
// device waits for the first use that needs it (zeroPending), so an upload
// that covers the buffer or a launch pays no extra submission. Caller holds
// s.mu.
func (s *Stream) back(b *Buffer) error {
	if err := s.owns(b); err != nil {
		return err
	}
	if b.backed {
		return nil
	}
	resolve := s.mgr.Resolve
	if s.tight {
		resolve = s.mgr.ResolveTight
	}
	sh, err := resolve(b.h)
	if err != nil {
		return prefixed(err, "stream %d: giving buffer %d (%d B) device memory", s.id, b.id, b.size)
	}
	b.slice = sh
	b.storage = vkruntime.StorageHandle{ID: sh.ID, Offset: sh.Offset, Size: b.size}
	b.backed, b.zeroPending = true, true
	return nil
}

// clear zeroes b's slice on the device now; caller holds s.mu.
func (s *Stream) clear(ctx context.Context, b *Buffer) error {
	if err := s.c.dev.Dispatch(ctx, []kernel.Op{zeroFill(b.slice)}); err != nil {
		s.noteDeviceError(err)
		if own := s.opMemory(err, fmt.Sprintf("the zero fill itself (buffer %d holds its own)", b.id), "zeroing buffer %d (%d B)", b.id, b.size); own != nil {
			return own
		}
		return prefixed(err, "stream %d: zeroing buffer %d (%d B)", s.id, b.id, b.size)
	}
	b.zeroPending = false
	return nil
}

// upload writes data into b at offset, b backed; a pending zero fill comes
// first unless data covers the buffer. Caller holds s.mu.
func (s *Stream) upload(ctx context.Context, b *Buffer, offset uint64, data []byte) error {
	covers := offset == 0 && uint64(len(data)) == b.size
	if b.zeroPending && !covers {
		if err := s.clear(ctx, b); err != nil {
			return err
		}
	}
	dst := vkruntime.StorageHandle{ID: b.storage.ID, Offset: b.storage.Offset + offset, Size: uint64(len(data))}
	if err := s.c.dev.Upload(ctx, dst, data); err != nil {
		s.noteDeviceError(err)
		if own := s.opMemory(err, fmt.Sprintf("the transfer itself (buffer %d holds its own)", b.id), "writing %d B to buffer %d at %d", len(data), b.id, offset); own != nil {
			return own
		}
		return fmt.Errorf("client: writing %d B to buffer %d at %d: %w", len(data), b.id, offset, err)
	}
	b.zeroPending = b.zeroPending && !covers
	return nil
}

// ErrForeignBuffer: a buffer was handed to a stream that did not make it,
// another stream of the client or a stream of another client. The typed
// form is *ForeignBufferError.
var ErrForeignBuffer = errors.New("client: buffer of another stream")

// ForeignBufferError is ErrForeignBuffer with the numbers: buffer Buffer,
// made by stream Owner, was handed to stream Stream. OtherClient says the
// owner is a stream of another client (whose ids overlap this one's).
type ForeignBufferError struct {
	Buffer      uint64
	Owner       vkruntime.StreamID
	Stream      vkruntime.StreamID
	OtherClient bool
}

func (e *ForeignBufferError) Error() string {
	if e.OtherClient {
		return fmt.Sprintf("client: buffer %d belongs to stream %d of another client, not to stream %d of this one", e.Buffer, e.Owner, e.Stream)
	}
	return fmt.Sprintf("client: buffer %d belongs to stream %d, not stream %d", e.Buffer, e.Owner, e.Stream)
}

// Is makes a *ForeignBufferError match ErrForeignBuffer.
func (e *ForeignBufferError) Is(target error) bool { return target == ErrForeignBuffer }

// ErrOutOfRange: a read or write named bytes outside its buffer. The typed
// form is *RangeError. It matches runtime.ErrOutOfRange too, the devices'
// refusal of a range outside its allocation, so one check covers both.
var ErrOutOfRange = fmt.Errorf("client: range outside the buffer: %w", vkruntime.ErrOutOfRange)

// RangeError is ErrOutOfRange with the numbers: Length bytes from Offset
// were asked of buffer Buffer, which holds Size bytes.
type RangeError struct {
	Buffer         uint64
	Offset, Length uint64
	Size           uint64
}

func (e *RangeError) Error() string {
	if end, carry := bits.Add64(e.Offset, e.Length, 0); carry == 0 {
		return fmt.Sprintf("client: buffer %d: range [%d, %d) asked, the buffer holds %d B", e.Buffer, e.Offset, end, e.Size)
	}
	return fmt.Sprintf("client: buffer %d: %d B from offset %d asked, a range that wraps past 2^64; the buffer holds %d B", e.Buffer, e.Length, e.Offset, e.Size)
}

// Is makes a *RangeError match ErrOutOfRange.
func (e *RangeError) Is(target error) bool {
	return target == ErrOutOfRange || target == vkruntime.ErrOutOfRange
}

// owns checks b is a live buffer of s; caller holds s.mu. The freed mark
// lives in the state every copy of a Buffer value shares, so a copy freed
// makes the original refuse too: no stale copy reaches the memory the pools
// hand the next buffer.
func (s *Stream) owns(b *Buffer) error {
	switch {
	case b == nil || b.buffer == nil:
		return fmt.Errorf("client: stream %d: a nil or zero Buffer, made by no stream: %w", s.id, vkruntime.ErrNotFound)
	case b.s != s:
		return &ForeignBufferError{Buffer: b.id, Owner: b.s.id, Stream: s.id, OtherClient: b.s.c != s.c}
	case b.freed:
		return fmt.Errorf("client: buffer %d (%d B) was freed: %w", b.id, b.size, vkruntime.ErrNotFound)
	}
	return nil
}

func checkRange(b *Buffer, offset, n uint64) error {
	if offset > b.size || n > b.size-offset {
		return &RangeError{Buffer: b.id, Offset: offset, Length: n, Size: b.size}
	}
	return nil
}

// Write copies data into b at offset. Under a dry run it is checked and
// dropped.
func (s *Stream) Write(ctx context.Context, b *Buffer, offset uint64, data []byte) error {
	if s.isNil() {
		return ErrNil
	}
	if err := ctxErr(ctx); err != nil {
		return err
	}
	dry := dryrun.Active(ctx)
	ctx, done := s.c.callContext(ctx, !dry && len(data) >= closeEndsTransfersFrom)
	defer done()
	return closedBy(ctx, s.withMemory(bufferSize(b), func() error {
		if err := s.owns(b); err != nil {
			return err
		}
		if err := checkRange(b, offset, uint64(len(data))); err != nil {
			return err
		}
		if dry || len(data) == 0 {
			return nil
		}
		if err := s.back(b); err != nil {
			return err
		}
		return s.upload(ctx, b, offset, data)
	}))
}

// Back gives b device memory now where a dry run made it without any, as
// its first transfer or launch would; its zero fill stays pending until
// that first use. A buffer with memory is left as it is. A host that checks
// what a buffer makes its pools reserve before the device holds any of it
// (wasmhost's quota of device bytes) makes the buffer in a dry run, then
// backs it once it passes. Under a dry run it is checked and does nothing:
// a dry run holds no device memory.
func (s *Stream) Back(ctx context.Context, b *Buffer) error {
	if s.isNil() {
		return ErrNil
	}
	if err := ctxErr(ctx); err != nil {
		return err
	}
	dry := dryrun.Active(ctx)
	return s.withMemory(bufferSize(b), func() error {
		if err := s.owns(b); err != nil {
			return err
		}
		if dry {
			return nil
		}
		return s.back(b)
	})
}

// Read returns b's contents. Under a dry run it returns zeros of b's size.
func (s *Stream) Read(ctx context.Context, b *Buffer) ([]byte, error) {
	return s.ReadAt(ctx, b, 0, bufferSize(b))
}

// ReadAt returns n bytes of b from offset. Under a dry run they are zeros.
func (s *Stream) ReadAt(ctx context.Context, b *Buffer, offset, n uint64) ([]byte, error) {
	if s.isNil() {
		return nil, ErrNil
	}
	var out []byte
	err := s.read(ctx, b, offset, n, func() []byte { out = make([]byte, n); return out })
	if err != nil {
		return nil, err
	}
	return out, nil
}

// ReadInto fills dst with b's bytes from offset; under a dry run with
// zeros. It allocates nothing: the read of a caller that has the memory
// already (a guest's, for one).
func (s *Stream) ReadInto(ctx context.Context, b *Buffer, offset uint64, dst []byte) error {
	if s.isNil() {
		return ErrNil
	}
	return s.read(ctx, b, offset, uint64(len(dst)), func() []byte { return dst })
}

// read reads n bytes of b from offset into the memory dst gives once the
// read is known to be valid.
func (s *Stream) read(ctx context.Context, b *Buffer, offset, n uint64, dst func() []byte) error {
	if err := ctxErr(ctx); err != nil {
		return err
	}
	dry := dryrun.Active(ctx)
	ctx, done := s.c.callContext(ctx, !dry && n >= closeEndsTransfersFrom)
	defer done()
	return closedBy(ctx, s.withMemory(bufferSize(b), func() error {
		if err := s.owns(b); err != nil {
			return err
		}
		if err := checkRange(b, offset, n); err != nil {
			return err
		}
		buf := dst()
		if dry || n == 0 {
			clear(buf)
			return nil
		}
		if err := s.back(b); err != nil {
			return err
		}
		if b.zeroPending {
			clear(buf) // zeros, which the device need not be asked for
			return nil
		}
		src := vkruntime.StorageHandle{ID: b.storage.ID, Offset: b.storage.Offset + offset, Size: n}
		if err := s.c.dev.Download(ctx, src, buf); err != nil {
			s.noteDeviceError(err)
			if own := s.opMemory(err, fmt.Sprintf("the transfer itself (buffer %d holds its own)", b.id), "reading %d B of buffer %d at %d", n, b.id, offset); own != nil {
				return own
			}
			return fmt.Errorf("client: reading %d B of buffer %d at %d: %w", n, b.id, offset, err)
		}
		return nil
	}))
}

// Free returns b to the stream's pools. Freeing twice is ErrNotFound; once
// the stream is closed, Free is ErrClosed as every other use is, not a
// double free: Close, not the caller, freed the buffer.
func (s *Stream) Free(b *Buffer) error {
	if s.isNil() {
		return ErrNil
	}
	s.mu.Lock()
	defer s.mu.Unlock()
	// A buffer of another stream is refused as foreign even here, so only
	// this stream's closing is reported.
	if s.closed && b != nil && b.buffer != nil && b.s == s {
		return s.closedError()
	}
	if err := s.owns(b); err != nil {
		return err
	}
	if err := s.mgr.Free(b.h); err != nil {
		return fmt.Errorf("client: freeing buffer %d: %w", b.id, err)
	}
	b.freed = true
	s.forget(b)
	if s.trace != nil && b.traced >= 0 {
		s.trace.Events = append(s.trace.Events, trace.Event{Op: trace.OpFree, Index: b.traced})
	}
	return nil
}

// forget drops b from the live buffers; caller holds s.mu.
func (s *Stream) forget(b *Buffer) {
	last := len(s.live) - 1
	moved := s.live[last]
	s.live[b.live] = moved
	moved.live = b.live
	s.live[last] = nil
	s.live = s.live[:last]
	b.live = -1
}

// ErrDefaultStream: Close was called on a client's default stream, which
// closes with its client only.
var ErrDefaultStream = errors.New("client: the default stream closes with its client")

// Close frees the stream's buffers and returns its pools' memory. The
// default stream closes with its client: closing it alone is
// ErrDefaultStream and changes nothing.
func (s *Stream) Close() error {
	if s.isNil() {
		return ErrNil
	}
	if s == s.c.def {
		return fmt.Errorf("%w (stream %d)", ErrDefaultStream, s.id)
	}
	// Released before it leaves the client's streams: a Client.Close that
	// no longer finds it there must not close the device while its pages
	// are still being handed back.
	s.release()
	s.c.mu.Lock()
	delete(s.c.streams, s.id)
	s.c.mu.Unlock()
	return nil
}

// release frees every buffer and returns the pools' pages to the device,
// all under s.mu, so a Client.Close that takes the lock after finds the
// stream done with the device and may close it.
func (s *Stream) release() {
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.closed {
		return
	}
	for _, b := range s.live {
		_ = s.mgr.Free(b.h)
		b.freed = true
	}
	clear(s.live)
	s.live = s.live[:0]
	s.mgr.Cleanup(true)
	s.c.storage.Flush()
	s.closed = true
}

func bufferSize(b *Buffer) uint64 {
	if b == nil || b.buffer == nil {
		return 0
	}
	return b.size
}

// Buffer is device memory reserved on one stream. Its methods run on that
// stream. Copies of a Buffer value are the same buffer: their state is
// shared, so freeing one frees them all and none reaches memory the pools
// have handed on.
type Buffer struct {
	*buffer
}

// buffer is the state of a Buffer, shared by its copies.
type buffer struct {
	s       *Stream
	id      uint64
	h       memory.Handle
	size    uint64
	storage vkruntime.StorageHandle // the buffer's bytes, valid once backed
	slice   vkruntime.StorageHandle // the whole (aligned) slice, valid once backed
	backed  bool                    // has device memory
	// zeroPending: backed, reads as zeros, and the device memory still has to
	// be cleared before a kernel or a partial write touches it.
	zeroPending bool
	freed       bool
	traced      int32 // the buffer's allocation index in its stream's trace, -1 when untraced
	live        int   // index in the stream's live buffers, -1 once freed
}

// errNoBuffer is the error of a Buffer that no stream made (the zero value,
// or a nil *Buffer such as a failed Create returns).
var errNoBuffer = fmt.Errorf("client: a nil or zero Buffer, made by no stream: %w", vkruntime.ErrNotFound)

// ID names the buffer in errors and reports; ids are unique per client.
func (b *Buffer) ID() uint64 {
	if b == nil || b.buffer == nil {
		return 0
	}
	return b.id
}

// Size is the buffer's size in bytes as asked.
func (b *Buffer) Size() uint64 {
	if b == nil || b.buffer == nil {
		return 0
	}
	return b.size
}

// Stream is the stream the buffer belongs to.
func (b *Buffer) Stream() *Stream {
	if b == nil || b.buffer == nil {
		return nil
	}
	return b.s
}

// Read returns the buffer's contents (zeros under a dry run).
func (b *Buffer) Read(ctx context.Context) ([]byte, error) {
	if b == nil || b.buffer == nil {
		return nil, errNoBuffer
	}
	return b.s.Read(ctx, b)
}

// Write copies data into the buffer at offset (dropped under a dry run).
func (b *Buffer) Write(ctx context.Context, offset uint64, data []byte) error {
	if b == nil || b.buffer == nil {
		return errNoBuffer
	}
	return b.s.Write(ctx, b, offset, data)
}

// Free returns the buffer to its stream's pools.
func (b *Buffer) Free() error {
	if b == nil || b.buffer == nil {
		return errNoBuffer
	}
	return b.s.Free(b)
}
