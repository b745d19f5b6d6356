package guest

import (
	"encoding/binary"
	"fmt"
	"math"
	"unsafe"
)

// Buffer is a device buffer the guest holds: a handle and its size. The
// methods of a nil *Buffer answer EBADF, as the host answers handle 0.
type Buffer struct {
	handle uint32
	size   uint64
}

// NewBuffer makes a zero-filled device buffer of size bytes.
func NewBuffer(size uint64) (*Buffer, error) {
	var h uint32
	if err := check("buffer_create", bufferCreate(size, unsafe.Pointer(&h))); err != nil {
		return nil, err
	}
	return &Buffer{handle: h, size: size}, nil
}

// NewFloat32s makes a buffer holding a copy of v.
func NewFloat32s(v []float32) (*Buffer, error) {
	p, err := floatBytes("buffer_create", v)
	if err != nil {
		return nil, err
	}
	b, err := NewBuffer(uint64(len(p)))
	if err != nil {
		return nil, err
	}
	if err := b.Write(0, p); err != nil {
		b.Free()
		return nil, err
	}
	return b, nil
}

// BufferOf is a Buffer value naming handle, as the host gave it to this
// guest by other means; the host checks it on every call like any other.
func BufferOf(handle uint32, size uint64) *Buffer { return &Buffer{handle: handle, size: size} }

// Handle is the buffer's handle (0, which no buffer has, for nil).
func (b *Buffer) Handle() uint32 {
	if b == nil {
		return 0
	}
	return b.handle
}

// Size is the buffer's size in bytes (0 for nil).
func (b *Buffer) Size() uint64 {
	if b == nil {
		return 0
	}
	return b.size
}

// Write copies p into the buffer at offset (dropped in a dry run).
func (b *Buffer) Write(offset uint64, p []byte) error {
	n, err := transferLen("buffer_write", b, len(p))
	if err != nil {
		return err
	}
	return check("buffer_write", bufferWrite(b.handle, offset, unsafe.Pointer(unsafe.SliceData(p)), n))
}

// Read fills p from the buffer at offset (zeros in a dry run).
func (b *Buffer) Read(offset uint64, p []byte) error {
	n, err := transferLen("buffer_read", b, len(p))
	if err != nil {
		return err
	}
	return check("buffer_read", bufferRead(b.handle, offset, unsafe.Pointer(unsafe.SliceData(p)), n))
}

// WriteFloat32s copies v into the buffer from element index at. An at
// whose byte offset passes 2^64 is ERANGE.
func (b *Buffer) WriteFloat32s(at uint64, v []float32) error {
	if b == nil {
		return nilBuffer("buffer_write")
	}
	// 4*at would wrap to a small offset and write over the wrong bytes.
	if at > math.MaxUint64/4 {
		return refuse("buffer_write", ERANGE, "element %d is past any buffer (its byte offset passes 2^64)", at)
	}
	p, err := floatBytes("buffer_write", v)
	if err != nil {
		return err
	}
	return b.Write(4*at, p)
}

// Float32s reads the whole buffer as float32s: EINVAL for a buffer that is
// not whole float32s or that one read cannot hold (4 GiB or more; Read
// takes it in parts). The host answers for the buffer's last float32
// before the slice is made, so a size it does not hold (BufferOf) is its
// ERANGE, or a stale handle its EBADF, not the guest's memory spent.
func (b *Buffer) Float32s() ([]float32, error) {
	if b == nil {
		return nil, nilBuffer("buffer_read")
	}
	switch {
	case b.size%4 != 0:
		return nil, refuse("buffer_read", EINVAL, "handle %#x: a buffer of %d B is not whole float32s", b.handle, b.size)
	case b.size > math.MaxUint32 || b.size > math.MaxInt:
		// make would trap on it, and one read moves less than 4 GiB.
		return nil, refuse("buffer_read", EINVAL, "handle %#x: a buffer of %d B is more than one read moves (a u32 length); Read it in parts", b.handle, b.size)
	}
	if b.size > 0 {
		// The host checks the size before a slice of it is made: a size it
		// does not hold (BufferOf told a wrong one) of gigabytes ran the
		// guest out of memory instead of being refused.
		var last [4]byte
		if err := b.Read(b.size-4, last[:]); err != nil {
			return nil, err
		}
	}
	v := make([]float32, b.size/4)
	p, err := floatBytes("buffer_read", v)
	if err != nil {
		return nil, err
	}
	if err := b.Read(0, p); err != nil {
		return nil, err
	}
	return v, nil
}

// Free returns the buffer; its handle is stale from then on, and a second
// Free, or any use after it, is EBADF.
func (b *Buffer) Free() error {
	if b == nil {
		return nilBuffer("buffer_free")
	}
	return check("buffer_free", bufferFree(b.handle))
}

// floatBytes views v as its little-endian bytes (WebAssembly is
// little-endian, as are the hosts this package tests on); EINVAL where
// their length passes what an int or a u32 length holds.
func floatBytes(op string, v []float32) ([]byte, error) {
	if uint64(len(v)) > math.MaxUint32/4 || uint64(len(v)) > math.MaxInt/4 {
		return nil, refuse(op, EINVAL, "%d float32s are more than one call moves (a u32 length of bytes)", len(v))
	}
	return unsafe.Slice((*byte)(unsafe.Pointer(unsafe.SliceData(v))), 4*len(v)), nil
}

// transferLen is n as the ABI's u32 length: uint32(n) would drop the high
// bits and move fewer bytes than asked.
func transferLen(op string, b *Buffer, n int) (uint32, error) {
	if b == nil {
		return 0, nilBuffer(op)
	}
	return u32Len(op, n)
}

// u32Len is n as a u32 length, EINVAL where it does not fit.
func u32Len(op string, n int) (uint32, error) {
	if uint64(n) > math.MaxUint32 {
		return 0, refuse(op, EINVAL, "%d B are more than a u32 length holds", n)
	}
	return uint32(n), nil
}

func nilBuffer(op string) error { return refuse(op, EBADF, "a nil *Buffer names no buffer") }

// refuse is a call the SDK refuses before asking the host, as the *Error
// the host's refusal would be.
func refuse(op string, s Status, format string, args ...any) error {
	return &Error{Op: op, Status: s, Message: op + ": " + fmt.Sprintf(format, args...)}
}

// Run runs launches in order as one batch, one submission on the device,
// each launch seeing the writes of those before it. The host checks the
// whole batch before anything runs.
func Run(launches ...Launch) error {
	desc, err := AppendDescriptor(nil, launches...)
	if err != nil {
		return err
	}
	n, err := u32Len("launch", len(desc))
	if err != nil {
		return err
	}
	return check("launch", launch(unsafe.Pointer(unsafe.SliceData(desc)), n))
}

// Run runs the launch on its own.
func (l Launch) Run() error { return Run(l) }

// Sync reports whether the guest's stream is healthy; launches already
// wait for their work.
func Sync() error { return check("sync", syncAll()) }

// MemoryUsage is the guest's stream's memory usage.
type MemoryUsage struct {
	Allocations, BytesInUse, BytesPadding, BytesReserved uint64
}

// Usage is the memory usage of the guest's stream now.
func Usage() (MemoryUsage, error) {
	var out [32]byte
	if err := check("memory_usage", memoryUsage(unsafe.Pointer(&out))); err != nil {
		return MemoryUsage{}, err
	}
	le := binary.LittleEndian
	return MemoryUsage{le.Uint64(out[0:]), le.Uint64(out[8:]), le.Uint64(out[16:]), le.Uint64(out[24:])}, nil
}

// Report is the guest's stream's pools as report JSON.
func Report() ([]byte, error) {
	buf := make([]byte, 4096)
	for {
		var n uint32
		s := memoryReport(unsafe.Pointer(unsafe.SliceData(buf)), uint32(len(buf)), unsafe.Pointer(&n))
		switch Status(s) {
		case OK:
			return buf[:n], nil
		case ERANGE:
			buf = make([]byte, n) // the host wrote the length it needs
		default:
			return nil, check("memory_report", s)
		}
	}
}

// Record writes the guest's pools into the host's environment as a memory
// record under label: 1 to 256 bytes of UTF-8 without NUL (else EINVAL),
// at most 1024 records a run (then EDQUOT); ENOSYS from a host that keeps
// no records, EIO where the environment refuses it.
func Record(label string) error {
	n, err := u32Len("memory_record", len(label))
	if err != nil {
		return err
	}
	return check("memory_record", memoryRecord(unsafe.Pointer(unsafe.StringData(label)), n))
}

// Install rebuilds the guest's pools with layout: a preset name or layout
// JSON of at most 64 KiB, as `vkrt run --layout` takes it. EINVAL for a
// malformed or invalid layout, EBUSY while buffers outside persistent
// windows are live (those of 0 B too), EAGAIN while
// the stream is in an error state, EDQUOT for an arena past the guest's
// quota.
func Install(layout string) error {
	n, err := u32Len("memory_install", len(layout))
	if err != nil {
		return err
	}
	return check("memory_install", memoryInstall(unsafe.Pointer(unsafe.StringData(layout)), n))
}

// BeginPersistent opens a persistent window: buffers made until the
// matching EndPersistent go to the persistent pool. Windows nest at most
// 64 deep (then EINVAL).
func BeginPersistent() error { return check("persistent_begin", persistentBegin()) }

// EndPersistent closes the innermost persistent window; EINVAL with none
// open.
func EndPersistent() error { return check("persistent_end", persistentEnd()) }

// DryRun reports whether the host runs the guest dry. Outside a host it is
// false.
func DryRun() bool {
	var v uint32
	return isDryRun(unsafe.Pointer(&v)) == 0 && v == 1
}

// lastErrorNow is LastError read into the stack before anything
// allocates: an allocation may let another goroutine run, whose failed
// call then replaces the host's message (an EINVAL of memory_record carried
// buffer_free's message). Past a short message's room it reads the rest as
// LastError does.
func lastErrorNow() string {
	var buf [lastErrorRoom]byte
	var n uint32
	switch Status(lastError(unsafe.Pointer(&buf), uint32(len(buf)), unsafe.Pointer(&n))) {
	case OK:
		return string(buf[:n])
	case ERANGE:
		return LastError()
	}
	return ""
}

// lastErrorRoom is the stack room lastErrorNow reads a message into: the
// host's messages name a layout in at most 200 B (memory.Layout.Brief).
const lastErrorRoom = 1024

// LastError is the host's message for the guest's last failed call.
func LastError() string {
	buf := make([]byte, 256)
	for {
		var n uint32
		switch Status(lastError(unsafe.Pointer(unsafe.SliceData(buf)), uint32(len(buf)), unsafe.Pointer(&n))) {
		case OK:
			return string(buf[:n])
		case ERANGE:
			buf = make([]byte, n)
		default:
			return ""
		}
	}
}
