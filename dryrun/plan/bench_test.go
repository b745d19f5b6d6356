package plan

import (
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/vkrt/vkrt/dryrun/replay"
	"github.com/vkrt/vkrt/dryrun/trace"
	"github.com/vkrt/vkrt/internal/tracetest"
	"github.com/vkrt/vkrt/memory"
)

// BenchmarkReplay replays each shipped stream under the default layout and
// under its strong plan, reporting the cost of one allocate-or-free event.
func BenchmarkReplay(b *testing.B) {
	for _, path := range tracetest.Shipped(b) {
		tr, err := trace.ReadFile(path)
		require.NoError(b, err)
		planned, err := Derive(memory.Report{}, Options{Strength: Strong, Trace: tr})
		require.NoError(b, err)
		for _, c := range []struct {
			name   string
			layout memory.Layout
		}{{"default", memory.SubSlicesLayout()}, {"planned", planned}} {
			b.Run(tr.Name+"/"+c.name, func(b *testing.B) {
				for b.Loop() {
					if _, err := replay.Run(tr, c.layout, replay.Options{}); err != nil {
						b.Fatal(err)
					}
				}
				b.ReportMetric(float64(b.Elapsed().Nanoseconds())/float64(b.N)/float64(len(tr.Events)), "ns/event")
			})
		}
	}
}

// BenchmarkPlan plans the longest shipped stream, 143,238 allocations.
func BenchmarkPlan(b *testing.B) {
	tr, err := trace.ReadFile(tracetest.Path("llama_generate"))
	require.NoError(b, err)
	for b.Loop() {
		if _, err := Derive(memory.Report{}, Options{Strength: Strong, Trace: tr}); err != nil {
			b.Fatal(err)
		}
	}
	b.ReportMetric(b.Elapsed().Seconds()/float64(b.N), "s/plan")
}

// BenchmarkReadTrace parses the longest shipped stream.
func BenchmarkReadTrace(b *testing.B) {
	events := 0
	for b.Loop() {
		tr, err := trace.ReadFile(tracetest.Path("llama_generate"))
		if err != nil {
			b.Fatal(err)
		}
		events = len(tr.Events)
	}
	b.ReportMetric(float64(b.Elapsed().Nanoseconds())/float64(b.N)/float64(events), "ns/event")
}
