package client

import (
	"context"
	"strconv"
	"testing"
	"time"

	"github.com/vkrt/vkrt/dryrun"
	"github.com/vkrt/vkrt/kernel"
)

// BenchmarkEmptyFree is a pool round trip of a 64 KiB buffer: for real
// (zeroed on the device each time) and dry (bookkeeping only).
func BenchmarkEmptyFree(b *testing.B) {
	c := openClient(b)
	for name, ctx := range map[string]context.Context{"real": context.Background(), "dry": dryrun.With(context.Background())} {
		b.Run(name, func(b *testing.B) {
			for b.Loop() {
				buf, err := c.Empty(ctx, 64<<10)
				if err != nil {
					b.Fatal(err)
				}
				if err := buf.Free(); err != nil {
					b.Fatal(err)
				}
			}
		})
	}
}

// BenchmarkForward is one forward pass of each test model, real and dry: the
// dry run pays the pools' bookkeeping and the launch checks, not the
// kernels.
func BenchmarkForward(b *testing.B) {
	c := openClient(b)
	models := []struct {
		name string
		m    model
	}{{"mlp", newMLP(1)}, {"block", newBlock(1)}}
	for _, m := range models {
		for name, ctx := range map[string]context.Context{"real": context.Background(), "dry": dryrun.With(context.Background())} {
			b.Run(m.name+"/"+name, func(b *testing.B) {
				for b.Loop() {
					if _, err := m.m.forward(ctx, c); err != nil {
						b.Fatal(err)
					}
				}
			})
		}
	}
}

// bufferSizes are the sizes BenchmarkBufferCreateFree compares at: a small
// activation and a large weight.
var bufferSizes = []struct {
	name  string
	bytes uint64
}{{"4KiB", 4 << 10}, {"64MiB", 64 << 20}}

// BenchmarkBufferCreateFree is the reason the pools exist, measured in one
// run: "pool" is a buffer made and freed through the stream's pools on a
// page they already hold; "driver" is one fresh device allocation of the
// same size and its release through the device's storage (vkCreateBuffer,
// vkAllocateMemory, bind, then vkDestroyBuffer and vkFreeMemory at Flush),
// what every buffer would cost without pools. Each driver run reports
// pool-speedup, its time per buffer over the pool's at that size.
func BenchmarkBufferCreateFree(b *testing.B) {
	c := openClient(b)
	ctx := context.Background()
	storage := c.Device().Storage()
	poolNsPerOp := map[uint64]float64{}
	b.Run("pool", func(b *testing.B) {
		for _, size := range bufferSizes {
			b.Run(size.name, func(b *testing.B) {
				// The first round trip maps the page every later one reuses.
				createFree(b, ctx, c, size.bytes)
				before := storage.Allocations()
				for b.Loop() {
					createFree(b, ctx, c, size.bytes)
				}
				if after := storage.Allocations(); after != before {
					b.Fatalf("%d B buffers through the pools: the storage went from %d to %d device allocations; the pools should reuse their page", size.bytes, before, after)
				}
				poolNsPerOp[size.bytes] = nsPerOp(b)
			})
		}
	})
	b.Run("driver", func(b *testing.B) {
		for _, size := range bufferSizes {
			b.Run(size.name, func(b *testing.B) {
				before := storage.Allocations()
				for b.Loop() {
					h, err := storage.Alloc(size.bytes)
					if err != nil {
						b.Fatal(err)
					}
					storage.Dealloc(h.ID)
					storage.Flush()
				}
				if after := storage.Allocations(); after != before {
					b.Fatalf("%d B device allocations: the storage went from %d to %d allocations; each should be released", size.bytes, before, after)
				}
				if pool := poolNsPerOp[size.bytes]; pool > 0 {
					b.ReportMetric(nsPerOp(b)/pool, "pool-speedup")
				}
			})
		}
	})
}

func createFree(b *testing.B, ctx context.Context, c *Client, size uint64) {
	buf, err := c.Empty(ctx, size)
	if err != nil {
		b.Fatal(err)
	}
	if err := buf.Free(); err != nil {
		b.Fatal(err)
	}
}

// nsPerOp is the time per iteration of a benchmark whose b.Loop has ended.
func nsPerOp(b *testing.B) float64 {
	return float64(b.Elapsed().Nanoseconds()) / float64(b.N)
}

// BenchmarkLaunchBatchOfFreshBuffers launches one fill on each of n
// buffers that were never written, in one batch (each is cleared in the
// batch's own submission first), and reports the time per op: flat in n
// where clearing each buffer once is found in constant time.
func BenchmarkLaunchBatchOfFreshBuffers(b *testing.B) {
	c := openClient(b)
	ctx := context.Background()
	for _, n := range []int{1_000, 10_000} {
		b.Run(strconv.Itoa(n), func(b *testing.B) {
			var spent time.Duration
			for b.Loop() {
				ops := make([]LaunchOp, n)
				bufs := make([]*Buffer, n)
				for i := range ops {
					buf, err := c.Empty(ctx, 4)
					if err != nil {
						b.Fatal(err)
					}
					bufs[i], ops[i] = buf, Op(kernel.FillWords(1, 7), buf)
				}
				start := time.Now()
				if err := c.LaunchBatch(ctx, ops); err != nil {
					b.Fatal(err)
				}
				spent += time.Since(start)
				for _, buf := range bufs {
					if err := buf.Free(); err != nil {
						b.Fatal(err)
					}
				}
			}
			b.ReportMetric(float64(spent.Nanoseconds())/float64(b.N*n), "ns/op-in-batch")
		})
	}
}
