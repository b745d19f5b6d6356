package htmlreport

import (
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/vkrt/vkrt/dryrun/replay"
	"github.com/vkrt/vkrt/dryrun/trace"
	"github.com/vkrt/vkrt/internal/tracetest"
)

// TestChartingAllocatesPerSampleNotPerEvent holds the per-event hook to
// reading the pools' counters: past a plain replay of the same stream, a
// charted one allocates only for the samples it keeps (two slices each)
// and a few buffers, never once per event. Building a report per event
// allocated at least once for each of the stream's 19,678 events.
func TestChartingAllocatesPerSampleNotPerEvent(t *testing.T) {
	tr := tracetest.Read(t, "bert_dynamic")
	l := testDefault.Default
	plain := testing.AllocsPerRun(1, func() {
		_, err := replay.Run(tr, l, replay.Options{})
		require.NoError(t, err)
	})
	var run *Run
	charted := testing.AllocsPerRun(1, func() {
		var err error
		run, err = Replay(tr, l, Buckets)
		require.NoError(t, err)
	})
	t.Logf("%d events, %d samples: %.0f allocations past a plain replay's %.0f", len(tr.Events), len(run.Samples), charted-plain, plain)
	require.Greater(t, len(tr.Events), 4*len(run.Samples), "the stream is long enough to tell samples from events")
	const buffers = 256 // the downsampler's candidates and output, the stream index, the pools read: about 50 today
	require.LessOrEqual(t, charted-plain, float64(2*len(run.Samples)+buffers),
		"%d events, %d samples: %.0f allocations past a plain replay's %.0f", len(tr.Events), len(run.Samples), charted-plain, plain)
}

// ReplayTrace tells each stage as it starts, in order, and each stage's
// steps up to its total: the events of each replay, and the planning's own
// count, which the planning brings.
func TestReplayTraceTellsItsProgress(t *testing.T) {
	tr := tracetest.Read(t, "bert_dynamic")
	type stage struct {
		desc        string
		steps       int
		done, total int
	}
	var stages []stage
	progress := Progress{
		Stage: func(desc string, steps int) { stages = append(stages, stage{desc: desc, steps: steps}) },
		Step: func(done, total int) {
			s := &stages[len(stages)-1]
			require.GreaterOrEqual(t, done, s.done, "%s goes forward", s.desc)
			s.done, s.total = done, total
		},
	}
	_, err := ReplayTrace(tr, testDefault, Buckets, progress)
	require.NoError(t, err)
	events := len(tr.Events)
	require.Len(t, stages, 3)
	require.Equal(t, stage{"replaying bert_dynamic", events, events, events}, stages[0])
	require.Equal(t, "planning bert_dynamic", stages[1].desc)
	require.Positive(t, stages[1].total, "the planning counts its work")
	require.Equal(t, stages[1].total, stages[1].done)
	require.Equal(t, stage{"replaying bert_dynamic under the plan", events, events, events}, stages[2])

	// A plan given is not derived: no planning stage.
	stages = nil
	given := testDefault
	given.Plan = &PlanFrom{Layout: testDefault.Default, Source: "given"}
	_, err = ReplayTrace(tr, given, Buckets, progress)
	require.NoError(t, err)
	require.Len(t, stages, 2)
	require.Equal(t, "replaying bert_dynamic under the plan", stages[1].desc)
}

// A trace built by hand that frees what it never allocated, names an
// allocation past its count, or is nil, is refused as the replay refuses
// it (trace.ErrMalformed, trace.ErrNil): the chart read its events before
// the replay checked them, and panicked with an index out of range.
func TestAMalformedTraceIsRefusedNotPanickedOn(t *testing.T) {
	for name, tr := range map[string]*trace.Trace{
		"free only":        {Name: "f", Events: []trace.Event{{Op: trace.OpFree, Index: 0}}},
		"index past count": {Name: "p", Allocations: 1, Events: []trace.Event{{Op: trace.OpAlloc, Index: 3, Size: 8}}},
		"negative index":   {Name: "n", Allocations: 1, Events: []trace.Event{{Op: trace.OpAlloc, Index: 0, Size: 8}, {Op: trace.OpFree, Index: -1}}},
	} {
		_, err := Replay(tr, testDefault.Default, Buckets)
		require.ErrorIs(t, err, trace.ErrMalformed, name)
		_, err = ReplayTrace(tr, testDefault, Buckets, Progress{})
		require.ErrorIs(t, err, trace.ErrMalformed, name)
		require.ErrorContains(t, err, tr.Name+" event", name)
	}
	_, err := Replay(nil, testDefault.Default, Buckets)
	require.ErrorIs(t, err, trace.ErrNil)
	_, err = ReplayTrace(nil, testDefault, Buckets, Progress{})
	require.ErrorIs(t, err, trace.ErrNil)
}
