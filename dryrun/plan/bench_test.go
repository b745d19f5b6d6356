package plan

import (
	"fmt"
	"math/rand/v2"
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

// liveAtOnce is a stream of n allocations all live at once, then all freed,
// sizes from 16 B to 64 KiB: the shape that made the greedy placements
// quadratic.
func liveAtOnce(n int) *trace.Trace {
	rng := rand.New(rand.NewPCG(uint64(n), 1))
	t := &trace.Trace{Name: fmt.Sprintf("live_%d", n), Allocations: n}
	for i := range n {
		t.Events = append(t.Events, trace.Event{Op: trace.OpAlloc, Index: int32(i), Size: 16 * (1 + rng.Uint64N(4096))})
	}
	for i := range n {
		t.Events = append(t.Events, trace.Event{Op: trace.OpFree, Index: int32(i)})
	}
	return t
}

// BenchmarkPlanManyLive plans streams of 10k to 1M allocations live at
// once; ns/alloc staying flat across the sizes is the near-linear planner.
func BenchmarkPlanManyLive(b *testing.B) {
	for _, n := range []int{10_000, 80_000, 1_000_000} {
		tr := liveAtOnce(n)
		b.Run(fmt.Sprint(n), func(b *testing.B) {
			for b.Loop() {
				if _, err := Derive(memory.Report{}, Options{Strength: Strong, Trace: tr}); err != nil {
					b.Fatal(err)
				}
			}
			b.ReportMetric(float64(b.Elapsed().Nanoseconds())/float64(b.N)/float64(n), "ns/alloc")
		})
	}
}
