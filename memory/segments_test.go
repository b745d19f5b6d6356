package memory

import (
	"fmt"
	"math/rand/v2"
	"testing"

	"github.com/stretchr/testify/require"

	vkruntime "github.com/vkrt/vkrt/runtime"
)

// takeAddressSpace leaves only left bytes of the storage's sparse address
// space to new ranges, as other streams' ranges would.
func takeAddressSpace(s *sparseStorage, left uint64) {
	s.ranges[1<<30] = s.MaxVirtualSize() - left
}

// A pool whose range is full, with device memory to spare, takes another
// range of the address space rather than failing: a run fails only when the
// device is out of memory. Streams that came first took most of the space
// here, so this stream's first range is small.
func TestAFullRangeTakesAnotherRange(t *testing.T) {
	s := newSparseStorage(testGranule)
	takeAddressSpace(s, 5<<29)
	props := testProps
	props.MemorySize = 150e9 // its whole range would be 600 GB
	m, err := NewManager(s, props, VirtualLayout(VirtualPlan{}))
	require.NoError(t, err)
	var held []Handle
	var handles []vkruntime.StorageHandle
	for range 8 {
		h, err := m.Reserve(200e6, Eager)
		require.NoError(t, err, "1.6 GB in a 2.5 GiB address space and a 150 GB heap")
		sh, err := m.Resolve(h)
		require.NoError(t, err)
		require.NoError(t, s.backed(sh))
		for _, o := range handles {
			require.True(t, o.ID != sh.ID || sh.Offset+sh.Size <= o.Offset || o.Offset+o.Size <= sh.Offset, "overlap")
		}
		require.LessOrEqual(t, sh.Offset+sh.Size, s.ranges[sh.ID], "inside its range")
		held, handles = append(held, h), append(handles, sh)
		require.NoError(t, m.checkInvariants())
	}
	vp := m.pools[0].(*virtualPool)
	require.Greater(t, len(s.ranges), 2, "more than one range")
	require.NotEmpty(t, vp.segs)
	// Memory freed in one range serves a reservation in another.
	allocs := s.allocs
	require.NoError(t, m.Free(held[0]))
	require.NoError(t, m.Free(held[7]))
	h, err := m.Reserve(200e6, Eager)
	require.NoError(t, err)
	sh, err := m.Resolve(h)
	require.NoError(t, err)
	require.NoError(t, s.backed(sh))
	require.Equal(t, allocs, s.allocs, "no new device allocation")
	held = append(held[1:7], h)
	require.NoError(t, m.checkInvariants())
	// With nothing live, a cleanup returns every range and chunk.
	for _, h := range held {
		require.NoError(t, m.Free(h))
	}
	m.Cleanup(true)
	require.Len(t, s.ranges, 1, "only the other streams' space is left taken")
	require.Empty(t, s.live)
	require.NoError(t, m.checkInvariants())
	// Once space is back, the pool starts again with one whole range.
	delete(s.ranges, 1<<30)
	h = mustReserve(t, m, 100e6, Eager)
	_, err = m.Resolve(h)
	require.NoError(t, err)
	require.Empty(t, vp.segs)
	require.Equal(t, vp.firstSpace, vp.space)
}

// Past the address space, a reservation is out of device memory and
// changes nothing.
func TestNoAddressSpaceLeftIsOutOfDeviceMemory(t *testing.T) {
	s := newSparseStorage(testGranule)
	takeAddressSpace(s, 64<<20)
	props := testProps
	props.MemorySize = 150e9
	m, err := NewManager(s, props, VirtualLayout(VirtualPlan{}))
	require.NoError(t, err)
	h := mustReserve(t, m, 20<<20, Eager)
	_, err = m.Resolve(h)
	require.NoError(t, err)
	before, ranges := m.Report(), len(s.ranges)
	_, err = m.Reserve(60<<20, Eager)
	require.ErrorIs(t, err, vkruntime.ErrOutOfDeviceMemory)
	require.Equal(t, before, m.Report())
	require.Len(t, s.ranges, ranges)
	require.NoError(t, m.checkInvariants())
}

// Submissions that unbind in some ranges and bind in another are refused
// at every call in turn: what the device refused is undone, what it took
// stands, and every live reservation lies on memory the device bound.
func TestRefusedSubmissionsAcrossRangesLeaveTheMapAsTheDeviceHasIt(t *testing.T) {
	spread := false
	for refuse := 0; refuse <= 40; refuse++ {
		s := newSparseStorage(refusedGranule)
		takeAddressSpace(s, 3<<20) // ranges of 2 MiB, then 1 MiB, then smaller
		s.refuseCall = refuse
		if refusedBindStream(t, s, rand.New(rand.NewPCG(uint64(refuse), 11)), 120, 29, fmt.Sprintf("refused call %d", refuse)) {
			spread = true
		}
	}
	require.True(t, spread, "the streams spread over several ranges")
}

// A dry run (lazy reservations, no range reserved yet) that outgrows its
// first range places in more ranges as its real run would, and reserves
// them all, each at its size, when a reservation is resolved: eager and
// lazy runs of one stream place alike.
func TestALazyRunTakesItsRangesWhenResolved(t *testing.T) {
	props := testProps
	props.MemorySize = 64 << 20 // first ranges of 16 MiB
	sizes := []uint64{9 << 20, 9 << 20, 30 << 20, 5 << 20, 40 << 20}
	place := func(mapping Mapping) (*Manager, *sparseStorage, []Handle) {
		s := newSparseStorage(testGranule)
		m, err := NewManager(s, props, VirtualLayout(VirtualPlan{}))
		require.NoError(t, err)
		var hs []Handle
		for _, size := range sizes {
			hs = append(hs, mustReserve(t, m, size, mapping))
		}
		return m, s, hs
	}
	lazy, ls, lh := place(Lazy)
	require.Empty(t, ls.ranges, "a dry run reserves no range")
	vp := lazy.pools[0].(*virtualPool)
	require.Len(t, vp.segs, 3, "ranges of 16, 16, 32 and 64 MiB")
	eager, es, eh := place(Eager)
	require.NoError(t, eager.checkInvariants())
	for i := range lh {
		lsh, err := lazy.Resolve(lh[i])
		require.NoError(t, err)
		require.NoError(t, ls.backed(lsh))
		esh, err := eager.Resolve(eh[i])
		require.NoError(t, err)
		require.Equal(t, esh.Offset, lsh.Offset, "reservation %d", i)
		require.Equal(t, es.ranges[esh.ID], ls.ranges[lsh.ID], "reservation %d: in ranges of one size", i)
	}
	require.Len(t, ls.ranges, 4)
	require.NoError(t, lazy.checkInvariants())
}

// A dry run whose ranges the address space cannot hold when it is resolved
// is out of device memory, and keeps no range.
func TestALazyRunsRangesPastTheAddressSpaceAreOutOfDeviceMemory(t *testing.T) {
	props := testProps
	props.MemorySize = 64 << 20
	s := newSparseStorage(testGranule)
	m, err := NewManager(s, props, VirtualLayout(VirtualPlan{}))
	require.NoError(t, err)
	h := mustReserve(t, m, 9<<20, Lazy)
	mustReserve(t, m, 30<<20, Lazy)
	takeAddressSpace(s, 40<<20) // room for the first range, not the second
	_, err = m.Resolve(h)
	require.ErrorIs(t, err, vkruntime.ErrOutOfDeviceMemory)
	require.Len(t, s.ranges, 1, "no range kept")
	require.NoError(t, m.checkInvariants())
}
