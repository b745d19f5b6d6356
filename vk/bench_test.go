//go:build cgo

package vk

import (
	"context"
	"fmt"
	"testing"
	"time"

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
// pool makes one per reservation that needs memory bound: contiguous runs
// of 1 to 16,384 granules in one bind each (64 KiB to 1 GiB on 64 KiB
// granules), 4,096 of them one granule off 2 MiB alignment, and 16, 64 or
// 256 single granules apart in one submission.
// Each op binds, the next unbinds, so the figure is per submission; the
// ranges and bytes a submission names are reported beside it, so what the
// device's time grows with (submissions, ranges or bytes) reads off one
// run.
func BenchmarkSparseBind(b *testing.B) {
	d := openTestDevice(b)
	s := d.storage
	g := s.SparseGranule()
	if g == 0 {
		b.Skipf("device %s has no sparse residency", d.Name())
	}
	const granules = 16384
	v, err := s.ReserveVirtual(2 * granules * g)
	if err != nil {
		b.Fatal(err)
	}
	defer s.ReleaseVirtual(v.ID)
	m := alloc(b, d, granules*g)
	type bindCase struct {
		name  string
		binds []vkruntime.SparseBind
	}
	var cases []bindCase
	for _, n := range []uint64{1, 16, 256, 4096, granules} {
		cases = append(cases, bindCase{fmt.Sprintf("run-of-%d", n), []vkruntime.SparseBind{{Size: n * g, Memory: m.ID}}})
	}
	// The same 256 MiB a granule past 2 MiB alignment, in the range and
	// in the memory: a driver may map aligned runs with larger pages.
	cases = append(cases, bindCase{"run-of-4096-unaligned", []vkruntime.SparseBind{{Offset: g, Size: 4096 * g, Memory: m.ID, MemoryOffset: g}}})
	for _, n := range []int{16, 64, 256} {
		apart := make([]vkruntime.SparseBind, n)
		for i := range apart {
			apart[i] = vkruntime.SparseBind{Offset: uint64(2*i) * g, Size: g, Memory: m.ID, MemoryOffset: uint64(i) * g}
		}
		cases = append(cases, bindCase{fmt.Sprintf("%d-apart", n), apart})
	}
	for _, c := range cases {
		unbinds := make([]vkruntime.SparseBind, len(c.binds))
		var bytes uint64
		for i, bd := range c.binds {
			unbinds[i] = vkruntime.SparseBind{Offset: bd.Offset, Size: bd.Size}
			bytes += bd.Size
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
			b.ReportMetric(float64(len(c.binds)), "ranges/op")
			b.ReportMetric(float64(bytes)/(1<<20), "MiB/op")
		})
	}
}

// BenchmarkBatchOf64SmallOps is a batch of 64 small fills under a context
// that cannot end (one submission) and under one that can (submissions by
// the device's pace, so that no op starts once it has ended):
// "paced-cost" is the second's time per batch over the first's, measured
// in one run.
func BenchmarkBatchOf64SmallOps(b *testing.B) {
	d := openTestDevice(b)
	const n, ops = 1024, 64
	h := alloc(b, d, 4*n)
	batch := make([]kernel.Op, ops)
	for i := range batch {
		batch[i] = kernel.FillWords(n, uint32(i)).With(h)
	}
	var oneSubmission float64
	for _, c := range []struct {
		name string
		ctx  context.Context
	}{{"one-submission", context.Background()}, {"paced", b.Context()}} {
		b.Run(c.name, func(b *testing.B) {
			start := time.Now()
			for b.Loop() {
				if err := d.Dispatch(c.ctx, batch); err != nil {
					b.Fatal(err)
				}
			}
			perBatch := float64(time.Since(start)) / float64(b.N)
			if c.ctx.Done() == nil {
				oneSubmission = perBatch
			} else if oneSubmission > 0 {
				b.ReportMetric(perBatch/oneSubmission, "paced-cost")
			}
		})
	}
}
