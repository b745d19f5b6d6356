package memory

import (
	"testing"

	"github.com/stretchr/testify/require"

	vkruntime "github.com/vkrt/vkrt/runtime"
)

// A dry run whose later ranges the address space cannot hold when it is
// resolved gives back the ranges it did reserve and keeps its layout: once
// the space is back, resolving reserves every range again and binds there.
func TestALazyRunRefusedItsThirdRangeResolvesOnceSpaceIsBack(t *testing.T) {
	props := testProps
	props.MemorySize = 64 << 20 // ranges of 16, 16 and 32 MiB
	s := newSparseStorage(testGranule)
	m, err := NewManager(s, props, VirtualLayout(VirtualPlan{}))
	require.NoError(t, err)
	hs := []Handle{mustReserve(t, m, 9<<20, Lazy), mustReserve(t, m, 9<<20, Lazy), mustReserve(t, m, 30<<20, Lazy)}
	vp := m.pools[0].(*virtualPool)
	require.Len(t, vp.segs, 2)
	takeAddressSpace(s, 40<<20) // the first two ranges, not the third
	_, err = m.Resolve(hs[0])
	require.ErrorIs(t, err, vkruntime.ErrOutOfDeviceMemory)
	require.Len(t, s.ranges, 1, "no range kept")
	require.NoError(t, m.checkInvariants())
	delete(s.ranges, 1<<30)
	for _, h := range hs {
		sh, err := m.Resolve(h)
		require.NoError(t, err)
		require.NoError(t, s.backed(sh))
	}
	require.Len(t, s.ranges, 3)
	require.NoError(t, m.checkInvariants())
}

// A dry run binds spare memory ahead of its reservations, in its account,
// up to the end of its first range. When the device then has less address
// space left and ensureRange takes a smaller range, what was bound past it
// goes back to spare: no range holds those granules, and the first of them
// is the fence below the next range, which nothing binds.
func TestARangeTakenSmallerLeavesNothingBoundPastIt(t *testing.T) {
	props := testProps
	props.MemorySize = 4 << 20 // a first range of 16 granules
	s := newSparseStorage(testGranule)
	m, err := NewManager(s, props, VirtualLayout(VirtualPlan{}))
	require.NoError(t, err)
	vp := m.pools[0].(*virtualPool)
	h := mustReserve(t, m, testGranule, Lazy)
	require.Equal(t, uint64(15), vp.gm.idle, "the rest of the first range is bound ahead")
	takeAddressSpace(s, 4*testGranule)
	sh, err := m.Resolve(h)
	require.NoError(t, err)
	require.NoError(t, s.backed(sh))
	require.Equal(t, 4*testGranule, int(vp.space), "a smaller first range")
	require.Equal(t, uint64(3), vp.gm.idle, "only what lies in it stays bound ahead")
	require.NoError(t, m.checkInvariants())
	delete(s.ranges, 1<<30)
	big := mustReserve(t, m, 8*testGranule, Eager)
	require.Len(t, vp.segs, 1)
	sh, err = m.Resolve(big)
	require.NoError(t, err)
	require.NoError(t, s.backed(sh))
	require.NoError(t, m.checkInvariants())
	require.NoError(t, deviceAgrees(vp, s))
}
