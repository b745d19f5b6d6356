package plan

import (
	"fmt"
	"os"
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/vkrt/vkrt/dryrun/replay"
	"github.com/vkrt/vkrt/dryrun/trace"
	"github.com/vkrt/vkrt/internal/gen"
	"github.com/vkrt/vkrt/internal/torchalloc"
	"github.com/vkrt/vkrt/memory"
)

// interleave runs the traces at once, stream i+1 each, an event of each in
// turn: one trace whose allocations are all of theirs.
func interleave(name string, runs []*trace.Trace) *trace.Trace {
	out := &trace.Trace{Name: name}
	first := make([]int32, len(runs)) // each run's first allocation index
	for i, r := range runs {
		first[i] = int32(out.Allocations)
		out.Allocations += r.Allocations
	}
	next := make([]int, len(runs))
	for left := true; left; {
		left = false
		for i, r := range runs {
			if next[i] == len(r.Events) {
				continue
			}
			e := r.Events[next[i]]
			e.Index += first[i]
			if e.Op == trace.OpAlloc {
				e.Stream = uint32(i + 1)
			}
			e.Line = len(out.Events) + 1
			out.Events = append(out.Events, e)
			next[i]++
			left = true
		}
	}
	return out
}

func TestInterleavedRunsKeepEachRunsStream(t *testing.T) {
	a, b := gen.Run(3, gen.Generation, 1), gen.Run(3, gen.Generation, 2)
	both := interleave("both", []*trace.Trace{a, b})
	require.NoError(t, both.Check())
	require.Equal(t, a.Allocations+b.Allocations, both.Allocations)
	require.Len(t, both.Events, len(a.Events)+len(b.Events))
	r, err := replay.Run(both, memory.VirtualLayout(memory.VirtualPlan{}), replay.Options{})
	require.NoError(t, err)
	require.Len(t, r.Streams, 2, "a stream each")
	// Each stream's pools see their run's events in its order, on a
	// device with room for both: they end as the run alone does.
	for i, run := range []*trace.Trace{a, b} {
		alone, err := replay.Run(run, memory.VirtualLayout(memory.VirtualPlan{}), replay.Options{})
		require.NoError(t, err)
		require.Equal(t, uint32(i+1), r.Streams[i].Stream)
		require.Equal(t, alone.Report.Usage(), r.Streams[i].Report.Usage(), "stream %d is %s", i+1, run.Name)
	}
}

// smallestDevice tries devices of 1.000 to 1.200 times peak, in steps of
// 0.005, and returns the smallest from which runs succeeds on every step
// up to 1.200: a run that fails on a device and succeeds on a smaller one
// counts from above the failure. 1.205 is a failure at 1.200.
func smallestDevice(peak uint64, runs func(device uint64) bool) float64 {
	from := 1000
	for x := 1000; x <= 1200; x += 5 {
		if !runs(peak * uint64(x) / 1000) {
			from = x + 5
		}
	}
	return float64(from) / 1000
}

// BenchmarkStreamsOnATightDevice runs four and six streams of one
// generated workload at once (runs 1 and 2 of it in turn, every family,
// the seeds VKRT_PAIR_SEEDS names, 1-9 unset) with no plan, on devices
// from their peak live bytes up, and reports how often the pools run on
// a device no larger than the one PyTorch's expandable segments need,
// modelled (internal/torchalloc, which empties its cache and retries when
// the device refuses it, as replay.Run does: Retries), and each side's
// mean smallest device over the peak. Each stream has its own pools, as
// each has its own segments in PyTorch, so memory one stream holds
// unused is memory another cannot have: what a device allocation strands
// when some granule of it stays bound shows here.
func BenchmarkStreamsOnATightDevice(b *testing.B) {
	first, last, err := parseSeedRange(os.Getenv(pairSeedsVar))
	require.NoError(b, err)
	for _, streams := range []int{4, 6} {
		b.Run(fmt.Sprintf("%d-streams", streams), func(b *testing.B) {
			for b.Loop() {
				var runs, noLarger int
				var ours, theirs float64
				for _, shape := range gen.Shapes() {
					for seed := first; seed <= last; seed++ {
						var each []*trace.Trace
						for i := range streams {
							each = append(each, gen.Run(uint64(seed), shape, uint64(1+i%2)))
						}
						tr := interleave(fmt.Sprintf("%s_%d_x%d", shape, seed, streams), each)
						peak := tr.PeakLiveBytes()
						o := smallestDevice(peak, func(device uint64) bool {
							d := replay.H200()
							d.MemorySize = device
							_, err := replay.Run(tr, memory.VirtualLayout(memory.VirtualPlan{}), replay.Options{Device: d})
							return err == nil
						})
						p := smallestDevice(peak, func(device uint64) bool {
							_, err := torchalloc.ReplayOn(tr, torchalloc.Expandable, device)
							return err == nil
						})
						runs++
						if o <= p {
							noLarger++
						}
						ours, theirs = ours+o, theirs+p
					}
				}
				n := float64(runs)
				b.ReportMetric(float64(noLarger)/n, "share-no-larger-than-pytorch")
				b.ReportMetric(ours/n, "mean-device-over-peak")
				b.ReportMetric(theirs/n, "pytorch-mean-device-over-peak")
			}
		})
	}
}
