package client

import (
	"context"
	"errors"
	"fmt"

	"github.com/vkrt/vkrt/device"
	"github.com/vkrt/vkrt/dryrun"
	"github.com/vkrt/vkrt/kernel"
	vkruntime "github.com/vkrt/vkrt/runtime"
)

// Launch runs kernel k over grid with buffers bound in order (binding i is
// buffers[i]) and push constants push, and waits for it. Under a dry run the
// launch is validated (kernel, bindings, push constants, bounds, grid) and
// dropped; otherwise the buffers get device memory first if they have none.
// When ctx ends while the device runs the kernel, Launch returns ctx.Err()
// without waiting; what the device already runs may still finish, before
// anything else on it, but no more of the launch starts: its outputs may
// be partly written (device.Device's Dispatch says how each backend stops).
func (s *Stream) Launch(ctx context.Context, k kernel.Kernel, grid [3]uint32, buffers []*Buffer, push []byte) error {
	return s.LaunchBatch(ctx, []LaunchOp{{Kernel: k, Grid: grid, Buffers: buffers, Push: push}})
}

// LaunchOp is one launch of a batch.
type LaunchOp struct {
	Kernel  kernel.Kernel
	Grid    [3]uint32
	Buffers []*Buffer
	Push    []byte
}

// Op pairs one of the kernel package's typed launches with its buffers.
func Op(l kernel.Launch, buffers ...*Buffer) LaunchOp {
	return LaunchOp{Kernel: l.Kernel, Grid: l.Grid, Buffers: buffers, Push: l.Push}
}

// LaunchBatch runs ops in order in one submission, each one's writes
// visible to the next, and waits for them: one round trip to the device
// instead of one per launch. Every op is checked before any runs, so a
// refused batch runs nothing and writes no byte. One refused for device
// memory may leave buffers of it that a dry run made holding the memory
// they were given before the one refused: they keep it while they live,
// and need it to be used. A batch the device fails once it may have run
// part of it (out of memory for a later submission among them) is not run
// again after a cleanup, as a refused buffer is; one the device refused
// before any op ran (device.ErrNothingRan) is.
// Under a dry run the ops are checked and dropped.
func (s *Stream) LaunchBatch(ctx context.Context, ops []LaunchOp) error {
	if s.isNil() {
		return ErrNil
	}
	if err := ctxErr(ctx); err != nil {
		return err
	}
	dry := dryrun.Active(ctx)
	limits := s.c.dev.Limits()
	// refused is the buffer the device refused memory, told in the
	// error (the sum of every binding's size was, backed ones included).
	var refused uint64
	ctx, done := s.c.callContext(ctx, !dry)
	defer done()
	return closedBy(ctx, s.withMemoryOf(&refused, func() error {
		for n, op := range ops {
			for i, b := range op.Buffers {
				if err := s.owns(b); err != nil {
					if len(ops) == 1 {
						return prefixed(err, "launch (%s), binding %d", op.Kernel.Name, i)
					}
					return prefixed(err, "launch %d of a batch of %d (%s), binding %d", n, len(ops), op.Kernel.Name, i)
				}
			}
		}
		// Every op is checked on its buffers' sizes before any buffer gets
		// device memory: a refused batch materializes no lazy buffer. Each
		// buffer stands for itself, by its id (never 0), so a binding the
		// kernel may not alias is refused here too, in a dry run as in the
		// real one (with id 0 the overlap went unchecked until the
		// buffers held memory), and a refusal names the storage by the
		// buffer's id (numbered apart from them, "storage 3" was buffer 6).
		for n, op := range ops {
			handles := make([]vkruntime.StorageHandle, len(op.Buffers))
			for i, b := range op.Buffers {
				// Slices are aligned by construction; only the size matters.
				handles[i] = vkruntime.StorageHandle{ID: vkruntime.StorageID(b.id), Size: b.size}
			}
			if err := kernel.Validate(op.Kernel, op.Grid, handles, op.Push, limits); err != nil {
				return batchError(n, len(ops), err)
			}
		}
		if dry {
			return nil
		}
		var fills, dispatches []kernel.Op
		var cleared []*buffer
		var clearing map[*buffer]bool // the buffers in cleared
		for n, op := range ops {
			handles := make([]vkruntime.StorageHandle, len(op.Buffers))
			for i, b := range op.Buffers {
				if err := s.back(b); err != nil {
					refused = b.size
					return err
				}
				handles[i] = b.storage
				if b.zeroPending && !clearing[b.buffer] {
					// The buffer reads as zeros: clear it in the batch's own
					// submission, ahead of the kernels. (Found in a slice,
					// a batch of n fresh buffers took n^2/2 steps.)
					if clearing == nil {
						clearing = map[*buffer]bool{}
					}
					clearing[b.buffer] = true
					fills = append(fills, zeroFill(b.slice))
					cleared = append(cleared, b.buffer)
				}
			}
			if err := kernel.Validate(op.Kernel, op.Grid, handles, op.Push, limits); err != nil {
				return batchError(n, len(ops), err) // before any fill: a refused batch changes nothing
			}
			dispatches = append(dispatches, kernel.Op{Kernel: op.Kernel, Grid: op.Grid, Bindings: handles, Push: op.Push})
		}
		if err := s.c.dev.Dispatch(ctx, append(fills, dispatches...)); err != nil {
			s.noteDeviceError(err)
			if errors.Is(err, device.ErrNothingRan) {
				// Refused whole: a cleanup and a second run may cure it.
				// Refused memory, it is the launch's own (its
				// descriptors), every buffer of it holding its memory.
				what := fmt.Sprintf("a batch of %d launches", len(ops))
				if len(ops) == 1 {
					what = fmt.Sprintf("launch (%s)", ops[0].Kernel.Name)
				}
				if own := s.opMemory(err, "the launch itself (its buffers hold theirs)", "%s", what); own != nil {
					return own
				}
				return prefixed(err, "stream %d", s.id)
			}
			err = prefixed(err, "stream %d", s.id)
			// Otherwise the device may have run part of the batch before it
			// failed (vk submits one in pieces): out of memory or not, a
			// second run after a cleanup would apply those ops twice.
			return &ranError{err}
		}
		for _, b := range cleared {
			b.zeroPending = false
		}
		return nil
	}))
}

// batchError is the kernel's refusal of op n of a batch of of ops, in the
// client's words ("client: launch: vkrt: invalid dispatch …", "client:
// launch 1 of a batch of 2: …"); errors.Is and errors.As still find the
// kernel's ErrInvalidDispatch and *kernel.DispatchError.
func batchError(n, of int, err error) error {
	if of == 1 {
		return prefixed(err, "launch")
	}
	return prefixed(err, "launch %d of a batch of %d", n, of)
}

// Run launches one of the kernel package's typed launches (kernel.Add,
// kernel.MatMul, …) with its bindings.
func (s *Stream) Run(ctx context.Context, l kernel.Launch, buffers ...*Buffer) error {
	return s.Launch(ctx, l.Kernel, l.Grid, buffers, l.Push)
}

// Empty makes a zero-filled buffer of size bytes on the calling stream.
func (c *Client) Empty(ctx context.Context, size uint64) (*Buffer, error) {
	s, err := c.CallingStream(ctx)
	if err != nil {
		return nil, err
	}
	return s.Empty(ctx, size)
}

// Create makes a buffer holding a copy of data on the calling stream.
func (c *Client) Create(ctx context.Context, data []byte) (*Buffer, error) {
	s, err := c.CallingStream(ctx)
	if err != nil {
		return nil, err
	}
	return s.Create(ctx, data)
}

// LaunchBatch runs launches in one submission on the calling stream; see
// Stream.LaunchBatch.
func (c *Client) LaunchBatch(ctx context.Context, ops []LaunchOp) error {
	s, err := c.CallingStream(ctx)
	if err != nil {
		return err
	}
	return s.LaunchBatch(ctx, ops)
}

// Run launches a typed launch on the calling stream; see Stream.Run.
func (c *Client) Run(ctx context.Context, l kernel.Launch, buffers ...*Buffer) error {
	s, err := c.CallingStream(ctx)
	if err != nil {
		return err
	}
	return s.Run(ctx, l, buffers...)
}

// zeroFill is the fill op that clears a buffer's whole slice; slices are
// whole alignment units, and the alignment is a multiple of 4 bytes.
func zeroFill(slice vkruntime.StorageHandle) kernel.Op {
	return kernel.FillWords(uint32(slice.Size/4), 0).With(slice)
}
