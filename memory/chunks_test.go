package memory

import (
	"log/slog"
	"testing"

	"github.com/stretchr/testify/require"

	vkruntime "github.com/vkrt/vkrt/runtime"
)

// gigabyteDevicePool is a manager of one virtual pool, no plan, on a
// device of 1 GiB: its chunks are at most 32 MiB, a 32nd of the heap.
func gigabyteDevicePool(t *testing.T) (*sparseStorage, *Manager) {
	s := newSparseStorage(testGranule)
	props := vkruntime.DeviceProperties{Alignment: 256, MaxPageSize: 64 << 20, MemorySize: 1 << 30}
	m, err := NewManager(s, props, VirtualLayout(VirtualPlan{}))
	require.NoError(t, err)
	m.SetLogger(slog.New(slog.DiscardHandler))
	return s, m
}

// A shortfall past the largest chunk (a 32nd of the heap) takes several
// device allocations; refused at a later one, the reservation gives back
// the ones it was granted: a refused reservation changes nothing. Granted,
// it takes one growth step, in chunks of at most the largest until the
// shortfall is met: 100 MiB on an empty pool is 100 MiB in four chunks
// (32, 32, 32 and 4 MiB). Chosen again for what each chunk left short,
// the step took a unit of 20 MiB for the last 4 MiB: 116 MiB.
func TestARefusedShortfallGivesBackTheChunksItGot(t *testing.T) {
	s, m := gigabyteDevicePool(t)
	before := m.Report()
	s.heapSize = 80 << 20
	_, err := m.Reserve(100<<20, Eager)
	require.ErrorIs(t, err, vkruntime.ErrOutOfDeviceMemory)
	require.NoError(t, m.checkInvariants())
	require.Equal(t, before, m.Report(), "a refused reservation changes nothing")
	require.Empty(t, s.live, "and leaves no device allocation")

	s.heapSize = 0
	h := mustReserve(t, m, 100<<20, Eager)
	require.Equal(t, 4, len(s.live), "100 MiB in chunks of at most 32 MiB")
	require.Equal(t, uint64(100<<20), m.Usage().BytesReserved, "the step for 100 MiB, a multiple of half a unit")
	require.NoError(t, m.Free(h))
	require.NoError(t, m.checkInvariants())
}

// A submission the device refuses gives back the chunks made for it: the
// refused reservation holds no device memory after it, and tells no growth.
func TestARefusedSubmissionGivesBackTheChunksMadeForIt(t *testing.T) {
	s, m := gigabyteDevicePool(t)
	before := m.Report()
	s.refuseCall = s.refused + 1
	_, err := m.Reserve(100<<20, Eager)
	require.ErrorIs(t, err, vkruntime.ErrDeviceLost)
	require.NoError(t, m.checkInvariants())
	require.Equal(t, before, m.Report())
	require.Empty(t, s.live)
	h := mustReserve(t, m, 100<<20, Eager)
	require.NoError(t, m.Free(h))
	require.NoError(t, m.checkInvariants())
}
