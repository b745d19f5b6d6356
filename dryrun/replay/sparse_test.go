package replay_test

import (
	"fmt"
	"strings"
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/vkrt/vkrt/dryrun/replay"
	"github.com/vkrt/vkrt/internal/tracetest"
	"github.com/vkrt/vkrt/memory"
	vkruntime "github.com/vkrt/vkrt/runtime"
)

// The model's ranges take what vk lets them take of the H200's 1 TiB
// sparse address space (runtime.RangesSpace, for its heap), and no more.
func TestTheModelsRangesLeaveRoomForTheHeap(t *testing.T) {
	s := replay.NewCountingStorage(replay.H200().MemorySize)
	s.Granule = replay.H200Granule
	space := s.MaxVirtualSize()
	require.Equal(t, vkruntime.RangesSpace(1<<40, replay.H200().MemorySize)&^(replay.H200Granule-1), space)
	_, err := s.ReserveVirtual(space + 1)
	require.ErrorIs(t, err, vkruntime.ErrOutOfDeviceMemory)
	_, err = s.ReserveVirtual(space)
	require.NoError(t, err)
	require.Zero(t, s.VirtualSpaceLeft())
}

// Streams that hold a little each and take whole first ranges leave the
// heap to a stream that comes after them and fills it: twelve streams of
// 1 MiB, then one of 135 GiB. When the model counted allocations against
// the ranges' space as they came, the ninth idle stream's range was enough
// to refuse the big one at 114–134 GB live.
func TestIdleStreamsLeaveTheHeapToALaterOne(t *testing.T) {
	var b strings.Builder
	for s := range 12 {
		fmt.Fprintf(&b, "a %d %d %d\n", s, 1<<20, s)
	}
	for k := range 135 {
		fmt.Fprintf(&b, "a %d %d 100\n", 100+k, 1<<30)
	}
	r, err := replay.Run(tracetest.Inline(t, b.String()), memory.VirtualLayout(memory.VirtualPlan{}), replay.Options{})
	require.NoError(t, err)
	require.Equal(t, uint64(12<<20+135<<30), r.PeakLiveBytes)
}

// Streams of a few GiB each fill most of the heap: 39 streams of three
// 1 GiB reservations, and 120 streams of one (a pool needing exactly 1 GiB
// takes a 1 GiB range, not 2 GiB).
func TestManyStreamsOfAFewGiBFillTheHeap(t *testing.T) {
	for _, c := range []struct{ streams, each int }{{39, 3}, {120, 1}} {
		var b strings.Builder
		id := 0
		for s := range c.streams {
			for range c.each {
				fmt.Fprintf(&b, "a %d %d %d\n", id, 1<<30, s)
				id++
			}
		}
		r, err := replay.Run(tracetest.Inline(t, b.String()), memory.VirtualLayout(memory.VirtualPlan{}), replay.Options{})
		require.NoError(t, err, "%d streams of %d GiB", c.streams, c.each)
		require.Equal(t, uint64(id)<<30, r.PeakLiveBytes)
	}
}

// A plan's places may spread over far more address space than its run
// held, and a run that leaves the plan places above them: here a plan
// whose places end past 300 GiB, and a run that takes its first two places
// (kept to the end, as weights are), leaves it, and fragments its address
// space (60 buffers of 1 GiB, every other one freed, then 60 of 1.5 GiB).
// Placed only above the planned places it ran out of address space at
// 84 GB live with the heap far from full; the planned places' area, opened
// once no range is left, holds the rest, and the run peaks at 122 GiB.
func TestARunThatLeftItsPlanFindsRoomAmongThePlannedPlaces(t *testing.T) {
	plan := memory.VirtualPlan{PlannedBytes: 4 << 30, Slots: []memory.VirtualSlot{
		{Size: 1 << 30, Offset: 0}, {Size: 1 << 30, Offset: 2 << 30}, {Size: 2 << 30, Offset: 300 << 30}}}
	var b strings.Builder
	for id := range 2 {
		fmt.Fprintf(&b, "a %d %d 0\n", id, 1<<30)
	}
	for id := 2; id < 62; id++ {
		fmt.Fprintf(&b, "a %d %d 0\n", id, 1<<30)
	}
	for id := 2; id < 62; id += 2 {
		fmt.Fprintf(&b, "f %d\n", id)
	}
	for id := 62; id < 122; id++ {
		fmt.Fprintf(&b, "a %d %d 0\n", id, 3<<29)
	}
	for _, id := range []int{0, 1, 63} {
		fmt.Fprintf(&b, "f %d\n", id)
	}
	fmt.Fprintf(&b, "a 122 %d 0\n", 2<<30)
	r, err := replay.Run(tracetest.Inline(t, b.String()), memory.VirtualLayout(plan), replay.Options{})
	require.NoError(t, err, "a plan never keeps a run from memory the device has")
	require.Equal(t, uint64(2<<30+30<<30+90<<30), r.PeakLiveBytes)
	require.LessOrEqual(t, r.Ratio(), 1.03)
}

// The replay gives its layout to every stream: a plan whose places end at
// 120 GiB, and 40 streams that each make one 1 MiB buffer, none of them
// following it. Each stream's range reached past the planned places, and
// the third stream failed with 2 MiB live; a run that leaves its plan with
// nothing planned live places from the low end of its range.
func TestStreamsThatNeverFollowAPlanDoNotReserveItsPlaces(t *testing.T) {
	plan := memory.VirtualPlan{PlannedBytes: 2 << 30, Slots: []memory.VirtualSlot{{Size: 1 << 30, Offset: 0}, {Size: 1 << 30, Offset: 119 << 30}}}
	var b strings.Builder
	for s := range 40 {
		fmt.Fprintf(&b, "a %d %d %d\n", s, 1<<20, s)
	}
	r, err := replay.Run(tracetest.Inline(t, b.String()), memory.VirtualLayout(plan), replay.Options{})
	require.NoError(t, err)
	require.Equal(t, uint64(40<<20), r.PeakLiveBytes)
	require.Len(t, r.Streams, 40)
}

// Streams that each freed a 30 GiB buffer and then made a 1 MiB one on its
// granules, and a stream after them asking for 60 GiB: each kept the whole
// 30 GiB chunk under its small buffer, and after three such streams the
// 60 GiB buffer was refused with 3 MiB live. A chunk is at most a 32nd of
// the heap, so a cleanup leaves each stream one.
func TestASmallBufferKeepsLittleOfAFreedLargeOne(t *testing.T) {
	for _, streams := range []int{3, 4, 8} {
		var b strings.Builder
		id := 0
		for s := range streams {
			fmt.Fprintf(&b, "a %d %d %d\nf %d\na %d %d %d\n", id, uint64(30<<30), s, id, id+1, 1<<20, s)
			id += 2
		}
		fmt.Fprintf(&b, "a %d %d %d\n", id, uint64(60<<30), streams)
		r, err := replay.Run(tracetest.Inline(t, b.String()), memory.VirtualLayout(memory.VirtualPlan{}), replay.Options{})
		require.NoError(t, err, "%d streams", streams)
		require.Equal(t, uint64(streams)<<20+60<<30, r.PeakLiveBytes)
	}
}

// Three streams that grow to 80 GiB and then keep their first 1 GiB
// buffer, and a fourth that makes twenty: each of the three held 150 GB
// of ranges for its one buffer, and the fourth found no range for its
// sixth with 8.6 GB live. A cleanup (the replay's, on a refusal) gives
// back the ranges taken last that hold nothing.
func TestRangesAStreamNoLongerNeedsGoBack(t *testing.T) {
	var b strings.Builder
	id := 0
	for s := range 3 {
		first := id
		for range 80 {
			fmt.Fprintf(&b, "a %d %d %d\n", id, 1<<30, s)
			id++
		}
		for k := first + 1; k < id; k++ {
			fmt.Fprintf(&b, "f %d\n", k)
		}
	}
	for range 20 {
		fmt.Fprintf(&b, "a %d %d 3\n", id, 1<<30)
		id++
	}
	r, err := replay.Run(tracetest.Inline(t, b.String()), memory.VirtualLayout(memory.VirtualPlan{}), replay.Options{})
	require.NoError(t, err)
	require.Equal(t, uint64(82<<30), r.PeakLiveBytes, "the third stream at its peak, and a buffer of each before it")
}

// A replay counts the memory its submissions bind and unbind, as the
// device's time grows with it. Two buffers of 10 MiB fill the first chunk
// of 20 MiB (the first binds it all: its own granules and, ahead, the
// next buffer's); the first freed, a buffer of 12 MiB fits neither its
// hole nor the chunk, lands above, and takes the hole's memory, unbound,
// and 2 MiB of a new chunk of 10 MiB.
func TestAReplayCountsTheMemoryItsSubmissionsMove(t *testing.T) {
	const mib = 1 << 20
	tr := tracetest.Inline(t, fmt.Sprintf("a 1 %d 0\na 2 %d 0\nf 1\na 3 %d 0\n", 10*mib, 10*mib, 12*mib))
	r, err := replay.Run(tr, memory.VirtualLayout(memory.VirtualPlan{}), replay.Options{})
	require.NoError(t, err)
	require.Equal(t, uint64(2), r.DriverAllocs)
	require.Equal(t, uint64(2), r.BindCalls)
	require.Equal(t, uint64(20+12)*mib, r.BoundBytes, "the first chunk, then the third buffer")
	require.Equal(t, uint64(10*mib), r.UnboundBytes, "the hole's memory, moved under the third buffer")
}

// The counting storage refuses the binds a device refuses, as the cpu
// device and vk do, so a replay fails where a run on the device would:
// it counted a bind into no range, one past its range, into a released
// one and one not in whole granules. A refused submission counts nothing.
func TestCountingStorageRefusesTheBindsADeviceRefuses(t *testing.T) {
	const g = replay.H200Granule
	s := replay.NewCountingStorage(1 << 30)
	s.Granule = g
	v, err := s.ReserveVirtual(4 * g)
	require.NoError(t, err)
	page, err := s.Alloc(2 * g)
	require.NoError(t, err)
	require.NoError(t, s.Bind(v.ID, []vkruntime.SparseBind{{Offset: 3 * g, Size: g, Memory: page.ID, MemoryOffset: g}}))
	for name, c := range map[string]struct {
		virtual vkruntime.StorageID
		bind    vkruntime.SparseBind
		want    error
	}{
		"into a page, not a range":   {page.ID, vkruntime.SparseBind{Size: g, Memory: page.ID}, vkruntime.ErrNotFound},
		"into no storage":            {v.ID + 100, vkruntime.SparseBind{Size: g, Memory: page.ID}, vkruntime.ErrNotFound},
		"past the range":             {v.ID, vkruntime.SparseBind{Offset: 3 * g, Size: 2 * g, Memory: page.ID}, vkruntime.ErrOutOfRange},
		"unbind past the range":      {v.ID, vkruntime.SparseBind{Offset: 4 * g, Size: g}, vkruntime.ErrOutOfRange},
		"offset wrapping":            {v.ID, vkruntime.SparseBind{Offset: 1<<64 - g, Size: 2 * g}, vkruntime.ErrOutOfRange},
		"memory past the allocation": {v.ID, vkruntime.SparseBind{Size: 2 * g, Memory: page.ID, MemoryOffset: g}, vkruntime.ErrOutOfRange},
		"memory not held":            {v.ID, vkruntime.SparseBind{Size: g, Memory: page.ID + 100}, vkruntime.ErrNotFound},
		"half a granule":             {v.ID, vkruntime.SparseBind{Size: g / 2, Memory: page.ID}, vkruntime.ErrInvalidArgument},
		"no bytes":                   {v.ID, vkruntime.SparseBind{Memory: page.ID}, vkruntime.ErrInvalidArgument},
	} {
		require.ErrorIs(t, s.Bind(c.virtual, []vkruntime.SparseBind{c.bind}), c.want, name)
	}
	s.ReleaseVirtual(v.ID)
	err = s.Bind(v.ID, []vkruntime.SparseBind{{Size: g, Memory: page.ID}})
	require.ErrorIs(t, err, vkruntime.ErrNotFound, "into a released range")
	require.Equal(t, uint64(1), s.Counts().BindCalls, "refused submissions count nothing")
	require.Equal(t, uint64(g), s.Counts().BoundBytes)
}
