package guest

import (
	"syscall"
	"testing"
	"unsafe"
)

// hugeBytes is n bytes of address space reserved, never touched: a real
// slice past 4 GiB without the memory.
func hugeBytes(t *testing.T, n int) []byte {
	b, err := syscall.Mmap(-1, 0, n, syscall.PROT_NONE, syscall.MAP_PRIVATE|syscall.MAP_ANON|syscall.MAP_NORESERVE)
	if err != nil {
		t.Skipf("cannot reserve %d B of address space: %v", n, err)
	}
	t.Cleanup(func() { syscall.Munmap(b) })
	return b
}

// uint32(len(p)) dropped the high bits: 4 GiB + 16 B went to the host as
// 16 B, moving far less than asked without a word.
func TestLengthsPastU32AreRefused(t *testing.T) {
	p := hugeBytes(t, 1<<32+16)
	b := BufferOf(1, 1<<40)
	requireRefused(t, b.Write(0, p), "buffer_write", EINVAL)
	requireRefused(t, b.Read(0, p), "buffer_read", EINVAL)
	f := unsafe.Slice((*float32)(unsafe.Pointer(unsafe.SliceData(p))), len(p)/4)
	requireRefused(t, b.WriteFloat32s(0, f), "buffer_write", EINVAL)
	_, err := NewFloat32s(f)
	requireRefused(t, err, "buffer_create", EINVAL)
	s := unsafe.String(unsafe.SliceData(p), len(p))
	requireRefused(t, Record(s), "memory_record", EINVAL)
	requireRefused(t, Install(s), "memory_install", EINVAL)
}
