package client

import (
	"context"
	"fmt"
	"strings"
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/vkrt/vkrt/device/cpu"
	"github.com/vkrt/vkrt/kernel"
	"github.com/vkrt/vkrt/memory"
	vkruntime "github.com/vkrt/vkrt/runtime"
	"github.com/vkrt/vkrt/runtime/environment"
)

func TestOpenOptions(t *testing.T) {
	c := openClient(t) // skips or fails first when there is no device
	ctx := context.Background()
	require.NotEmpty(t, c.Device().Name())
	require.Equal(t, c.Device().Properties(), c.Properties())

	_, err := Open(ctx, WithDevice(1<<20))
	require.ErrorContains(t, err, "no")
	require.ErrorContains(t, err, "device 1048576")

	// A layout the device cannot honour is an invalid option, and an
	// *InstallError of the pools.
	_, err = Open(ctx, WithLayout(memory.SlicedLayout(memory.SlicedPool{PageSize: 0})))
	var ie *memory.InstallError
	require.ErrorAs(t, err, &ie)
	require.Equal(t, memory.InvalidLayout, ie.Kind)
	require.ErrorIs(t, err, ErrInvalidOption)

	_, err = Open(ctx, WithEnvironment("no/such"))
	require.ErrorIs(t, err, environment.ErrInvalidName)

	// A plan of 200,000 places refused for its last one says so in a line,
	// not with the whole plan (2.9 MB of JSON in the message).
	slots := make([]memory.ArenaSlot, 200000)
	for i := range slots {
		slots[i] = memory.ArenaSlot{Size: 256, Offset: 256 * uint64(i)}
	}
	slots[len(slots)-1].Offset = 3
	d, err := cpu.New()
	require.NoError(t, err)
	_, err = Open(ctx, WithBackend(d), WithLayout(memory.ArenaLayout(memory.ArenaPlan{Pages: []uint64{256 * 200000}, Slots: slots})))
	require.ErrorAs(t, err, &ie)
	require.ErrorIs(t, err, ErrInvalidOption)
	require.Equal(t, "client: initial layout an Arena plan of 1 page (51200000 B), 200000 slots and 0 fallback pools: the pool layout cannot be honoured: arena slot 199999: offset 3 is not a multiple of the alignment of 256 B", err.Error())

	// A page past the storage's largest allocation is refused by the
	// default stream's pools, and is still the initial layout's fault.
	d, err = cpu.New(cpu.WithMaxPageSize(1 << 20))
	require.NoError(t, err)
	_, err = Open(ctx, WithBackend(d), WithLayout(memory.SlicedLayout(memory.SlicedPool{PageSize: 2 << 20})))
	require.ErrorAs(t, err, &ie)
	require.Equal(t, memory.InvalidLayout, ie.Kind)
	require.ErrorIs(t, err, ErrInvalidOption, "refused by the default stream's pools")
	require.Equal(t, `client: initial layout {"Sliced":[{"page_size":2097152,"pages":null,"max_slice":null}]}: the pool layout cannot be honoured: pool 0: a page of 2097152 B is larger than the backend's largest allocation of 1048576 B`, err.Error())

	direct := openClient(t, WithLayout(memory.DirectLayout()))
	require.True(t, direct.DefaultStream().Layout().Equal(memory.DirectLayout()))
	s, err := direct.NewStream()
	require.NoError(t, err)
	require.Equal(t, []*Stream{direct.DefaultStream(), s}, direct.Streams())
	require.Error(t, direct.DefaultStream().Close(), "the default stream closes with the client")

	canceled, cancel := context.WithCancel(ctx)
	cancel()
	_, err = c.Empty(canceled, 16)
	require.ErrorIs(t, err, context.Canceled)
}

func TestClosedClient(t *testing.T) {
	c := openClient(t)
	b, err := c.Empty(context.Background(), 64)
	require.NoError(t, err)
	require.NoError(t, c.Close())
	require.NoError(t, c.Close(), "closing twice is harmless")
	_, err = c.Empty(context.Background(), 16)
	require.ErrorIs(t, err, ErrClosed)
	_, err = b.Read(context.Background())
	require.ErrorIs(t, err, ErrClosed)
	_, err = c.NewStream()
	require.ErrorIs(t, err, ErrClosed)
}

// A closed client is a closed device to the caller: its refusals match
// runtime.ErrClosed, the class every backend's closed device answers with,
// as well as ErrClosed. A stream closed on its own leaves the client and
// its device open, so its refusals match ErrClosed only.
func TestClosedClientErrorsMatchTheDevicesClass(t *testing.T) {
	c := openOnCPU(t, nil)
	ctx := context.Background()
	b, err := c.Empty(ctx, 64)
	require.NoError(t, err)
	other, err := c.NewStream()
	require.NoError(t, err)
	require.NoError(t, other.Close())
	_, err = other.Empty(ctx, 16)
	require.ErrorIs(t, err, ErrClosed)
	require.NotErrorIs(t, err, vkruntime.ErrClosed, "the client and its device are open")
	require.EqualError(t, err, "client: stream 1: closed", "one prefix, not 'client: stream 1: client: closed'")

	require.NoError(t, c.Close())
	clientClosed := func(err error, what string) {
		t.Helper()
		require.ErrorIs(t, err, ErrClosed, what)
		require.ErrorIs(t, err, vkruntime.ErrClosed, what)
		require.ErrorContains(t, err, ": closed", what)
		require.Equal(t, 1, strings.Count(err.Error(), "client: "), "%s: %v", what, err)
	}
	_, err = c.Empty(ctx, 16)
	clientClosed(err, "Empty")
	_, err = b.Read(ctx)
	clientClosed(err, "Read")
	clientClosed(b.Write(ctx, 0, []byte{1}), "Write")
	clientClosed(c.Run(ctx, kernel.FillWords(16, 1), b), "Run")
	require.EqualError(t, err, "client: stream 0: closed")
	_, err = c.NewStream()
	clientClosed(err, "NewStream")
	require.EqualError(t, err, "client: new stream: closed")
	_, err = c.RecordMemory(ctx, "after close")
	clientClosed(err, "RecordMemory")
	clientClosed(c.InstallMemoryPools(ctx, memory.DirectLayout()), "InstallMemoryPools")
	_, err = other.Empty(ctx, 16)
	clientClosed(err, "a stream closed before its client")
	_, err = c.Device().Storage().Alloc(16)
	require.ErrorIs(t, err, vkruntime.ErrClosed, "the device closed with the client")
	require.NotErrorIs(t, err, ErrClosed, "the device's own error")
}

func TestZeroSizeBuffers(t *testing.T) {
	c := openClient(t)
	ctx := context.Background()
	b, err := c.Empty(ctx, 0)
	require.NoError(t, err)
	got, err := b.Read(ctx)
	require.NoError(t, err)
	require.Empty(t, got)
	require.NoError(t, b.Write(ctx, 0, nil))
	require.Error(t, b.Write(ctx, 0, []byte{1}))
	e, err := c.Create(ctx, nil)
	require.NoError(t, err)
	// An add over no elements binds zero-size buffers.
	require.NoError(t, c.Run(ctx, kernel.Add(0), b, e, b))
	require.Equal(t, uint64(2), c.MemoryUsage(ctx).NumberAllocs)
	require.Zero(t, c.MemoryUsage(ctx).BytesInUse)
	require.NoError(t, b.Free())
	require.NoError(t, e.Free())
}

// A handed device is the client's from Open on: it runs there, and Close
// (or a failed Open) closes it. Options that configure the default device
// are refused with it rather than ignored.
func TestWithBackendHandsTheClientADevice(t *testing.T) {
	ctx := context.Background()
	d, err := cpu.New(cpu.WithName("handed"))
	require.NoError(t, err)
	c, err := Open(ctx, WithBackend(d))
	require.NoError(t, err)
	require.Same(t, d, c.Device())
	b, err := c.Create(ctx, []byte{1, 2, 3, 4})
	require.NoError(t, err)
	require.Positive(t, d.Storage().Allocated(), "the buffer lives on the handed device")
	require.NoError(t, b.Free())
	require.NoError(t, c.Close())
	_, err = d.Storage().Alloc(16)
	require.ErrorContains(t, err, "closed", "Close closed the handed device")

	other, err := cpu.New()
	require.NoError(t, err)
	_, err = Open(ctx, WithBackend(other), WithDevice(1))
	require.ErrorContains(t, err, "configure the default device")
	require.ErrorIs(t, err, ErrInvalidOption)
	_, err = other.Storage().Alloc(16)
	require.ErrorContains(t, err, "closed", "a failed Open closes the handed device")

	// A nil device is an error, where the client opened the default device
	// instead, one nobody asked for.
	c, err = Open(ctx, WithBackend(nil))
	require.EqualError(t, err, "client: invalid option: WithBackend was given no device (nil)")
	require.ErrorIs(t, err, ErrInvalidOption)
	require.Nil(t, c)

	// The client holds a handed device to its memory limit.
	limited, err := cpu.New()
	require.NoError(t, err)
	c, err = Open(ctx, WithBackend(limited), WithMemoryLimit(4<<20))
	require.NoError(t, err)
	defer c.Close()
	require.Equal(t, uint64(4<<20), c.Properties().MemorySize)
	first, err := c.Empty(ctx, 3<<20)
	require.NoError(t, err)
	defer first.Free()
	_, err = c.Empty(ctx, 3<<20)
	require.ErrorIs(t, err, vkruntime.ErrOutOfDeviceMemory)
	var oom *vkruntime.OutOfMemoryError
	require.ErrorAs(t, err, &oom)
	require.Equal(t, uint64(4<<20), oom.Limit)
}

// oddDevice claims properties of its own, which the client cannot run
// on: an alignment no buffer clear can honour or the pools cannot split
// pages by, a largest page of none.
type oddDevice struct {
	*cpu.Device
	alignment, maxPage uint64
}

func (d oddDevice) Properties() vkruntime.DeviceProperties {
	p := d.Device.Properties()
	p.Alignment, p.MaxPageSize = d.alignment, d.maxPage
	return p
}

// Open refuses a device whose properties the client cannot run on with
// ErrUnsupportedDevice (an *AlignmentError giving the numbers where the
// alignment is at fault), and closes it. An alignment of 2 B was refused
// in words of no kind, and one of 0 B or 12 B as the initial layout's
// fault (ErrInvalidOption).
func TestOpenRefusesADeviceWhoseSlicesAreNotWholeWords(t *testing.T) {
	for _, alignment := range []uint64{0, 1, 2, 6, 12} {
		d, err := cpu.New()
		require.NoError(t, err)
		_, err = Open(context.Background(), WithBackend(oddDevice{d, alignment, 1 << 20}))
		require.ErrorIs(t, err, ErrUnsupportedDevice, "alignment %d", alignment)
		require.NotErrorIs(t, err, ErrInvalidOption, "the layout is not to blame")
		var ae *AlignmentError
		require.ErrorAs(t, err, &ae)
		require.Equal(t, AlignmentError{Device: d.Name(), Alignment: alignment}, *ae)
		require.EqualError(t, err, fmt.Sprintf("client: device %s aligns slices to %d B; the client needs a power of two of whole 32-bit words (4 B, 8 B, …)", d.Name(), alignment))
		_, err = d.Storage().Alloc(16)
		require.ErrorContains(t, err, "closed", "the refused device was closed")
	}
	d, err := cpu.New()
	require.NoError(t, err)
	_, err = Open(context.Background(), WithBackend(oddDevice{d, 256, 0}))
	require.ErrorIs(t, err, ErrUnsupportedDevice)
	require.NotErrorIs(t, err, ErrInvalidOption, "the layout is not to blame")
	require.ErrorContains(t, err, "client: unsupported device: device "+d.Name()+": ")
	require.ErrorContains(t, err, "max page size is 0")
	_, err = d.Storage().Alloc(16)
	require.ErrorContains(t, err, "closed", "the refused device was closed")
}

// StorageStats are the device's own figures: the allocations the pools
// made and released, and the memory the storage held now and at its peak.
func TestStorageStatsCountWhatThePoolsAskOfTheDevice(t *testing.T) {
	c := openClient(t, WithLayout(memory.DirectLayout()))
	ctx := context.Background()
	before := c.StorageStats()
	a, err := c.Empty(ctx, 1<<20)
	require.NoError(t, err)
	b, err := c.Empty(ctx, 3<<20)
	require.NoError(t, err)
	mid := c.StorageStats()
	require.Equal(t, before.Allocs+2, mid.Allocs, "the direct layout makes one device allocation per buffer")
	require.Equal(t, before.Allocations+2, mid.Allocations)
	require.GreaterOrEqual(t, mid.Bytes-before.Bytes, uint64(4<<20))
	require.GreaterOrEqual(t, mid.BytesPeak, mid.Bytes)
	require.NoError(t, a.Free())
	require.NoError(t, b.Free())
	c.MemoryCleanup(ctx)
	after := c.StorageStats()
	require.Equal(t, mid.Allocs, after.Allocs)
	require.Equal(t, before.Deallocs+2, after.Deallocs)
	require.Equal(t, before.Bytes, after.Bytes, "cleaned up, the storage holds what it did before")
	require.Equal(t, mid.BytesPeak, after.BytesPeak, "the peak stays")
	require.Equal(t, mid.AllocationsPeak, after.AllocationsPeak)
}
