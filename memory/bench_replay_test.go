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
// reports the cost of one event (ns/event): compare the layouts within one
// run.
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
				handles := make([]memory.Handle, tr.Allocations)
				owner := make([]*memory.Manager, tr.Allocations)
				for b.Loop() {
					storage := dryreplay.NewCountingStorage(dryreplay.H200().MemorySize)
					storage.Granule = c.granule
					// A manager a stream, as a client's streams have.
					managers := map[uint32]*memory.Manager{}
					for _, e := range tr.Events {
						if e.Op != trace.OpAlloc {
							if err := owner[e.Index].Free(handles[e.Index]); err != nil {
								b.Fatal(err)
							}
							continue
						}
						m := managers[e.Stream]
						if m == nil {
							if m, err = memory.NewManager(storage, dryreplay.H200(), c.layout); err != nil {
								b.Fatal(err)
							}
							managers[e.Stream] = m
						}
						h, err := m.Reserve(e.Size, memory.Eager)
						if err != nil {
							b.Fatalf("%s line %d: %v", name, e.Line, err)
						}
						handles[e.Index], owner[e.Index] = h, m
					}
					if c.granule != 0 {
						// The storage offers sparse residency: the pool is
						// virtual, not the SubSlices fallback.
						k, ok := owner[0].Report().Dynamic[0].Kind.(memory.VirtualKind)
						if !ok || k.GranuleSize != c.granule {
							b.Fatalf("%s: the pools are %v, not virtual at %d B granules", name, owner[0].Report().Dynamic[0].Kind, c.granule)
						}
					}
				}
				b.ReportMetric(float64(b.Elapsed().Nanoseconds())/float64(b.N*len(tr.Events)), "ns/event")
			})
		}
	}
}
