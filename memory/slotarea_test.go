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

// A reservation that leaves the plan, refused, keeps the run on it even
// where the planned places' area would have held it: that area opens only
// for a run that had left the plan before.
func TestARefusedReservationLeavingThePlanLeavesTheAreaClosed(t *testing.T) {
	g := uint64(testGranule)
	plan := VirtualPlan{PlannedBytes: 64 * g, Slots: []VirtualSlot{{g, 0}, {16 * g, 16 * g}}}
	m, s, vp, _ := slotAreaManager(t, plan, g, 4<<20)
	require.Equal(t, uint64(0), locate(t, m, mustReserve(t, m, g, Eager)).offset)
	noRangeLeft(s)
	before := m.Report()
	_, err := m.Reserve(vp.space-vp.slotsEnd+g, Eager) // more than the range above the places
	require.ErrorIs(t, err, vkruntime.ErrOutOfDeviceMemory)
	require.Equal(t, before, m.Report())
	require.Nil(t, vp.opened)
	h := mustReserve(t, m, 16*g, Eager)
	require.Equal(t, 16*g, locate(t, m, h).offset, "the run still follows its plan")
	require.Zero(t, m.Spills())
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

// A reservation that leaves the plan with nothing planned live opens the
// area (it places from the low end, not past the places); refused for
// memory, the run has left the plan all the same, and it says so.
func TestARefusedReservationThatOpenedTheAreaWarns(t *testing.T) {
	g := uint64(testGranule)
	plan := VirtualPlan{PlannedBytes: 64 * g, Slots: []VirtualSlot{{g, 0}, {16 * g, 16 * g}}}
	m, s, vp, log := slotAreaManager(t, plan, g, 4<<20)
	s.heapSize = 1 << 20
	_, err := m.Reserve(4<<20, Eager)
	require.ErrorIs(t, err, vkruntime.ErrOutOfDeviceMemory)
	require.False(t, vp.following)
	require.Contains(t, log.String(), "left its plan")
	s.heapSize = 0
	h := mustReserve(t, m, 2*g, Eager)
	require.Zero(t, locate(t, m, h).offset, "placed from the low end of the range")
	require.NoError(t, m.checkInvariants())
}
