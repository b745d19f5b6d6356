//go:build cgo

package vk

import (
	"testing"

	"github.com/vkrt/vkrt/kernel"
)

// Driver allocation through the storage: what a pool's page costs.
func BenchmarkStorageAllocFree4KiB(b *testing.B) {
	d := openTestDevice(b)
	s := d.storage
	b.ReportAllocs()
	for b.Loop() {
		h, err := s.Alloc(4 << 10)
		if err != nil {
			b.Fatal(err)
		}
		s.Dealloc(h.ID)
		s.Flush()
	}
}

func BenchmarkUpload1MiB(b *testing.B) {
	d := openTestDevice(b)
	h := alloc(b, d, 1<<20)
	data := make([]byte, 1<<20)
	b.SetBytes(1 << 20)
	for b.Loop() {
		if err := d.Upload(b.Context(), h, data); err != nil {
			b.Fatal(err)
		}
	}
}

func BenchmarkCopyKernel1MiB(b *testing.B) {
	d := openTestDevice(b)
	const words = 1 << 18
	src, dst := alloc(b, d, 4*words), alloc(b, d, 4*words)
	b.SetBytes(2 * 4 * words) // read and written
	for b.Loop() {
		if err := run(b, d, kernel.CopyWords(words), src, dst); err != nil {
			b.Fatal(err)
		}
	}
}

func BenchmarkMatMul128(b *testing.B) {
	d := openTestDevice(b)
	const n = 128
	a, bb, c := alloc(b, d, 4*n*n), alloc(b, d, 4*n*n), alloc(b, d, 4*n*n)
	for b.Loop() {
		if err := run(b, d, kernel.MatMul(n, n, n), a, bb, c); err != nil {
			b.Fatal(err)
		}
	}
	b.ReportMetric(2*n*n*n*float64(b.N)/b.Elapsed().Seconds()/1e9, "GFLOP/s")
}
