package memory_test

import (
	"path/filepath"
	"testing"

	"github.com/stretchr/testify/require"

	dryreplay "github.com/vkrt/vkrt/dryrun/replay"
	"github.com/vkrt/vkrt/dryrun/trace"
	"github.com/vkrt/vkrt/memory"
)

// BenchmarkReplayStreams replays each shipped stream, every reservation
// and free as the trace has them, through the Virtual layout at the
// sparse granules of the H200's Vulkan driver (64 KiB) and of PyTorch's
// expandable segments (2 MiB), and through SubSlices beside them, and
// reports the cost of one event (ns/event): the loop `vkrt replay --bench`
// times, a manager a stream. Compare the layouts within one run.
func BenchmarkReplayStreams(b *testing.B) {
	for _, name := range []string{"bert_dynamic", "gpt2_train", "llama_generate", "resnet50_train"} {
		tr, err := trace.ReadFile(filepath.Join("..", "testdata", "traces", name+".trace.gz"))
		require.NoError(b, err)
		for _, c := range []struct {
			name    string
			layout  memory.Layout
			granule uint64
		}{
			{"Virtual64KiB", memory.VirtualLayout(memory.VirtualPlan{}), 64 << 10},
			{"Virtual2MiB", memory.VirtualLayout(memory.VirtualPlan{}), 2 << 20},
			{"SubSlices", memory.SubSlicesLayout(), 0},
		} {
			b.Run(name+"/"+c.name, func(b *testing.B) {
				var replayed int64 // ns of the timed loops
				for b.Loop() {
					res, timing, err := dryreplay.Measure(tr, c.layout, dryreplay.Options{Granule: c.granule, NoSparse: c.granule == 0})
					if err != nil {
						b.Fatal(err)
					}
					replayed += timing.Elapsed.Nanoseconds()
					if c.granule != 0 {
						// The storage offers sparse residency: the pool is
						// virtual, not the SubSlices fallback.
						k, ok := res.Report.Dynamic[0].Kind.(memory.VirtualKind)
						if !ok || k.GranuleSize != c.granule {
							b.Fatalf("%s: the pools are %v, not virtual at %d B granules", name, res.Report.Dynamic[0].Kind, c.granule)
						}
					}
				}
				b.ReportMetric(float64(replayed)/float64(b.N*len(tr.Events)), "ns/event")
			})
		}
	}
}
