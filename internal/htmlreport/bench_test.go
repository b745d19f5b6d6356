package htmlreport

import (
	"bytes"
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/vkrt/vkrt/dryrun/replay"
	"github.com/vkrt/vkrt/internal/tracetest"
)

// BenchmarkLargestTrace charts llama_generate (286,475 events): a plain
// replay, the same replay read after every event and downsampled, and the
// rendering of the page from both runs, with its size.
func BenchmarkLargestTrace(b *testing.B) {
	trace := tracetest.Read(b, "llama_generate")
	b.Run("replay", func(b *testing.B) {
		for b.Loop() {
			_, err := replay.Run(trace, testDefault.Default, replay.Options{})
			require.NoError(b, err)
		}
	})
	b.Run("charted", func(b *testing.B) {
		for b.Loop() {
			_, err := Replay(trace, testDefault.Default, Buckets)
			require.NoError(b, err)
		}
	})
	tr, err := ReplayTrace(trace, testDefault, Buckets, Progress{})
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
