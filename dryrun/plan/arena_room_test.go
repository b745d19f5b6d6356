package plan

import (
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/vkrt/vkrt/dryrun/replay"
	"github.com/vkrt/vkrt/dryrun/trace"
	"github.com/vkrt/vkrt/internal/gen"
	"github.com/vkrt/vkrt/memory"
	vkruntime "github.com/vkrt/vkrt/runtime"
)

// On a device without sparse residency a strong plan is an arena. Another
// run of the workload that leaves it keeps the arena's pages for the few
// reservations still on them; when the device then has no memory for the
// fallback pools, the rest goes to the room the pages have spare. The run
// of seed 40's third conv_training under the plan of its first was refused
// with 73 MB live and 620 MB reserved on a device of 889 MB that runs it
// with no plan.
func TestAnArenaPlanLendsItsRoomWhenTheDeviceRunsOut(t *testing.T) {
	dev := vkruntime.DeviceProperties{Alignment: 256, MaxPageSize: 256 << 20, MemorySize: 888801280}
	opts := replay.Options{Device: dev, NoSparse: true}
	from, on := gen.Run(40, gen.ConvTraining, 1), gen.Run(40, gen.ConvTraining, 3)
	l, _, _ := strongArena(t, from, opts)
	_, err := replay.Run(on, memory.SubSlicesLayout(), opts)
	require.NoError(t, err, "the device holds the run with no plan")
	r, err := replay.Run(on, l, opts)
	require.NoError(t, err, "nor does the plan fail it")
	require.LessOrEqual(t, r.ReservedPeakBytes, dev.MemorySize)
	require.Positive(t, r.Spills)
}

// strongArena is the strong plan of from, measured under SubSlices on the
// device of opts (without sparse residency, so an arena), its arena plan
// and from's peak live bytes.
func strongArena(t *testing.T, from *trace.Trace, opts replay.Options) (memory.Layout, memory.ArenaPlan, uint64) {
	t.Helper()
	dry, err := replay.Run(from, memory.SubSlicesLayout(), opts)
	require.NoError(t, err)
	l, err := Derive(dry.Report, Options{Strength: Strong, Trace: from, Device: opts.Device})
	require.NoError(t, err)
	plan, ok := l.Arena()
	require.True(t, ok, "a strong plan for a device without sparse residency is an arena")
	return l, plan, dry.PeakLiveBytes
}

// On a device without sparse residency another run of the workload under
// an arena plan leaves it and keeps its pages for the slots still live. With
// the rest in the fallback pools beside them, the generated runs of seeds
// 1–30 reserved 3.00× their peak where SubSlices with no plan reserved 2.03×;
// with the rest in the pages' free room first, less than with no plan, in
// fewer device allocations. Under -short (with the race detector and
// invariant checks, which made it the package's slowest test at 342 s),
// seeds 1–3.
func TestOtherRunsUnderAnArenaPlanReserveLessThanWithNoPlan(t *testing.T) {
	opts := replay.Options{Device: replay.H200(), NoSparse: true}
	seeds := uint64(9)
	if testing.Short() {
		seeds = 3
	}
	var planned, plain, peak, plannedAllocs, plainAllocs uint64
	count := 0
	for seed := uint64(1); seed <= seeds; seed++ {
		for _, shape := range gen.Shapes() {
			for _, runs := range [][2]uint64{{1, 2}, {2, 1}} {
				from, on := gen.Run(seed, shape, runs[0]), gen.Run(seed, shape, runs[1])
				l, _, _ := strongArena(t, from, opts)
				r, err := replay.Run(on, l, opts)
				require.NoError(t, err)
				s, err := replay.Run(on, memory.SubSlicesLayout(), opts)
				require.NoError(t, err)
				planned, plain, peak = planned+r.ReservedPeakBytes, plain+s.ReservedPeakBytes, peak+r.PeakLiveBytes
				plannedAllocs, plainAllocs = plannedAllocs+r.DriverAllocs, plainAllocs+s.DriverAllocs
				count++
			}
		}
	}
	t.Logf("%d runs under the other run's arena plan: %.4f× their peak in %d device allocations; SubSlices with no plan %.4f× in %d",
		count, float64(planned)/float64(peak), plannedAllocs, float64(plain)/float64(peak), plainAllocs)
	require.Less(t, planned, plain)
	require.Less(t, plannedAllocs, plainAllocs)
}
