package htmlreport

import (
	"bytes"
	"strings"
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/vkrt/vkrt/dryrun/trace"
	"github.com/vkrt/vkrt/memory"
)

// streamsTrace allocates and frees once on each of streams streams.
func streamsTrace(streams int) *trace.Trace {
	t := &trace.Trace{Name: "streams", Allocations: streams}
	for i := range streams {
		t.Events = append(t.Events, trace.Event{Op: trace.OpAlloc, Index: int32(i), Size: 4096, Stream: uint32(i)},
			trace.Event{Op: trace.OpFree, Index: int32(i)})
	}
	return t
}

// A chart reads every pool after every event and keeps states holding
// every pool: 5,000 streams of one allocation each took over two minutes
// and 3.5 GB before the page was refused.
func TestReplayRefusesMoreStreamsThanAChartDraws(t *testing.T) {
	_, err := Replay(streamsTrace(5000), testDefault.Default, Buckets)
	require.ErrorIs(t, err, ErrTooManyPools)
	require.ErrorContains(t, err, "5000 streams")
	require.ErrorContains(t, err, "at most 64")
	_, err = Replay(streamsTrace(MaxPools+1), testDefault.Default, Buckets)
	require.ErrorIs(t, err, ErrTooManyPools)
}

// Past MaxPools pools a chart draws each stream as one, its pools summed,
// where it refused the trace: ten streams under SubSlices (7 pools each)
// had no chart.
func TestAChartOfMorePoolsThanItDrawsSumsEachStreamsPools(t *testing.T) {
	// Sub-slices has 7 pools a stream: 9 streams are charted pool by
	// pool, 10 stream by stream.
	l := memory.SubSlicesLayout()
	run, err := Replay(streamsTrace(9), l, Buckets)
	require.NoError(t, err)
	require.False(t, run.ByStream)
	require.Len(t, run.Pools, 63)

	tr := streamsTrace(10)
	tr.Events[0].Size = 3 << 20 // stream 0's one allocation is the peak
	run, err = Replay(tr, l, Buckets)
	require.NoError(t, err)
	require.True(t, run.ByStream)
	require.Equal(t, 7, run.PoolsPerStream)
	require.Len(t, run.Pools, 10)
	for k, p := range run.Pools {
		require.Equal(t, run.Result.Streams[k].Report.Usage(), p.Usage, "stream %d: its pools summed", k)
		require.Equal(t, uint32(k), run.PoolStreams[k])
	}
	require.Equal(t, "stream 3: its 7 pools", run.poolLabel(3))
	// The samples hold one stream a column, and its peak is the replay's.
	var peak uint64
	for _, s := range run.Samples {
		require.Len(t, s.Reserved, 10)
		peak = max(peak, s.Reserved[0])
	}
	require.Equal(t, run.Result.Streams[0].Report.Usage().BytesReserved, peak)

	cv, err := chartOf(run, "default", "t", topOf(run.Result.ReservedPeakBytes), len(tr.Events), &colours{})
	require.NoError(t, err)
	require.Equal(t, "Its 10 streams have 70 pools in all, more than a chart draws (64): each colour is one stream, its 7 pools summed.", cv.Note)
	require.Len(t, cv.Bands, 2*10, "a live and a reserved band a stream")

	// The page says so over each chart and labels each stream's bands.
	rep, err := ReplayTrace(tr, Layouts{Default: l, DefaultName: "sub-slices", Plan: &PlanFrom{Layout: l, Source: "sub-slices again"}}, Buckets, Progress{})
	require.NoError(t, err)
	var page bytes.Buffer
	require.NoError(t, Render(&page, Page{Traces: []*TraceReport{rep}}))
	require.Equal(t, 2, strings.Count(page.String(), "each colour is one stream, its 7 pools summed"), "over both charts")
	require.Contains(t, page.String(), `data-pool="stream 3: its 7 pools"`)

	// One stream under a layout of more pools than a chart draws is drawn
	// as one.
	pools := make([]memory.SlicedPool, MaxPools+1)
	for i := range pools {
		pools[i] = memory.SlicedPool{PageSize: 2 << 20 << (i % 8)}
	}
	run, err = Replay(streamsTrace(1), memory.SlicedLayout(pools...), Buckets)
	require.NoError(t, err)
	require.True(t, run.ByStream)
	require.Equal(t, "all 66 pools", run.poolLabel(0))
}
