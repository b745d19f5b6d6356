package replay_test

import (
	"bytes"
	"errors"
	"fmt"
	"log/slog"
	"slices"
	"strings"
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/vkrt/vkrt/dryrun/plan"
	"github.com/vkrt/vkrt/dryrun/replay"
	"github.com/vkrt/vkrt/dryrun/trace"
	"github.com/vkrt/vkrt/internal/devtest"
	"github.com/vkrt/vkrt/internal/gen"
	"github.com/vkrt/vkrt/internal/tracetest"
	"github.com/vkrt/vkrt/memory"
	vkruntime "github.com/vkrt/vkrt/runtime"
)

func TestReplayIsDeterministic(t *testing.T) {
	tr := tracetest.Read(t, "resnet50_train")
	planned, err := plan.Derive(memory.Report{}, plan.Options{Strength: plan.Strong, Trace: tr, SearchSteps: plan.DefaultSearchSteps / 16})
	require.NoError(t, err)
	for _, l := range []memory.Layout{memory.SubSlicesLayout(), memory.ExclusivePagesLayout(), planned} {
		a, timing, err := replay.Measure(tr, l, replay.Options{})
		require.NoError(t, err)
		b, err := replay.Run(tr, l, replay.Options{})
		require.NoError(t, err)
		require.Positive(t, timing.NsPerEvent())
		require.Equal(t, len(tr.Events), timing.Events)
		require.Equal(t, a, b, "layout %s", l.Kind())
		require.Equal(t, tr.PeakLiveBytes(), a.PeakLiveBytes)
		require.GreaterOrEqual(t, a.ReservedPeakBytes, a.PeakLiveBytes)
	}
	again, err := plan.Derive(memory.Report{}, plan.Options{Strength: plan.Strong, Trace: tr, SearchSteps: plan.DefaultSearchSteps / 16})
	require.NoError(t, err)
	require.True(t, planned.Equal(again), "planning is deterministic")
}

func TestReplayCountsDriverAllocations(t *testing.T) {
	// Direct: one device allocation per reservation, reused by exact size.
	tr := tracetest.Inline(t, "a 1 100 0\na 2 100 0\nf 1\na 3 100 0\na 4 5000 0\nf 2\nf 3\nf 4\n")
	r, err := replay.Run(tr, memory.DirectLayout(), replay.Options{})
	require.NoError(t, err)
	require.Equal(t, uint64(3), r.DriverAllocs, "the third 100 B reservation reuses the first's allocation")
	require.Equal(t, uint64(5200), r.PeakLiveBytes)
	require.Equal(t, uint64(2*112+5008), r.ReservedPeakBytes, "padded to the H200's 16 B alignment")
	require.Equal(t, 4, r.Allocations)
	require.Equal(t, 8, r.Events)
	require.Zero(t, r.Spills)
	require.Zero(t, r.Report.Usage().BytesInUse, "everything was freed")
}

func TestReplayFailureNamesTheLine(t *testing.T) {
	one, page := uint64(1), uint64(1<<20)
	capped := memory.SlicedLayout(memory.SlicedPool{PageSize: page, Pages: &one})
	tr := tracetest.Inline(t, "a 1 600000 0\na 2 600000 0\n")
	_, err := replay.Run(tr, capped, replay.Options{})
	require.ErrorIs(t, err, vkruntime.ErrPoolCapacityExceeded)
	var ce *vkruntime.CapacityError
	require.ErrorAs(t, err, &ce)
	require.Equal(t, uint64(600000), ce.Size)
	require.Contains(t, err.Error(), "inline line 2")

	_, err = replay.Run(tr, memory.SlicedLayout(), replay.Options{})
	var ie *memory.InstallError
	require.ErrorAs(t, err, &ie, "an invalid layout is refused before the replay starts")
}

func TestReplayDeviceAndProgress(t *testing.T) {
	require.NoError(t, replay.H200().Validate())
	require.Equal(t, uint64(4<<30-16), replay.H200().MaxPageSize, "one page binds as one storage buffer")

	small := vkruntime.DeviceProperties{Alignment: 256, MaxPageSize: 1 << 20, MemorySize: 1 << 40}
	tr := gen.Trace(1, gen.DynamicInference)
	var calls, last int
	r, err := replay.Run(tr, memory.DirectLayout(), replay.Options{Device: small, Progress: func(done, total int) {
		require.Equal(t, len(tr.Events), total)
		require.GreaterOrEqual(t, done, last)
		calls, last = calls+1, done
	}})
	require.NoError(t, err)
	require.Equal(t, len(tr.Events), last)
	require.GreaterOrEqual(t, calls, 2)
	for _, pr := range r.Report.Dynamic {
		require.Zero(t, pr.Usage.BytesReserved%256, "sizes are padded to the device's alignment")
	}

	tiny := vkruntime.DeviceProperties{Alignment: 16, MaxPageSize: 1 << 20, MemorySize: 1 << 20}
	_, err = replay.Run(tracetest.Inline(t, "a 1 600000 0\na 2 600000 0\n"), memory.DirectLayout(), replay.Options{Device: tiny})
	require.ErrorIs(t, err, vkruntime.ErrOutOfDeviceMemory, "the counting storage holds no more than the device has")
	require.Contains(t, err.Error(), "line 2")
}

func TestCountingStorage(t *testing.T) {
	s := replay.NewCountingStorage(1000)
	a, err := s.Alloc(600)
	require.NoError(t, err)
	require.Equal(t, uint64(600), a.Size)
	require.Zero(t, a.Offset)
	_, err = s.Alloc(500)
	require.ErrorIs(t, err, vkruntime.ErrOutOfDeviceMemory)
	var oom *vkruntime.OutOfMemoryError
	require.True(t, errors.As(err, &oom))
	require.Equal(t, uint64(500), oom.Size)
	require.Equal(t, uint64(600), oom.Usage)
	require.Equal(t, uint64(1000), oom.Limit)
	b, err := s.Alloc(400)
	require.NoError(t, err)
	require.NotEqual(t, a.ID, b.ID)
	s.Dealloc(a.ID)
	s.Dealloc(a.ID) // twice: counted once
	s.Flush()
	require.Equal(t, replay.StorageCounts{Allocs: 2, Deallocs: 1, Live: 1, BytesHeld: 400, PeakBytesHeld: 1000}, s.Counts())
	c, err := s.Alloc(600)
	require.NoError(t, err)
	require.NotEqual(t, a.ID, c.ID, "ids are never reused")
	_, err = replay.NewCountingStorage(0).Alloc(1 << 62)
	require.NoError(t, err, "no limit")
}

// A CountingStorage's virtual ranges share the sparse address space as a
// device's do: past what the live ones leave, ReserveVirtual is out of
// device memory, and ReleaseVirtual gives a range's space back.
func TestCountingStorageRangesShareTheAddressSpace(t *testing.T) {
	s := replay.NewCountingStorage(0)
	s.Granule = replay.H200Granule
	devtest.RangesShareTheAddressSpace(t, s, s.ReleaseVirtual, func() {})
	require.Equal(t, uint64(2), s.Counts().VirtualRanges, "the refused range is not counted")
}

func TestReplayObserveSeesEveryEventAfterItApplies(t *testing.T) {
	tr := tracetest.Inline(t, "a 1 100 0\na 2 300 0\nf 1\na 3 50 0\nf 2\n")
	var events []int
	var live, reserved []uint64
	r, err := replay.Run(tr, memory.SubSlicesLayout(), replay.Options{Observe: func(i int, m *memory.Manager) {
		events = append(events, i)
		live = append(live, m.Usage().BytesInUse)
		reserved = append(reserved, m.Usage().BytesReserved)
	}})
	require.NoError(t, err)
	require.Equal(t, []int{0, 1, 2, 3, 4}, events)
	require.Equal(t, []uint64{100, 400, 300, 350, 50}, live, "each call sees its event applied")
	require.Equal(t, r.ReservedPeakBytes, slices.Max(reserved))
}

func TestReplayGivesEachStreamItsOwnPools(t *testing.T) {
	tr := tracetest.Inline(t, "a 1 100 0\na 2 100 1\na 3 100 2\nf 2\na 4 100 1\n")
	one := tracetest.Inline(t, "a 1 100 0\na 2 100 0\na 3 100 0\nf 2\na 4 100 0\n")
	for _, l := range []memory.Layout{memory.SubSlicesLayout(), memory.ExclusivePagesLayout()} {
		r, err := replay.Run(tr, l, replay.Options{NoSparse: true})
		require.NoError(t, err)
		shared, err := replay.Run(one, l, replay.Options{NoSparse: true})
		require.NoError(t, err)
		require.Equal(t, uint64(3), r.DriverAllocs, "%s: a client makes one page per stream", l.Kind())
		require.Len(t, r.Streams, 3)
		for i, s := range r.Streams {
			require.Equal(t, uint32(i), s.Stream)
		}
		require.Equal(t, r.Streams[0].Report, r.Report)
		require.Equal(t, uint64(100), r.Streams[1].Report.Usage().BytesInUse, "stream 1 freed one of its two")
		var reserved uint64
		for _, s := range r.Streams {
			reserved += s.Report.Usage().BytesReserved
		}
		require.Equal(t, reserved, r.ReservedPeakBytes, "the peak is the sum over the streams' pools")
		if _, sliced := l.Sliced(); sliced {
			require.Equal(t, uint64(1), shared.DriverAllocs, "one stream shares one page")
		}
	}
}

// The replay reads its reserved peak from the storage, once, rather than
// from the pools after every event: that holds only while the bytes every
// stream's pools reserve are the bytes the storage holds, after every
// event, under every layout and plan.
func TestReservedPeakIsThePoolsPeak(t *testing.T) {
	two := tracetest.Inline(t, "a 1 3000000 0\na 2 5000000 1\nf 1\na 3 7000000 1\na 4 100 0\nf 2\nf 3\nf 4\n")
	for _, tr := range []*trace.Trace{tracetest.Read(t, "resnet50_train"), tracetest.Read(t, "bert_dynamic"), gen.Trace(3, gen.Generation), two} {
		layouts := []memory.Layout{memory.SubSlicesLayout(), memory.ExclusivePagesLayout(), memory.DirectLayout(), memory.VirtualLayout(memory.VirtualPlan{})}
		if !slices.ContainsFunc(tr.Events, func(e trace.Event) bool { return e.Stream != 0 }) {
			// Plans are of one stream.
			for _, measured := range []memory.Layout{memory.SubSlicesLayout(), memory.VirtualLayout(memory.VirtualPlan{})} {
				r, err := replay.Run(tr, measured, replay.Options{})
				require.NoError(t, err)
				for _, s := range []plan.Strength{plan.Basic, plan.Strong} {
					l, err := plan.Derive(r.Report, plan.Options{Strength: s, Trace: tr, SearchSteps: plan.DefaultSearchSteps / 16})
					require.NoError(t, err)
					layouts = append(layouts, l)
				}
			}
		}
		for _, l := range layouts {
			reserved := map[*memory.Manager]uint64{}
			var total, peak uint64
			r, err := replay.Run(tr, l, replay.Options{Observe: func(_ int, m *memory.Manager) {
				now := m.Usage().BytesReserved
				total += now - reserved[m]
				reserved[m] = now
				peak = max(peak, total)
			}})
			require.NoError(t, err)
			require.Equal(t, peak, r.ReservedPeakBytes, "%s under %s", tr.Name, l.Kind())
		}
	}
}

// The storage offers the granule asked for, H200Granule by default, and
// none with NoSparse.
func TestReplayModelsTheSparseGranuleAskedFor(t *testing.T) {
	tr := tracetest.Inline(t, "a 1 3000000 0\na 2 100 0\nf 1\nf 2\n")
	virtual := memory.VirtualLayout(memory.VirtualPlan{})
	for _, c := range []struct {
		opts    replay.Options
		granule uint64
	}{{replay.Options{}, replay.H200Granule}, {replay.Options{Granule: 2 << 20}, 2 << 20}, {replay.Options{NoSparse: true, Granule: 2 << 20}, 0}} {
		r, err := replay.Run(tr, virtual, c.opts)
		require.NoError(t, err)
		k, ok := r.Report.Dynamic[0].Kind.(memory.VirtualKind)
		require.Equal(t, c.granule != 0, ok, "%+v: %v", c.opts, r.Report.Dynamic[0].Kind)
		if ok {
			require.Equal(t, c.granule, k.GranuleSize)
		}
	}
}

// A granule that is not a power of two is refused: the pools took none,
// and the Virtual layout was the SubSlices pools, the Result saying
// nothing of it. NoSparse models no granule, and ignores it.
func TestReplayRefusesAGranuleNotAPowerOfTwo(t *testing.T) {
	tr := tracetest.Inline(t, "a 1 3000000 0\na 2 100 0\nf 1\nf 2\n")
	virtual := memory.VirtualLayout(memory.VirtualPlan{})
	for _, g := range []uint64{3, 65535, 3 << 20, 1<<63 + 1} {
		r, err := replay.Run(tr, virtual, replay.Options{Granule: g})
		require.EqualError(t, err, fmt.Sprintf("replay: a sparse granule of %d B (Options.Granule) is not a power of two, as a device's is", g))
		require.Nil(t, r)
		_, err = replay.Run(tr, virtual, replay.Options{Granule: g, NoSparse: true})
		require.NoError(t, err)
	}
}

// Streams share the device's sparse address space (1 TiB on the H200, 7.6
// heaps): sixteen streams holding 6 GiB each, 96 GiB of the 141 GB heap,
// run to the end under the default layout with no plan, and hold little
// more than they use. When each stream's first range was four heaps, the
// fifth stream found 12 GB of address space left and failed.
func TestManyStreamsShareTheAddressSpace(t *testing.T) {
	var b strings.Builder
	id := 0
	for s := range 16 {
		for range 6 {
			fmt.Fprintf(&b, "a %d %d %d\n", id, 1<<30, s)
			id++
		}
	}
	for i := range id {
		fmt.Fprintf(&b, "f %d\n", i)
	}
	tr := tracetest.Inline(t, b.String())
	r, err := replay.Run(tr, memory.VirtualLayout(memory.VirtualPlan{}), replay.Options{})
	require.NoError(t, err)
	require.Len(t, r.Streams, 16)
	require.Equal(t, uint64(96<<30), r.PeakLiveBytes)
	require.LessOrEqual(t, float64(r.ReservedPeakBytes), 1.01*float64(r.PeakLiveBytes))
}

// On the H200 model the ranges take what vk lets them take on the H200
// (443 GB of the 1 TiB, leaving room for the heap counted three times, as
// its driver maps allocations). The first streams' pools take first ranges
// of a fourth of the heap (37.5 GB) while half of that is left, and those
// after them what they need, at least 64 MiB: streams holding 20 MiB each
// are refused at the 3,264th, where a sixteenth of what was left for each
// held 88 streams, and before that 29 took a fourth, the rest the largest
// range that fit, and the 34th found none.
func TestStreamsPastTheirFirstRangesStillFindRoom(t *testing.T) {
	streams := func(n int) *trace.Trace {
		var b strings.Builder
		for s := range n {
			fmt.Fprintf(&b, "a %d 100 %d\n", s, s)
		}
		for s := range n {
			fmt.Fprintf(&b, "f %d\n", s)
		}
		return tracetest.Inline(t, b.String())
	}
	r, err := replay.Run(streams(3263), memory.VirtualLayout(memory.VirtualPlan{}), replay.Options{})
	require.NoError(t, err)
	require.Len(t, r.Streams, 3263)
	_, err = replay.Run(streams(3264), memory.VirtualLayout(memory.VirtualPlan{}), replay.Options{})
	require.ErrorIs(t, err, vkruntime.ErrOutOfDeviceMemory)
	require.ErrorContains(t, err, "inline line 3264:")
	require.ErrorContains(t, err, "the device's sparse address space has 0 B left")
	require.ErrorContains(t, err, "sub-slices")
	r, err = replay.Run(streams(3264), memory.SubSlicesLayout(), replay.Options{})
	require.NoError(t, err, "pools without sparse binding need no address space")
	require.Len(t, r.Streams, 3264)
}

// Without sparse residency, a buffer far smaller than a free page gets a
// page of its own: a 100 MiB buffer took a free 90 GiB page, and a 60 GiB
// one after it was refused with 100 MiB live.
func TestASmallBufferLeavesALargeFreePageFree(t *testing.T) {
	text := fmt.Sprintf("a 0 %d 0\nf 0\na 1 %d 0\na 2 %d 0\n", uint64(90)<<30, uint64(100)<<20, uint64(60)<<30)
	for name, run := range map[string]func() (*replay.Result, error){
		"sub-slices": func() (*replay.Result, error) {
			return replay.Run(tracetest.Inline(t, text), memory.SubSlicesLayout(), replay.Options{})
		},
		"virtual without sparse residency": func() (*replay.Result, error) {
			return replay.Run(tracetest.Inline(t, text), memory.VirtualLayout(memory.VirtualPlan{}), replay.Options{NoSparse: true})
		},
	} {
		r, err := run()
		require.NoError(t, err, name)
		require.Equal(t, uint64(90<<30+100<<20), r.ReservedPeakBytes, name)
	}
}

// A stream with no source (generated, or recorded from a guest's dry run)
// has no lines: an error names the allocation, where it said "line 0".
func TestAnErrorInAStreamWithNoSourceNamesTheAllocation(t *testing.T) {
	tr := &trace.Trace{Name: "made", Allocations: 2, Events: []trace.Event{
		{Op: trace.OpAlloc, Index: 0, Size: 600 << 10},
		{Op: trace.OpAlloc, Index: 1, Size: 600 << 10},
		{Op: trace.OpFree, Index: 0},
		{Op: trace.OpFree, Index: 1},
	}}
	device := replay.H200()
	device.MemorySize = 1 << 20
	_, err := replay.Run(tr, memory.SubSlicesLayout(), replay.Options{Device: device, NoSparse: true})
	require.ErrorIs(t, err, vkruntime.ErrOutOfDeviceMemory)
	require.ErrorContains(t, err, "replay: made allocation 2: 614400 B with 614400 B live")
	require.NotContains(t, err.Error(), "line 0")
}

// A layout that asks past the device is said once a replay, not once for
// each stream's pools.
func TestALayoutPastTheDeviceIsSaidOnceAReplay(t *testing.T) {
	var logged bytes.Buffer
	old := slog.Default()
	slog.SetDefault(slog.New(slog.NewTextHandler(&logged, nil)))
	t.Cleanup(func() { slog.SetDefault(old) })
	tr := tracetest.Inline(t, "a 1 1000 0\na 2 1000 1\na 3 1000 2\nf 1\nf 2\nf 3\n")
	_, err := replay.Run(tr, memory.VirtualLayout(memory.VirtualPlan{PlannedBytes: 1 << 60}), replay.Options{})
	require.NoError(t, err)
	require.Equal(t, 1, strings.Count(logged.String(), memory.LayoutWarning), logged.String())
}

// A granule that is a power of two the pools cannot take on the device is
// refused under the Virtual layout, which was the SubSlices pools, the
// Result saying nothing of it. Other layouts take no granule, and NoSparse
// models none: both ignore it.
func TestReplayRefusesAGranuleThePoolsCannotTake(t *testing.T) {
	tr := tracetest.Inline(t, "a 1 3000000 0\na 2 100 0\nf 1\nf 2\n")
	virtual := memory.VirtualLayout(memory.VirtualPlan{})
	small := vkruntime.DeviceProperties{Alignment: 1 << 10, MaxPageSize: 8 << 20, MemorySize: 64 << 20}
	for _, c := range []struct {
		granule uint64
		device  vkruntime.DeviceProperties
		why     string
	}{
		{1, replay.H200(), "not a multiple of the device's alignment of 16 B"},
		{128, replay.H200(), "too small for the pools"},
		{16, replay.H200(), "too small for the pools"},
		{256, small, "not a multiple of the device's alignment of 1024 B"},
		{128 << 20, small, "more than the device's memory of 67108864 B"},
		{1 << 40, replay.H200(), "more than the device's memory of 150000000000 B"},
		{1 << 63, replay.H200(), "more than the device's memory of 150000000000 B"},
	} {
		r, err := replay.Run(tr, virtual, replay.Options{Granule: c.granule, Device: c.device})
		require.ErrorContains(t, err, fmt.Sprintf("replay: a sparse granule of %d B (Options.Granule) is %s: ", c.granule, c.why))
		require.ErrorContains(t, err, "the Virtual layout would be the SubSlices pools")
		require.Nil(t, r)
		_, err = replay.Run(tr, virtual, replay.Options{Granule: c.granule, Device: c.device, NoSparse: true})
		require.NoError(t, err)
		_, err = replay.Run(tr, memory.SubSlicesLayout(), replay.Options{Granule: c.granule, Device: c.device})
		require.NoError(t, err)
	}
	// One it takes is modelled.
	r, err := replay.Run(tr, virtual, replay.Options{Granule: 4 << 10, Device: small})
	require.NoError(t, err)
	k, ok := r.Report.Dynamic[0].Kind.(memory.VirtualKind)
	require.True(t, ok)
	require.Equal(t, uint64(4<<10), k.GranuleSize)
}
