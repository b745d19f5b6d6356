package client

import (
	"context"
	"testing"

	"github.com/vkrt/vkrt/dryrun"
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
