//go:build cgo

package client

import (
	"context"
	"slices"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/vkrt/vkrt/internal/cpuref"
	"github.com/vkrt/vkrt/internal/devtest"
	"github.com/vkrt/vkrt/kernel"
	vkruntime "github.com/vkrt/vkrt/runtime"
	"github.com/vkrt/vkrt/vk" // the Vulkan backend, the default device of a cgo build
)

// The default device of a cgo build is the first Vulkan device.
func TestDefaultDeviceIsTheFirstVulkanDevice(t *testing.T) {
	c := openClient(t)
	if devtest.OnCPU() {
		t.Skipf("the tests run on the cpu device (%s=cpu)", devtest.DeviceEnv)
	}
	devices, err := vk.Devices()
	require.NoError(t, err)
	require.Equal(t, devices[0].Name, c.Device().Name())
	require.IsType(t, &vk.Device{}, c.Device())
}

// A launch whose context ends stops waiting at once, and the stream stays
// usable: what comes next on the device waits for the kernel to end.
func TestCanceledLaunchStopsWaiting(t *testing.T) {
	c := openClient(t)
	if devtest.OnCPU() {
		t.Skip("the cpu device runs a grid's work in no time; this needs a GPU's grid")
	}
	ctx := context.Background()
	x, err := c.Create(ctx, cpuref.Bytes([]float32{-1, 2}))
	require.NoError(t, err)
	out, err := c.Create(ctx, cpuref.Bytes([]float32{5, 5}))
	require.NoError(t, err)
	relu := kernel.ReLU(2)
	// 65535 x 16 work groups take lavapipe about 2 s on 2 cores, and an
	// H200 a fraction of a millisecond (its first, 50 ms): the batch
	// repeats them, doubling uncanceled until it takes 200 ms, then five
	// times that.
	op := LaunchOp{Kernel: relu.Kernel, Grid: [3]uint32{65535, 16, 1}, Buffers: []*Buffer{x, out}, Push: relu.Push}
	ops := []LaunchOp{op}
	for len(ops) < 1<<16 {
		start := time.Now()
		require.NoError(t, c.Stream(ctx).LaunchBatch(ctx, ops))
		if time.Since(start) >= 200*time.Millisecond {
			break
		}
		ops = slices.Repeat(ops, 2)
	}
	if len(ops) > 1 {
		ops = slices.Repeat(ops, 5)
	}
	require.NoError(t, out.Write(ctx, 0, cpuref.Bytes([]float32{5, 5})))
	short, cancel := context.WithTimeout(ctx, 100*time.Millisecond)
	defer cancel()
	start := time.Now()
	err = c.Stream(ctx).LaunchBatch(short, ops)
	require.ErrorIs(t, err, context.DeadlineExceeded, "%d launches", len(ops))
	require.Less(t, time.Since(start), time.Second)
	got, err := out.Read(ctx)
	require.NoError(t, err)
	require.Equal(t, []float32{0, 2}, cpuref.Floats(got), "the kernel ran to its end before the read")
	require.NoError(t, x.Free())
	require.NoError(t, out.Free())
}

// Forty buffers of 128 MiB do not fit lavapipe's 2 GiB heap: the client
// refuses the first that would pass it with a classified error naming the
// numbers, and stays usable.
func TestBuffersPastTheHeapAreRefused(t *testing.T) {
	c := openClient(t)
	if devtest.OnCPU() {
		t.Skip("the cpu device's heap is host memory of 16 GiB: this is lavapipe's 2 GiB heap")
	}
	ctx := context.Background()
	const size = 128 << 20
	heap := c.Properties().MemorySize
	if heap >= 40*size {
		t.Skipf("the %d B heap holds 40 buffers of 128 MiB: this is lavapipe's 2 GiB heap", heap)
	}
	var bufs []*Buffer
	var refused error
	for range 40 {
		b, err := c.Empty(ctx, size)
		if err != nil {
			refused = err
			break
		}
		bufs = append(bufs, b)
	}
	require.ErrorIs(t, refused, vkruntime.ErrOutOfDeviceMemory, "40 buffers of 128 MiB on a heap of %d B", heap)
	var ae *AllocationError
	require.ErrorAs(t, refused, &ae)
	require.Equal(t, uint64(size), ae.Size)
	var oom *vkruntime.OutOfMemoryError
	require.ErrorAs(t, refused, &oom)
	require.Equal(t, heap, oom.HeapSize)
	require.LessOrEqual(t, c.Device().Storage().Allocated(), heap)
	t.Logf("%d buffers of 128 MiB on a %d B heap, then: %v", len(bufs), heap, refused)

	require.NoError(t, bufs[0].Free())
	b, err := c.Empty(ctx, size)
	require.NoError(t, err, "a freed buffer makes room")
	require.NoError(t, b.Write(ctx, 0, []byte{1}))
	for _, b := range append(bufs[1:], b) {
		require.NoError(t, b.Free())
	}
}
