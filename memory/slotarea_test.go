package memory

import (
	"bytes"
	"log/slog"
	"testing"

	"github.com/stretchr/testify/require"

	vkruntime "github.com/vkrt/vkrt/runtime"
)

// slotAreaManager is a virtual pool under plan on a device of mem bytes,
// small granules, logging to the buffer it returns.
func slotAreaManager(t *testing.T, plan VirtualPlan, granule, mem uint64) (*Manager, *sparseStorage, *virtualPool, *bytes.Buffer) {
	t.Helper()
	s := newSparseStorage(granule)
	m, err := NewManager(s, vkruntime.DeviceProperties{Alignment: 256, MaxPageSize: 64 << 30, MemorySize: mem}, VirtualLayout(plan))
	require.NoError(t, err)
	var log bytes.Buffer
	m.SetLogger(slog.New(slog.NewTextHandler(&log, nil)))
	return m, s, m.pools[0].(*virtualPool), &log
}

// noRangeLeft leaves new ranges no address space.
func noRangeLeft(s *sparseStorage) {
	delete(s.ranges, 1<<30)
	var taken uint64
	for _, r := range s.ranges {
		taken += r
	}
	takeAddressSpace(s, taken)
}

// A reservation that leaves the plan, with a planned reservation live and
// no range left, is served in the planned places' area; refused for
// memory, it closes the area again and the run stays on its plan: a
// refused reservation changes nothing. (It was refused for address space
// with the heap nearly empty, at every try.)
func TestAReservationLeavingThePlanPlacesInTheAreaOrLeavesItClosed(t *testing.T) {
	g := uint64(testGranule)
	plan := VirtualPlan{PlannedBytes: 64 * g, Slots: []VirtualSlot{{g, 0}, {16 * g, 40 * g}}}
	m, s, vp, _ := slotAreaManager(t, plan, g, 4<<20)
	require.Equal(t, uint64(0), locate(t, m, mustReserve(t, m, g, Eager)).offset)
	noRangeLeft(s)
	size := vp.space - vp.slotsEnd + g // more than the range above the places
	s.heapSize = s.liveBytes()
	before := m.Report()
	_, err := m.Reserve(size, Eager)
	require.ErrorIs(t, err, vkruntime.ErrOutOfDeviceMemory)
	require.Equal(t, before, m.Report())
	require.Nil(t, vp.opened)
	require.True(t, vp.following)
	require.NoError(t, m.checkInvariants())
	s.heapSize = 0
	h, err := m.Reserve(size, Eager)
	require.NoError(t, err, "the area above the first place holds it")
	require.Equal(t, g, locate(t, m, h).offset)
	require.NoError(t, m.checkInvariants())
}

// The area opens for a reservation past the plan's last place that a free
// stretch of it holds, though four smaller stretches of the same TLSF bin
// come first in its free list.
func TestTheOpenedAreaServesAStretchTLSFsFirstTriesPass(t *testing.T) {
	g := uint64(testGranule)
	size, gap := uint64(0x10F00), uint64(0x10000) // one bin, gap < size
	var slots []VirtualSlot
	off := size
	for range 5 {
		slots = append(slots, VirtualSlot{Size: 256, Offset: off})
		off += 256 + gap
	}
	slots[4].Size = (off+g-1)&^(g-1) - slots[4].Offset // the last place ends on a granule
	m, s, vp, _ := slotAreaManager(t, VirtualPlan{PlannedBytes: 4 * g, Slots: slots}, g, 4<<20)
	for _, sl := range slots {
		require.Equal(t, sl.Offset, locate(t, m, mustReserve(t, m, sl.Size, Eager)).offset)
	}
	mustReserve(t, m, vp.space-vp.slotsEnd, Eager) // fills the range above the places
	noRangeLeft(s)
	h, err := m.Reserve(size, Eager)
	require.NoError(t, err, "[0, %d) is free address space", size)
	require.Zero(t, locate(t, m, h).offset)
	require.NoError(t, m.checkInvariants())
}

// A dry run (lazy reservations) takes a smaller range where the address
// space is short, as its real run does: it opened the planned places'
// area instead, and placed elsewhere.
func TestADryRunTakesTheRangesItsRealRunTakes(t *testing.T) {
	const gib = uint64(1 << 30)
	plan := VirtualPlan{PlannedBytes: 2 * gib, Slots: []VirtualSlot{{gib, 0}, {gib, 500 * gib}}}
	places := func(mapping Mapping) []uint64 {
		m, _, vp, _ := slotAreaManager(t, plan, gib, 400*gib)
		var offs []uint64
		for _, size := range []uint64{gib, 100 * gib, gib} {
			h, err := m.Reserve(size, mapping)
			require.NoError(t, err)
			r, err := m.lookup(h, "locate")
			require.NoError(t, err)
			off, _ := vp.where(r.ref)
			offs = append(offs, off)
		}
		require.Nil(t, vp.opened, "%v", mapping)
		return offs
	}
	require.Equal(t, places(Eager), places(Lazy))
}

// A reservation that leaves the plan with nothing planned live places
// from the low end of the range; refused for memory, it leaves the run on
// its plan, as if it had never come: no spill, and the plan's next
// reservations take their places.
func TestARefusedReservationLeavingThePlanChangesNothing(t *testing.T) {
	g := uint64(testGranule)
	plan := VirtualPlan{PlannedBytes: 2 * g, Slots: []VirtualSlot{{g, 0}, {g, 5 * g}}}
	a, sa, vp, _ := slotAreaManager(t, plan, g, 64<<20)
	b, _, _, _ := slotAreaManager(t, plan, g, 64<<20)
	sa.heapSize = 1
	_, err := a.Reserve(3*g, Eager)
	sa.heapSize = 0
	require.ErrorIs(t, err, vkruntime.ErrOutOfDeviceMemory)
	require.Zero(t, a.Spills())
	require.Equal(t, b.Report(), a.Report())
	require.True(t, vp.following)
	for _, m := range []*Manager{a, b} {
		for _, slot := range plan.Slots {
			require.Equal(t, slot.Offset, locate(t, m, mustReserve(t, m, slot.Size, Eager)).offset)
		}
		require.NoError(t, m.checkInvariants())
	}
	// Granted, the same reservation places from the low end of the range.
	c, _, _, _ := slotAreaManager(t, plan, g, 64<<20)
	require.Zero(t, locate(t, c, mustReserve(t, c, 3*g, Eager)).offset)
}
