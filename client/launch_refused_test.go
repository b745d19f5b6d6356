package client

import (
	"context"
	"errors"
	"fmt"
	"strings"
	"sync/atomic"
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/vkrt/vkrt/device"
	"github.com/vkrt/vkrt/device/cpu"
	"github.com/vkrt/vkrt/dryrun"
	"github.com/vkrt/vkrt/internal/cpuref"
	"github.com/vkrt/vkrt/kernel"
	vkruntime "github.com/vkrt/vkrt/runtime"
)

// A launch binding one buffer where the kernel may not alias it
// (transpose in place) is refused before any buffer gets device memory,
// and a dry run refuses it as the real run does: the overlap was checked
// only once the buffers held memory, so a dry-run buffer got 2 MiB of
// device memory for a refused launch, and the dry run (and a plan
// measured from it) passed a launch its real run refused.
func TestAnAliasedLaunchIsRefusedBeforeItGivesMemory(t *testing.T) {
	c := openClient(t)
	ctx := context.Background()
	x, err := c.Empty(dryrun.With(ctx), 4096) // lazy: no device memory
	require.NoError(t, err)
	before, report := c.StorageStats(), c.MemoryReport(ctx).Dynamic
	require.ErrorIs(t, c.Run(dryrun.With(ctx), kernel.Transpose(32, 32), x, x), kernel.ErrInvalidDispatch, "the dry run refuses it")
	require.ErrorIs(t, c.Run(ctx, kernel.Transpose(32, 32), x, x), kernel.ErrInvalidDispatch)
	require.Equal(t, before, c.StorageStats(), "a refused launch gave a dry-run buffer device memory")
	require.Equal(t, report, c.MemoryReport(ctx).Dynamic, "a refused launch changed the pools")

	y, err := c.Empty(dryrun.With(ctx), 4096)
	require.NoError(t, err)
	require.NoError(t, c.Run(dryrun.With(ctx), kernel.Transpose(32, 32), x, y), "two buffers do not alias")
	require.NoError(t, c.Run(ctx, kernel.Transpose(32, 32), x, y))
}

// A launch the device refuses memory for tells the size of the buffer it
// could not back: it told the sum of every binding's, buffers holding
// memory already included.
func TestARefusedLaunchTellsTheBufferItCouldNotBack(t *testing.T) {
	c := openClient(t, WithMemoryLimit(3<<20))
	ctx := context.Background()
	const size = 1800 << 10
	src, err := c.Empty(ctx, size)
	require.NoError(t, err)
	require.NoError(t, src.Write(ctx, 0, []byte{1})) // src holds memory now
	dst, err := c.Empty(dryrun.With(ctx), size)      // dst holds none
	require.NoError(t, err)
	err = c.Run(ctx, kernel.CopyWords(size/4), src, dst)
	var ae *AllocationError
	require.ErrorAs(t, err, &ae)
	require.EqualValues(t, size, ae.Size, "%v", err)
}

// failingLaterDevice is the cpu device failing the first batch of several
// ops as vk fails one whose later submission the driver refuses memory:
// the ops before the last have run when the error comes.
type failingLaterDevice struct {
	*cpu.Device
	failed atomic.Bool
}

func (d *failingLaterDevice) Dispatch(ctx context.Context, ops []kernel.Op) error {
	if len(ops) < 2 || d.failed.Swap(true) {
		return d.Device.Dispatch(ctx, ops)
	}
	if err := d.Device.Dispatch(ctx, ops[:len(ops)-1]); err != nil {
		return err
	}
	return fmt.Errorf("submission of op %d: %w", len(ops)-1, vkruntime.ErrOutOfDeviceMemory)
}

// A batch the device fails for memory once it has run part of it is not
// run again after a cleanup, as a buffer refused memory is: the retry ran
// the first ops twice, and two in-place scales by 2 gave 8 for 4 with no
// error.
func TestABatchTheDeviceFailedPartWayIsNotRunAgain(t *testing.T) {
	inner, err := cpu.New()
	require.NoError(t, err)
	c, err := Open(context.Background(), WithBackend(&failingLaterDevice{Device: inner}))
	require.NoError(t, err)
	t.Cleanup(func() { require.NoError(t, c.Close()) })
	ctx := context.Background()
	x, err := c.Create(ctx, cpuref.Bytes([]float32{1, 1, 1, 1}))
	require.NoError(t, err)
	err = c.LaunchBatch(ctx, []LaunchOp{Op(kernel.Scale(4, 2), x, x), Op(kernel.Scale(4, 2), x, x)})
	require.ErrorIs(t, err, vkruntime.ErrOutOfDeviceMemory, "the device's failure is the launch's")
	var ae *AllocationError
	require.False(t, errors.As(err, &ae), "no buffer was refused memory: %v", err)
	got, err := x.Read(ctx)
	require.NoError(t, err)
	require.Equal(t, []float32{2, 2, 2, 2}, cpuref.Floats(got), "the first op ran once, and the batch no more")
}

// A launch refused for a buffer names it by its id, the one Buffer.ID
// gives: the check ahead of device memory numbered the launch's buffers
// 1, 2, 3 in the order it met them, so an out of buffer 6 too small was
// "storage 3", which is another buffer.
func TestARefusedLaunchNamesTheBufferByItsID(t *testing.T) {
	c := openClient(t)
	ctx := context.Background()
	var bs []*Buffer
	for range 5 {
		b, err := c.Empty(ctx, 64)
		require.NoError(t, err)
		bs = append(bs, b)
	}
	small, err := c.Empty(ctx, 8)
	require.NoError(t, err)
	for _, ops := range [][]LaunchOp{
		{Op(kernel.Add(4), bs[4], bs[3], small)},
		{Op(kernel.Add(4), bs[0], bs[1], bs[2]), Op(kernel.Add(4), bs[4], small, bs[3])},
	} {
		err := c.LaunchBatch(ctx, ops)
		require.ErrorIs(t, err, kernel.ErrInvalidDispatch)
		require.Contains(t, err.Error(), fmt.Sprintf("storage %d [0, 8) holds 8 B", small.ID()))
	}
	err = c.Run(ctx, kernel.Transpose(4, 4), bs[3], bs[3])
	require.ErrorIs(t, err, kernel.ErrInvalidDispatch)
	require.Contains(t, err.Error(), fmt.Sprintf("storage %d [0, 64), written", bs[3].ID()))
}

// refusingFirstDevice is the cpu device refusing its first batch of
// several ops for memory before any of it ran, and saying so.
type refusingFirstDevice struct {
	*cpu.Device
	calls atomic.Int32
}

func (d *refusingFirstDevice) Dispatch(ctx context.Context, ops []kernel.Op) error {
	if d.calls.Add(1) == 1 && len(ops) > 1 {
		return device.NothingRan(fmt.Errorf("descriptor pool: %w", vkruntime.ErrOutOfDeviceMemory))
	}
	return d.Device.Dispatch(ctx, ops)
}

// A batch the device refused for memory before any op ran
// (device.ErrNothingRan) runs again after a cleanup of the pools, once:
// only a batch that may have run in part is not run again.
func TestABatchTheDeviceRefusedWholeRunsAgain(t *testing.T) {
	inner, err := cpu.New()
	require.NoError(t, err)
	dev := &refusingFirstDevice{Device: inner}
	c, err := Open(context.Background(), WithBackend(dev))
	require.NoError(t, err)
	t.Cleanup(func() { require.NoError(t, c.Close()) })
	ctx := context.Background()
	x, err := c.Create(ctx, cpuref.Bytes([]float32{1, 1, 1, 1}))
	require.NoError(t, err)
	require.NoError(t, c.LaunchBatch(ctx, []LaunchOp{Op(kernel.Scale(4, 2), x, x), Op(kernel.Scale(4, 2), x, x)}))
	require.EqualValues(t, 2, dev.calls.Load(), "the batch ran again after its refusal")
	got, err := x.Read(ctx)
	require.NoError(t, err)
	require.Equal(t, []float32{4, 4, 4, 4}, cpuref.Floats(got), "each op ran once")
}

// A single launch the kernel's checks refuse says "client:" as a batch's
// refusal and the client's other errors do: it came back in the kernel's
// words alone ("vkrt: invalid dispatch …"). errors.Is and errors.As still
// reach the kernel's sentinel and typed error, in a dry run too.
func TestARefusedSingleLaunchSpeaksAsTheClient(t *testing.T) {
	c := openClient(t)
	ctx := context.Background()
	x, err := c.Empty(ctx, 64)
	require.NoError(t, err)
	for _, run := range []context.Context{ctx, dryrun.With(ctx)} {
		for what, err := range map[string]error{
			"Run":         c.Run(run, kernel.ReLU(32), x),
			"Launch":      c.DefaultStream().Launch(run, kernel.ReLU(32).Kernel, kernel.ReLU(32).Grid, []*Buffer{x}, kernel.ReLU(32).Push),
			"LaunchBatch": c.LaunchBatch(run, []LaunchOp{Op(kernel.ReLU(32), x)}),
		} {
			require.ErrorIs(t, err, kernel.ErrInvalidDispatch, what)
			var de *kernel.DispatchError
			require.ErrorAs(t, err, &de, what)
			require.Equal(t, "relu", de.Kernel, what)
			require.True(t, strings.HasPrefix(err.Error(), `client: launch: vkrt: invalid dispatch of kernel "relu": `), "%s: %v", what, err)
		}
	}
	err = c.LaunchBatch(ctx, []LaunchOp{Op(kernel.ReLU(16), x, x), Op(kernel.ReLU(32), x)})
	require.True(t, strings.HasPrefix(err.Error(), `client: launch 1 of a batch of 2: vkrt: invalid dispatch of kernel "relu": `), "%v", err)
}

// A launch given a buffer it cannot bind (freed, nil, of another stream)
// names the binding as the kernel's refusals name the launch: a single
// launch said "launch 0 (copy)", as if it were the first of a batch, and
// an op of a batch "launch 1 (copy)", where the kernel's refusal of the
// same op said "launch 1 of a batch of 2". The refusal keeps its class.
func TestALaunchNamesTheBindingItRefusesAsItsOtherRefusals(t *testing.T) {
	c := openClient(t)
	ctx := context.Background()
	x, err := c.Create(ctx, make([]byte, 16))
	require.NoError(t, err)
	freed, err := c.Empty(ctx, 16)
	require.NoError(t, err)
	require.NoError(t, freed.Free())
	s, err := c.NewStream()
	require.NoError(t, err)
	foreign, err := s.Empty(ctx, 16)
	require.NoError(t, err)
	for _, tc := range []struct {
		b    *Buffer
		kind error
	}{{freed, vkruntime.ErrNotFound}, {nil, vkruntime.ErrNotFound}, {foreign, ErrForeignBuffer}} {
		err := c.Run(ctx, kernel.CopyWords(4), x, tc.b)
		require.ErrorIs(t, err, tc.kind)
		require.True(t, strings.HasPrefix(err.Error(), "client: launch (copy), binding 1: "), "%v", err)
		err = c.LaunchBatch(ctx, []LaunchOp{Op(kernel.CopyWords(4), x, x), Op(kernel.CopyWords(4), tc.b, x)})
		require.ErrorIs(t, err, tc.kind)
		require.True(t, strings.HasPrefix(err.Error(), "client: launch 1 of a batch of 2 (copy), binding 0: "), "%v", err)
	}
}
