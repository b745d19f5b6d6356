package memory

import (
	"testing"

	"github.com/stretchr/testify/require"

	vkruntime "github.com/vkrt/vkrt/runtime"
)

// A reservation over stale granules (bound on the device, their memory
// taken by a lazy reservation) that finds no device memory still submits
// the unbinds it made: the stale granules under it are not among them.
// Across ranges, where the device takes the first range's part and refuses
// the second's, those granules are still stale, and the pool must say so,
// or it hands their chunk back while the device binds it.
func TestARefusedPartKeepsTheStaleGranulesItDidNotUnbind(t *testing.T) {
	props := testProps
	props.MemorySize = 4 << 20 // ranges of 16 granules
	s := newSparseStorage(testGranule)
	m, err := NewManager(s, props, VirtualLayout(VirtualPlan{}))
	require.NoError(t, err)
	vp := m.pools[0].(*virtualPool)
	vp.unit = testGranule // each shortfall its own chunk
	g := uint64(testGranule)
	k := mustReserve(t, m, g, Eager)    // granule 0
	pp := mustReserve(t, m, 4*g, Eager) // 1..4
	mustReserve(t, m, 11*g, Eager)      // 5..15: range 0 is full
	mm := mustReserve(t, m, 2*g, Eager) // in range 1
	require.Len(t, vp.segs, 1)
	require.NoError(t, m.Free(pp))
	l := mustReserve(t, m, 5*g, Lazy) // in range 1, above mm: 1..4 go stale
	require.Equal(t, 4, staleGranules(vp))
	require.NoError(t, m.Free(mm)) // idle in range 1
	require.NoError(t, m.Free(k))  // 0..4 free: the next 4 granules land on 0..3
	require.NoError(t, deviceAgrees(vp, s))

	// No device memory is left, and the device refuses the second range's
	// part: the first range's (granule 4, unbound) stands.
	s.heapSize = s.liveBytes()
	s.refuseCall = s.refused + 2
	_, err = m.Reserve(4*g, Eager)
	require.ErrorIs(t, err, vkruntime.ErrOutOfDeviceMemory)
	require.Equal(t, s.refuseCall, s.refused, "the second part was refused")
	require.NoError(t, m.checkInvariants())
	require.NoError(t, deviceAgrees(vp, s), "granules 1..3 are still stale")

	s.heapSize = 0
	require.NoError(t, m.Free(l))
	m.Cleanup(true) // returns l's chunks; panics in Dealloc if one is still bound
	m.Cleanup(true)
	require.NoError(t, deviceAgrees(vp, s))
	require.NoError(t, m.checkInvariants())
}
