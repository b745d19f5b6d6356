package client

import (
	"context"
	"errors"
	"fmt"
	"sync/atomic"
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/vkrt/vkrt/device"
	"github.com/vkrt/vkrt/device/cpu"
	"github.com/vkrt/vkrt/kernel"
	vkruntime "github.com/vkrt/vkrt/runtime"
)

// ownMemoryRefusedDevice is the cpu device refusing, while refusing is
// set, the memory an op needs of its own once its buffers hold theirs, as
// vk does where a transfer's staging buffer in host-visible memory, or a
// launch's descriptors, cannot be allocated. It counts the ops it refused.
type ownMemoryRefusedDevice struct {
	*cpu.Device
	refusing atomic.Bool
	refused  atomic.Int32
}

func (d *ownMemoryRefusedDevice) refuse(what string) error {
	d.refused.Add(1)
	return fmt.Errorf("vk: vkAllocateMemory (%s) on device 0 (test): %w", what, vkruntime.ErrOutOfDeviceMemory)
}

func (d *ownMemoryRefusedDevice) Download(ctx context.Context, src vkruntime.StorageHandle, dst []byte) error {
	if d.refusing.Load() {
		return d.refuse("staging, 16777216 B")
	}
	return d.Device.Download(ctx, src, dst)
}

func (d *ownMemoryRefusedDevice) Upload(ctx context.Context, dst vkruntime.StorageHandle, data []byte) error {
	if d.refusing.Load() {
		return d.refuse("staging, 16777216 B")
	}
	return d.Device.Upload(ctx, dst, data)
}

func (d *ownMemoryRefusedDevice) Dispatch(ctx context.Context, ops []kernel.Op) error {
	if d.refusing.Load() {
		return device.NothingRan(d.refuse("descriptor pool"))
	}
	return d.Device.Dispatch(ctx, ops)
}

// A read, write or launch whose buffers hold their memory, the device
// refusing the op memory of its own (a transfer's staging buffer), is run
// again after a cleanup and, refused again, says what was refused: it was
// an *AllocationError saying the buffer's size "could not be allocated
// after a cleanup" (a launch's "0 B"), though every buffer held its memory
// and nothing asked for more.
func TestAnOpRefusedMemoryOfItsOwnIsNoAllocationError(t *testing.T) {
	inner, err := cpu.New()
	require.NoError(t, err)
	dev := &ownMemoryRefusedDevice{Device: inner}
	c, err := Open(context.Background(), WithBackend(dev))
	require.NoError(t, err)
	t.Cleanup(func() { require.NoError(t, c.Close()) })
	ctx := context.Background()
	b, err := c.Create(ctx, make([]byte, 4096))
	require.NoError(t, err)
	fresh, err := c.Empty(ctx, 16) // backed at its first use, zero fill pending
	require.NoError(t, err)

	dev.refusing.Store(true)
	for _, tc := range []struct {
		op   func() error
		want string
	}{
		{func() error { _, err := b.Read(ctx); return err },
			fmt.Sprintf("client: stream 0: reading 4096 B of buffer %d at 0: the device had no memory for the transfer itself (buffer %d holds its own), even after a cleanup: vk: vkAllocateMemory (staging", b.ID(), b.ID())},
		{func() error { return b.Write(ctx, 8, []byte{1}) },
			fmt.Sprintf("client: stream 0: writing 1 B to buffer %d at 8: the device had no memory for the transfer itself", b.ID())},
		{func() error { return fresh.Write(ctx, 4, []byte{1}) },
			fmt.Sprintf("client: stream 0: zeroing buffer %d (16 B): the device had no memory for the zero fill itself", fresh.ID())},
		{func() error { _, err := c.Create(ctx, []byte{1, 2, 3, 4}); return err },
			"client: stream 0: writing 4 B to buffer"},
		{func() error { return c.Run(ctx, kernel.Scale(4, 2), b, b) },
			"client: stream 0: launch (scale): the device had no memory for the launch itself (its buffers hold theirs), even after a cleanup: vk: vkAllocateMemory (descriptor pool)"},
	} {
		dev.refused.Store(0)
		err := tc.op()
		require.ErrorIs(t, err, vkruntime.ErrOutOfDeviceMemory)
		var ae *AllocationError
		require.False(t, errors.As(err, &ae), "no buffer was refused memory: %v", err)
		require.ErrorContains(t, err, tc.want)
		require.NotContains(t, err.Error(), "could not be allocated")
		require.EqualValues(t, 2, dev.refused.Load(), "run again after a cleanup: %v", err)
	}
	require.EqualValues(t, 2, c.MemoryUsage(ctx).NumberAllocs, "the refused Create leaves no buffer")

	dev.refusing.Store(false)
	require.NoError(t, b.Write(ctx, 8, []byte{1}))
	got, err := b.Read(ctx)
	require.NoError(t, err)
	require.Equal(t, byte(1), got[8])
}
