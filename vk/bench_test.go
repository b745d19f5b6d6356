//go:build cgo

package vk

import (
	"testing"

	"github.com/vkrt/vkrt/kernel"
	vkruntime "github.com/vkrt/vkrt/runtime"
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

// A sparse bind submission (vkQueueBindSparse, waited on), as a virtual
// pool makes one per reservation that needs memory bound: one granule, a
// run of 256 granules in one bind, and 64 granules apart in one submission.
// Each op binds, the next unbinds, so the figure is per submission.
func BenchmarkSparseBind(b *testing.B) {
	d := openTestDevice(b)
	s := d.storage
	g := s.SparseGranule()
	if g == 0 {
		b.Skipf("device %s has no sparse residency", d.Name())
	}
	v, err := s.ReserveVirtual(1024 * g)
	if err != nil {
		b.Fatal(err)
	}
	defer s.ReleaseVirtual(v.ID)
	m := alloc(b, d, 256*g)
	for _, c := range []struct {
		name  string
		binds []vkruntime.SparseBind
	}{
		{"granule", []vkruntime.SparseBind{{Size: g, Memory: m.ID}}},
		{"run-of-256", []vkruntime.SparseBind{{Size: 256 * g, Memory: m.ID}}},
		{"64-apart", func() []vkruntime.SparseBind {
			out := make([]vkruntime.SparseBind, 64)
			for i := range out {
				out[i] = vkruntime.SparseBind{Offset: uint64(2*i) * g, Size: g, Memory: m.ID, MemoryOffset: uint64(i) * g}
			}
			return out
		}()},
	} {
		unbinds := make([]vkruntime.SparseBind, len(c.binds))
		for i, bd := range c.binds {
			unbinds[i] = vkruntime.SparseBind{Offset: bd.Offset, Size: bd.Size}
		}
		b.Run(c.name, func(b *testing.B) {
			bound := false
			for b.Loop() {
				next := c.binds
				if bound {
					next = unbinds
				}
				if err := s.Bind(v.ID, next); err != nil {
					b.Fatal(err)
				}
				bound = !bound
			}
			if bound {
				if err := s.Bind(v.ID, unbinds); err != nil {
					b.Fatal(err)
				}
			}
		})
	}
}
