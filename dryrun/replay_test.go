package dryrun

import (
	"errors"
	"strings"
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/vkrt/vkrt/memory"
	vkruntime "github.com/vkrt/vkrt/runtime"
)

func mustTrace(t testing.TB, text string) *Trace {
	t.Helper()
	tr, err := ReadTrace("inline", strings.NewReader(text))
	require.NoError(t, err)
	return tr
}

func readShipped(t testing.TB, name string) *Trace {
	t.Helper()
	tr, err := ReadTraceFile("../testdata/traces/" + name + ".trace.gz")
	require.NoError(t, err)
	return tr
}

func TestReplayIsDeterministic(t *testing.T) {
	tr := readShipped(t, "resnet50_train")
	plan, err := Plan(memory.Report{}, PlanOptions{Strength: Strong, Trace: tr, SearchSteps: searchSteps()})
	require.NoError(t, err)
	for _, l := range []memory.Layout{memory.SubSlicesLayout(), memory.ExclusivePagesLayout(), plan} {
		a, err := Replay(tr, l, ReplayOptions{})
		require.NoError(t, err)
		b, err := Replay(tr, l, ReplayOptions{})
		require.NoError(t, err)
		require.Positive(t, a.NsPerEvent)
		a.NsPerEvent, b.NsPerEvent = 0, 0
		require.Equal(t, a, b, "layout %s", l.Kind())
		require.Equal(t, tr.PeakLiveBytes(), a.PeakLiveBytes)
		require.GreaterOrEqual(t, a.ReservedPeakBytes, a.PeakLiveBytes)
	}
	again, err := Plan(memory.Report{}, PlanOptions{Strength: Strong, Trace: tr, SearchSteps: searchSteps()})
	require.NoError(t, err)
	require.True(t, plan.Equal(again), "planning is deterministic")
}

func TestReplayCountsDriverAllocations(t *testing.T) {
	// Direct: one device allocation per reservation, reused by exact size.
	tr := mustTrace(t, "a 1 100 0\na 2 100 0\nf 1\na 3 100 0\na 4 5000 0\nf 2\nf 3\nf 4\n")
	r, err := Replay(tr, memory.DirectLayout(), ReplayOptions{})
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
	tr := mustTrace(t, "a 1 600000 0\na 2 600000 0\n")
	_, err := Replay(tr, capped, ReplayOptions{})
	require.ErrorIs(t, err, vkruntime.ErrPoolCapacityExceeded)
	var ce *vkruntime.CapacityError
	require.ErrorAs(t, err, &ce)
	require.Equal(t, uint64(600000), ce.Size)
	require.Contains(t, err.Error(), "inline line 2")

	_, err = Replay(tr, memory.SlicedLayout(), ReplayOptions{})
	var ie *memory.InstallError
	require.ErrorAs(t, err, &ie, "an invalid layout is refused before the replay starts")
}

func TestReplayDeviceAndProgress(t *testing.T) {
	require.NoError(t, H200.Validate())
	require.Equal(t, uint64(4<<30-16), H200.MaxPageSize, "one page binds as one storage buffer")

	small := vkruntime.DeviceProperties{Alignment: 256, MaxPageSize: 1 << 20, MemorySize: 1 << 40}
	tr := Generate(1, DynamicInference)
	var calls, last int
	r, err := Replay(tr, memory.DirectLayout(), ReplayOptions{Device: small, Progress: func(done, total int) {
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
	_, err = Replay(mustTrace(t, "a 1 600000 0\na 2 600000 0\n"), memory.DirectLayout(), ReplayOptions{Device: tiny})
	require.ErrorIs(t, err, vkruntime.ErrOutOfDeviceMemory, "the counting storage holds no more than the device has")
	require.Contains(t, err.Error(), "line 2")
}

func TestCountingStorage(t *testing.T) {
	s := NewCountingStorage(1000)
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
	require.Equal(t, StorageCounts{Allocs: 2, Deallocs: 1, Live: 1, BytesHeld: 400, PeakBytesHeld: 1000}, s.Counts())
	c, err := s.Alloc(600)
	require.NoError(t, err)
	require.NotEqual(t, a.ID, c.ID, "ids are never reused")
	_, err = NewCountingStorage(0).Alloc(1 << 62)
	require.NoError(t, err, "no limit")
}
