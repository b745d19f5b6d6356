package guest

import (
	"encoding/binary"
	"unsafe"
)

// Buffer is a device buffer the guest holds: a handle and its size.
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
	b, err := NewBuffer(4 * uint64(len(v)))
	if err != nil {
		return nil, err
	}
	if err := b.WriteFloat32s(0, v); err != nil {
		b.Free()
		return nil, err
	}
	return b, nil
}

// BufferOf is a Buffer value naming handle, as the host gave it to this
// guest by other means; the host checks it on every call like any other.
func BufferOf(handle uint32, size uint64) *Buffer { return &Buffer{handle: handle, size: size} }

// Handle is the buffer's handle.
func (b *Buffer) Handle() uint32 { return b.handle }

// Size is the buffer's size in bytes.
func (b *Buffer) Size() uint64 { return b.size }

// Write copies p into the buffer at offset (dropped in a dry run).
func (b *Buffer) Write(offset uint64, p []byte) error {
	return check("buffer_write", bufferWrite(b.handle, offset, unsafe.Pointer(unsafe.SliceData(p)), uint32(len(p))))
}

// Read fills p from the buffer at offset (zeros in a dry run).
func (b *Buffer) Read(offset uint64, p []byte) error {
	return check("buffer_read", bufferRead(b.handle, offset, unsafe.Pointer(unsafe.SliceData(p)), uint32(len(p))))
}

// WriteFloat32s copies v into the buffer from element index at.
func (b *Buffer) WriteFloat32s(at uint64, v []float32) error {
	return b.Write(4*at, floatBytes(v))
}

// Float32s reads the whole buffer as float32s.
func (b *Buffer) Float32s() ([]float32, error) {
	v := make([]float32, b.size/4)
	if err := b.Read(0, floatBytes(v)); err != nil {
		return nil, err
	}
	return v, nil
}

// Free returns the buffer; its handle is stale from then on.
func (b *Buffer) Free() error { return check("buffer_free", bufferFree(b.handle)) }

// floatBytes views v as its little-endian bytes (WebAssembly is
// little-endian, as are the hosts this package tests on).
func floatBytes(v []float32) []byte {
	return unsafe.Slice((*byte)(unsafe.Pointer(unsafe.SliceData(v))), 4*len(v))
}

// Run runs launches in order as one batch, one submission on the device,
// each launch seeing the writes of those before it. The host checks the
// whole batch before anything runs.
func Run(launches ...Launch) error {
	desc, err := AppendDescriptor(nil, launches...)
	if err != nil {
		return err
	}
	return check("launch", launch(unsafe.Pointer(unsafe.SliceData(desc)), uint32(len(desc))))
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
// record under label.
func Record(label string) error {
	return check("memory_record", memoryRecord(unsafe.Pointer(unsafe.StringData(label)), uint32(len(label))))
}

// Install rebuilds the guest's pools with layout: a preset name or layout
// JSON, as `vkrt run --layout` takes it. EBUSY while buffers are live.
func Install(layout string) error {
	return check("memory_install", memoryInstall(unsafe.Pointer(unsafe.StringData(layout)), uint32(len(layout))))
}

// BeginPersistent opens a persistent window: buffers made until the
// matching EndPersistent go to the persistent pool. Windows nest.
func BeginPersistent() error { return check("persistent_begin", persistentBegin()) }

// EndPersistent closes the innermost persistent window.
func EndPersistent() error { return check("persistent_end", persistentEnd()) }

// DryRun reports whether the host runs the guest dry. Outside a host it is
// false.
func DryRun() bool {
	var v uint32
	return isDryRun(unsafe.Pointer(&v)) == 0 && v == 1
}

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
