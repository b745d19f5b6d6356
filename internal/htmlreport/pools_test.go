package htmlreport

import (
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
func TestReplayRefusesMorePoolsThanAChartDraws(t *testing.T) {
	_, err := Replay(streamsTrace(5000), testDefault.Default, Buckets)
	require.ErrorIs(t, err, ErrTooManyPools)
	require.ErrorContains(t, err, "5000 streams")
	require.ErrorContains(t, err, "at most 64")

	// Sub-slices has 7 pools a stream: 9 streams are charted, 10 are not.
	l := memory.SubSlicesLayout()
	run, err := Replay(streamsTrace(9), l, Buckets)
	require.NoError(t, err)
	require.Len(t, run.Pools, 63)
	_, err = Replay(streamsTrace(10), l, Buckets)
	require.ErrorIs(t, err, ErrTooManyPools)
	require.ErrorContains(t, err, "70 in all")

	// One stream under a layout of more pools than a chart draws.
	pools := make([]memory.SlicedPool, MaxPools+1)
	for i := range pools {
		pools[i] = memory.SlicedPool{PageSize: 2 << 20 << (i % 8)}
	}
	_, err = Replay(streamsTrace(1), memory.SlicedLayout(pools...), Buckets)
	require.ErrorIs(t, err, ErrTooManyPools)
}
