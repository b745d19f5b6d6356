package htmlreport

import (
	"bytes"
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/vkrt/vkrt/dryrun"
	"github.com/vkrt/vkrt/memory"
)

// BenchmarkLargestTrace charts llama_generate (286,475 events): a plain
// replay, the same replay read after every event and downsampled, and the
// rendering of the page from both runs, with its size.
func BenchmarkLargestTrace(b *testing.B) {
	trace, err := dryrun.ReadTraceFile("../../testdata/traces/llama_generate.trace.gz")
	require.NoError(b, err)
	b.Run("replay", func(b *testing.B) {
		for b.Loop() {
			_, err := dryrun.Replay(trace, memory.SubSlicesLayout(), dryrun.ReplayOptions{})
			require.NoError(b, err)
		}
	})
	b.Run("charted", func(b *testing.B) {
		for b.Loop() {
			_, err := Replay(trace, memory.SubSlicesLayout(), Buckets)
			require.NoError(b, err)
		}
	})
	tr, err := ReplayTrace(trace, PlanFrom{}, Buckets)
	require.NoError(b, err)
	b.Run("render", func(b *testing.B) {
		var page bytes.Buffer
		for b.Loop() {
			page.Reset()
			require.NoError(b, Render(&page, Page{Traces: []*TraceReport{tr}}))
		}
		b.ReportMetric(float64(page.Len()), "html-bytes")
	})
}
