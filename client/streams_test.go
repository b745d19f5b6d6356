package client

import (
	"context"
	"encoding/binary"
	"testing"

	"github.com/stretchr/testify/require"

	vkruntime "github.com/vkrt/vkrt/runtime"
)

// Every stream's virtual pool holds ranges of the device's sparse address
// space, and the driver maps the device allocations into the same space.
// Streams made one after another, each holding a buffer, are each served
// until the device says out of device memory, and each reads back its own
// bytes. On the H200 (driver 580.159) at 1fa202c the 80th stream was
// refused with the heap nearly empty; with later streams' ranges what they
// need, the driver crashed (SIGSEGV in vkAllocateMemory) at the 4,177th,
// its allocations taking the same space at three times their bytes; now
// the ranges leave room for the whole heap so counted
// (runtime.RangesSpace), and the 3,213th is refused.
func TestManyStreamsEachHoldTheirOwnBuffer(t *testing.T) {
	ctx := context.Background()
	c := openSparseClient(t)
	const most = 10000
	var bufs []*Buffer
	for i := range most {
		s, err := c.NewStream()
		require.NoError(t, err)
		data := make([]byte, 4096)
		binary.LittleEndian.PutUint64(data, uint64(i)+1)
		b, err := s.Create(ctx, data)
		if err != nil {
			require.ErrorIs(t, err, vkruntime.ErrOutOfDeviceMemory, "stream %d", i)
			t.Logf("stream %d refused: %v", i, err)
			break
		}
		bufs = append(bufs, b)
	}
	require.GreaterOrEqual(t, len(bufs), 1000, "streams holding a buffer")
	for i, b := range bufs {
		got, err := b.Read(ctx)
		require.NoError(t, err)
		require.Equal(t, uint64(i)+1, binary.LittleEndian.Uint64(got), "stream %d reads its own buffer", i)
	}
	t.Logf("%d streams held a buffer each", len(bufs))
}

// Streams holding a little each, whose pools took whole first ranges of
// the address space, leave the heap to a stream after them that fills most
// of it: twelve streams of 1 MiB, then one of 125 GiB in 1 GiB buffers (on
// the H200: 134.2 GB in 137.1 GB reserved). Counting allocations against
// the ranges' space as they came, as vk did before runtime.RangesSpace,
// nine idle streams were enough to refuse the busy one in the replay's
// model.
func TestIdleStreamsLeaveTheHeapToABusyOne(t *testing.T) {
	ctx := context.Background()
	c := openSparseClient(t)
	const busy = 125
	if heap := c.Properties().MemorySize; heap < (busy+8)<<30 {
		t.Skipf("%s has %d B of memory, less than the %d GiB this fills", c.Device().Name(), heap, busy+8)
	}
	for range 12 {
		s, err := c.NewStream()
		require.NoError(t, err)
		_, err = s.Empty(ctx, 1<<20)
		require.NoError(t, err)
	}
	s, err := c.NewStream()
	require.NoError(t, err)
	for k := range busy {
		_, err := s.Empty(ctx, 1<<30)
		require.NoError(t, err, "the busy stream's buffer %d", k)
	}
	require.Equal(t, uint64(busy)<<30, s.Usage().BytesInUse)
	t.Logf("the busy stream holds %d B in %d B reserved", s.Usage().BytesInUse, s.Usage().BytesReserved)
}

// openSparseClient opens a client on the default device, skipping where it
// has no sparse residency: there no pool holds address space.
func openSparseClient(t *testing.T) *Client {
	t.Helper()
	c := openClient(t)
	if c.SparseGranule() == 0 {
		t.Skipf("%s has no sparse residency, so its pools hold no address space", c.Device().Name())
	}
	return c
}

// Streams that grew large and keep a little each leave the address space
// to a stream after them: three streams each grow to 80 GiB in 1 GiB
// buffers (past their first range, into more) and keep only their first,
// then a fourth makes twenty. Each of the three held every range it grew
// into, and on the H200 (driver 580.159, at e2c1f50) the fourth was
// refused its second buffer with 4.3 GB live; the cleanup the client
// makes before retrying a refused buffer now gives back the ranges they no
// longer use, and it holds its 20 (22 s there).
func TestStreamsThatShrankLeaveTheAddressSpaceToALaterOne(t *testing.T) {
	ctx := context.Background()
	c := openSparseClient(t)
	if heap := c.Properties().MemorySize; heap < 90<<30 {
		t.Skipf("%s has %d B of memory, less than the 90 GiB this needs", c.Device().Name(), heap)
	}
	for k := range 3 {
		s, err := c.NewStream()
		require.NoError(t, err)
		var bufs []*Buffer
		for i := range 80 {
			b, err := s.Empty(ctx, 1<<30)
			require.NoError(t, err, "stream %d, buffer %d", k, i)
			bufs = append(bufs, b)
		}
		for _, b := range bufs[1:] {
			require.NoError(t, b.Free())
		}
	}
	s, err := c.NewStream()
	require.NoError(t, err)
	for i := range 20 {
		_, err := s.Empty(ctx, 1<<30)
		require.NoError(t, err, "the fourth stream's buffer %d", i)
	}
	t.Logf("the fourth stream holds %d B in %d B reserved", s.Usage().BytesInUse, s.Usage().BytesReserved)
}
