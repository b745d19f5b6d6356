package client

import (
	"context"
	"fmt"
	"slices"

	"github.com/vkrt/vkrt/dryrun"
	vkruntime "github.com/vkrt/vkrt/runtime"
	"github.com/vkrt/vkrt/vk"
)

// Launch runs kernel k over grid with buffers bound in order (binding i is
// buffers[i]) and push constants push, and waits for it. Under a dry run the
// launch is validated (kernel, bindings, push constants, bounds, grid) and
// dropped; otherwise the buffers get device memory first if they have none.
func (s *Stream) Launch(ctx context.Context, k vk.Kernel, grid [3]uint32, buffers []*Buffer, push []byte) error {
	if err := ctx.Err(); err != nil {
		return err
	}
	dry := dryrun.Active(ctx)
	var size uint64
	for _, b := range buffers {
		size += bufferSize(b)
	}
	return s.withMemory(size, func() error {
		handles := make([]vkruntime.StorageHandle, len(buffers))
		var fills []vk.Op
		var cleared []*Buffer
		for i, b := range buffers {
			if err := s.owns(b); err != nil {
				return fmt.Errorf("client: launching %s, binding %d: %w", k.Name, i, err)
			}
			if dry {
				// Slices are aligned by construction; only the size matters.
				handles[i] = vkruntime.StorageHandle{Size: b.size}
				continue
			}
			if err := s.back(b); err != nil {
				return err
			}
			handles[i] = b.storage
			if b.zeroPending && !slices.Contains(cleared, b) {
				// Buffers read as zeros: clear them in the launch's own
				// submission, ahead of the kernel.
				fills = append(fills, vk.FillWords(uint32(b.slice.Size/4), 0).With(b.slice))
				cleared = append(cleared, b)
			}
		}
		if dry {
			return s.c.dev.ValidateDispatch(k, grid, handles, push)
		}
		if err := s.c.dev.ValidateDispatch(k, grid, handles, push); err != nil {
			return err // before any fill, so a refused launch changes nothing
		}
		ops := append(fills, vk.Op{Kernel: k, Grid: grid, Bindings: handles, Push: push})
		if err := s.c.dev.DispatchBatch(ops); err != nil {
			s.noteDeviceError(err)
			return fmt.Errorf("client: stream %d: %w", s.id, err)
		}
		for _, b := range cleared {
			b.zeroPending = false
		}
		return nil
	})
}

// Run launches one of vk's typed launches (vk.Add, vk.MatMul, …) with its
// bindings.
func (s *Stream) Run(ctx context.Context, l vk.Launch, buffers ...*Buffer) error {
	return s.Launch(ctx, l.Kernel, l.Grid, buffers, l.Push)
}

// Empty makes a zero-filled buffer of size bytes on the calling stream.
func (c *Client) Empty(ctx context.Context, size uint64) (*Buffer, error) {
	return c.Stream(ctx).Empty(ctx, size)
}

// Create makes a buffer holding a copy of data on the calling stream.
func (c *Client) Create(ctx context.Context, data []byte) (*Buffer, error) {
	return c.Stream(ctx).Create(ctx, data)
}

// Launch runs a kernel on the calling stream; see Stream.Launch.
func (c *Client) Launch(ctx context.Context, k vk.Kernel, grid [3]uint32, buffers []*Buffer, push []byte) error {
	return c.Stream(ctx).Launch(ctx, k, grid, buffers, push)
}

// Run launches a typed launch on the calling stream; see Stream.Run.
func (c *Client) Run(ctx context.Context, l vk.Launch, buffers ...*Buffer) error {
	return c.Stream(ctx).Run(ctx, l, buffers...)
}
