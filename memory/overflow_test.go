package memory

import (
	"log/slog"
	"math"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	vkruntime "github.com/vkrt/vkrt/runtime"
)

// A capped sliced pool reports its cap in bytes (max_pool_size) and a full
// one tells the reservation the caps it met: pages × page_size, summed over
// the capped pools, must fit in 64 bits or those figures wrap.
func TestSlicedCapsPast64BitsAreRefused(t *testing.T) {
	for name, l := range map[string]Layout{
		"one pool": SlicedLayout(SlicedPool{PageSize: 1 << 60, Pages: u64(32)}),
		"two pools": SlicedLayout(SlicedPool{PageSize: 1 << 60, Pages: u64(15)},
			SlicedPool{PageSize: 1 << 62, Pages: u64(1)}, SlicedPool{PageSize: 1 << 61, Pages: u64(2)}),
		"arena fallback": ArenaLayout(ArenaPlan{Pages: []uint64{64},
			Fallback: []SlicedPool{{PageSize: 1 << 62, Pages: u64(4)}}}),
	} {
		var ie *InstallError
		require.ErrorAs(t, l.Validate(testProps), &ie, name)
		require.Equal(t, InvalidLayout, ie.Kind, name)
		require.ErrorContains(t, ie, "take the capped pools past 18446744073709551615 B", name)
	}
	fits := SlicedLayout(SlicedPool{PageSize: 1 << 60, Pages: u64(7)}, SlicedPool{PageSize: 1 << 60},
		SlicedPool{PageSize: 1 << 62, Pages: u64(1)}, SlicedPool{PageSize: 1 << 61, Pages: u64(1)})
	m, _ := newTestManager(t, fits)
	var caps []uint64
	for _, p := range m.Report().Dynamic {
		if c := p.Kind.(SlicedKind).MaxPoolSize; c != nil {
			caps = append(caps, *c)
		}
	}
	require.Equal(t, []uint64{7 << 60, 1 << 62, 1 << 61}, caps)
}

// The ExclusivePages buckets grow ×4 until they cover MaxPageSize; near
// 2^64 the next bucket wrapped to 0 and the preset never finished.
func TestExclusivePagesPresetNear64Bits(t *testing.T) {
	for _, props := range []vkruntime.DeviceProperties{
		{Alignment: 16, MaxPageSize: 1 << 63},
		{Alignment: 1 << 61, MaxPageSize: 3 << 62},
	} {
		done := make(chan Report, 1)
		go func() {
			m, err := NewManager(newFakeStorage(), props, ExclusivePagesLayout())
			if err != nil {
				panic(err)
			}
			done <- m.Report()
		}()
		select {
		case r := <-done:
			var prev uint64
			for _, p := range r.Dynamic {
				b := p.Kind.(ExclusiveKind).MaxAllocSize
				require.Greater(t, b, prev, "%+v", props)
				prev = b
			}
			require.Equal(t, exclusiveCeiling(props, math.MaxUint64), prev)
		case <-time.After(10 * time.Second):
			t.Fatalf("the ExclusivePages preset for %+v did not finish", props)
		}
	}
}

// Lazy pages reach no driver, so with the device memory unknown nothing
// but the pools' own count stops them: two lazy reservations of 2^63 B
// took bytes_in_use and bytes_reserved round to 2^63 with no error.
func TestLazyReservationsCannotWrapTheCounters(t *testing.T) {
	for _, c := range []struct {
		name       string
		layout     Layout
		persistent bool
	}{
		{"SubSlices", SubSlicesLayout(), false},
		{"ExclusivePages", ExclusivePagesLayout(), false},
		{"Direct", DirectLayout(), false},
		{"Sliced", SlicedLayout(SlicedPool{PageSize: 1 << 63}), false},
		{"persistent", SubSlicesLayout(), true},
	} {
		m, s := newTestManager(t, c.layout)
		if c.persistent {
			m.BeginPersistent()
		}
		mustReserve(t, m, 1<<63, Lazy)
		before := m.Report()
		_, err := m.Reserve(1<<63, Lazy)
		require.ErrorIs(t, err, vkruntime.ErrOutOfDeviceMemory, c.name)
		var oom *vkruntime.OutOfMemoryError
		require.ErrorAs(t, err, &oom, c.name)
		require.Equal(t, uint64(1<<63), oom.Usage, c.name)
		require.Equal(t, before, m.Report(), c.name)
		require.Equal(t, Usage{NumberAllocs: 1, BytesInUse: 1 << 63, BytesReserved: 1 << 63}, m.Usage(), c.name)
		require.Zero(t, s.allocs, c.name)
		if c.name != "Sliced" { // its one page is full
			mustReserve(t, m, 1<<62, Lazy) // what fits still does
		}
	}

	// A virtual pool's chunks for a lazy reservation cannot be refused
	// once it is placed: the room is checked before.
	m, _ := newVirtualManager(t, VirtualPlan{})
	m.SetLogger(slog.New(slog.DiscardHandler))
	m.BeginPersistent()
	mustReserve(t, m, math.MaxUint64-1<<20+1, Lazy)
	m.EndPersistent()
	before := m.Report()
	_, err := m.Reserve(1<<20, Lazy)
	require.ErrorIs(t, err, vkruntime.ErrOutOfDeviceMemory)
	require.Equal(t, before, m.Report())
	require.Equal(t, uint64(1), m.Usage().NumberAllocs)
	require.NoError(t, m.checkInvariants())
}

// The direct pool's reclaim watermark is twice the live bytes: past 2^64
// it wrapped, and a huge reservation handed back every cached allocation.
func TestDirectWatermarkDoesNotWrap(t *testing.T) {
	m, s := newTestManager(t, DirectLayout())
	require.NoError(t, m.Free(mustReserve(t, m, 1000, Eager)))
	mustReserve(t, m, 1<<63, Lazy)
	r := m.Report().Dynamic[0]
	require.Equal(t, uint64(2), r.Pages, "the cached allocation is kept")
	require.Equal(t, uint64(1008+1<<63), r.Usage.BytesReserved)
	require.Zero(t, s.deallocs)
}

// An exclusive pool hands back free pages too small for a request when
// they hold half of it; twice their bytes wrapped past 2^64.
func TestExclusiveReleasesTooSmallPagesNear64Bits(t *testing.T) {
	m, _ := newTestManager(t, ExclusivePagesLayout())
	require.NoError(t, m.Free(mustReserve(t, m, 1<<63, Lazy)))
	mustReserve(t, m, 3<<62, Lazy)
	require.Equal(t, Usage{NumberAllocs: 1, BytesInUse: 3 << 62, BytesReserved: 3 << 62}, m.Usage())
}

// A reservation the device refused is not one the pool served: it raised
// needed_peak_bytes, what a plan then asks the pool to expect.
func TestARefusedVirtualReservationLeavesNoPeak(t *testing.T) {
	m, s := newVirtualManager(t, VirtualPlan{})
	s.heapSize = 1 << 20
	before := m.Report()
	_, err := m.Reserve(8<<20, Eager)
	require.ErrorIs(t, err, vkruntime.ErrOutOfDeviceMemory)
	require.Equal(t, before, m.Report())
	require.Zero(t, m.Report().Dynamic[0].Kind.(VirtualKind).NeededPeakBytes)
	h := mustReserve(t, m, 512<<10, Eager)
	require.NoError(t, m.Free(h))
	require.Equal(t, uint64(512<<10), m.Report().Dynamic[0].Kind.(VirtualKind).NeededPeakBytes)
}

// A refused reservation off the plan's stream does not take the run off
// its plan: it counted a spill and sent every later reservation past the
// planned slots. (A reservation refused for address space is one that the
// planned places' area cannot hold either, as here with the first slot
// live: one it can hold is served there.)
func TestARefusedVirtualReservationDoesNotLeaveThePlan(t *testing.T) {
	plan := VirtualPlan{PlannedBytes: 1 << 20, Slots: []VirtualSlot{{Size: 64 << 10, Offset: 0}, {Size: 64 << 10, Offset: 64 << 10}}}
	for _, refuse := range []string{"memory", "address space"} {
		m, s := newVirtualManager(t, plan)
		m.SetLogger(slog.New(slog.DiscardHandler))
		first := mustReserve(t, m, plan.Slots[0].Size, Eager)
		require.Equal(t, plan.Slots[0].Offset, locate(t, m, first).offset, refuse)
		size := uint64(8 << 20)
		if refuse == "memory" {
			s.heapSize = 1 << 20
		} else {
			size = m.pools[0].(*virtualPool).maxAlloc // past the planned slots, the range is smaller
		}
		_, err := m.Reserve(size, Eager)
		require.ErrorIs(t, err, vkruntime.ErrOutOfDeviceMemory, refuse)
		require.Zero(t, m.Spills(), refuse)
		h := mustReserve(t, m, plan.Slots[1].Size, Eager)
		require.Equal(t, plan.Slots[1].Offset, locate(t, m, h).offset, refuse)
		require.Zero(t, m.Spills(), refuse)
	}
}
