package htmlreport

import (
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/vkrt/vkrt/dryrun/replay"
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
