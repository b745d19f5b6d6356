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
// before its allocations were counted in that space; now the 3,161st is
// refused.
func TestManyStreamsEachHoldTheirOwnBuffer(t *testing.T) {
	ctx := context.Background()
	c := openClient(t)
	if c.SparseGranule() == 0 {
		t.Skipf("%s has no sparse residency, so its pools hold no address space", c.Device().Name())
	}
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
