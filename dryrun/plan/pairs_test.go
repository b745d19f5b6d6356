package plan

import (
	"fmt"
	"os"
	"slices"
	"strconv"
	"strings"
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/vkrt/vkrt/dryrun/replay"
	"github.com/vkrt/vkrt/dryrun/trace"
	"github.com/vkrt/vkrt/internal/gen"
	"github.com/vkrt/vkrt/internal/tracetest"
	"github.com/vkrt/vkrt/memory"
	vkruntime "github.com/vkrt/vkrt/runtime"
)

// crossRunRatio is the most a plan from one run may reserve on another run
// of the same workload, over that run's peak live bytes.
const crossRunRatio = 1.03

// exactRunRatio is the most a plan may reserve on the very stream it was
// made from.
const exactRunRatio = 1.003

// planFrom is the strong plan of a dry run of a under the Virtual layout.
func planFrom(t testing.TB, a *trace.Trace) memory.Layout {
	t.Helper()
	dry, err := replay.Run(a, memory.VirtualLayout(memory.VirtualPlan{}), replay.Options{})
	require.NoError(t, err)
	l, err := Derive(dry.Report, Options{Strength: Strong, Trace: a, SearchSteps: searchSteps()})
	require.NoError(t, err)
	_, ok := l.Virtual()
	require.True(t, ok, "a stream measured under the Virtual layout gets a virtual plan")
	return l
}

func runUnder(t testing.TB, b *trace.Trace, l memory.Layout) *replay.Result {
	t.Helper()
	r, err := replay.Run(b, l, replay.Options{})
	require.NoError(t, err, "a plan never fails a run the device has memory for")
	return r
}

// The recorded second runs under the first run's plan, and the other way
// round: within 3 % of peak live and under PyTorch with expandable segments
// on the same run, with fewer device allocations than PyTorch made; each
// run under its own plan within 0.3 %.
func TestAPlanFromOneRunServesTheOther(t *testing.T) {
	if tracetest.Quick() {
		t.Skip("plans and replays four whole runs of 5,000-10,000 allocations; the plain run covers it")
	}
	for _, name := range tracetest.Variants {
		first, second := tracetest.Read(t, name), tracetest.ReadVariant(t, name)
		runs := map[string]*trace.Trace{name: first, "variants/" + name: second}
		plans := map[string]memory.Layout{name: planFrom(t, first), "variants/" + name: planFrom(t, second)}
		for from, plan := range plans {
			for on, b := range runs {
				r := runUnder(t, b, plan)
				peer := tracetest.PyTorch[on]
				what := fmt.Sprintf("%s under the plan from %s: %.4f× (%d device allocations)", on, from, r.Ratio(), r.DriverAllocs)
				t.Log(what)
				if from == on {
					require.LessOrEqual(t, r.Ratio(), exactRunRatio, what)
					require.Zero(t, r.Spills, what)
				}
				require.LessOrEqual(t, r.Ratio(), min(crossRunRatio, peer.ExpandableRatio), what)
				require.LessOrEqual(t, r.DriverAllocs, min(peer.DefaultAllocs, peer.ExpandableAllocs), what)
			}
		}
	}
}

// With no plan, the default layout reserves no more than PyTorch with
// expandable segments and makes no more device allocations than PyTorch on
// every recorded stream.
func TestTheDefaultLayoutBeatsPyTorchWithoutAPlan(t *testing.T) {
	streams := map[string]*trace.Trace{}
	for _, path := range tracetest.Planned(t) {
		tr, err := trace.ReadFile(path)
		require.NoError(t, err)
		streams[tr.Name] = tr
	}
	if !tracetest.Quick() {
		for _, name := range tracetest.Variants {
			streams["variants/"+name] = tracetest.ReadVariant(t, name)
		}
	}
	for name, tr := range streams {
		r := runUnder(t, tr, memory.VirtualLayout(memory.VirtualPlan{}))
		peer, ok := tracetest.PyTorch[name]
		require.True(t, ok, "PyTorch's figures for %s", name)
		what := fmt.Sprintf("%s: %.4f× (%d device allocations, %d binds in %d submissions)", name, r.Ratio(), r.DriverAllocs, r.Binds, r.BindCalls)
		t.Log(what)
		require.LessOrEqual(t, r.Ratio(), peer.ExpandableRatio, what)
		require.LessOrEqual(t, r.DriverAllocs, min(peer.DefaultAllocs, peer.ExpandableAllocs), what)
	}
}

// generatedPairs are the generated workloads of every family, each run
// twice with other batch and sequence sizes, image shapes, prompts and step
// counts, of seeds 1 to seeds.
func generatedPairs(seeds int) [][2]*trace.Trace { return generatedPairsOf(1, seeds) }

// generatedPairsOf is generatedPairs of seeds first to last.
func generatedPairsOf(first, last int) [][2]*trace.Trace {
	var pairs [][2]*trace.Trace
	for _, shape := range gen.Shapes() {
		for seed := first; seed <= last; seed++ {
			pairs = append(pairs, [2]*trace.Trace{gen.Run(uint64(seed), shape, 1), gen.Run(uint64(seed), shape, 2)})
		}
	}
	return pairs
}

// pairSeedsVar names the seeds the pair benchmarks replay, as FIRST-LAST
// (1-9 when unset): the tests hold seeds 1-9, and the figures the README
// gives for other seeds are measured by setting it.
const pairSeedsVar = "VKRT_PAIR_SEEDS"

// benchmarkPairs are the generated pairs of the seeds pairSeedsVar names.
func benchmarkPairs(b *testing.B) [][2]*trace.Trace {
	first, last, err := parseSeedRange(os.Getenv(pairSeedsVar))
	if err != nil {
		b.Fatalf("%s: %v", pairSeedsVar, err)
	}
	b.Logf("seeds %d-%d", first, last)
	return generatedPairsOf(first, last)
}

// parseSeedRange reads FIRST-LAST (or one seed), both from 1; empty is 1-9.
func parseSeedRange(s string) (first, last int, err error) {
	if s == "" {
		return 1, 9, nil
	}
	lo, hi, ranged := strings.Cut(s, "-")
	if first, err = strconv.Atoi(lo); err == nil {
		last = first
		if ranged {
			last, err = strconv.Atoi(hi)
		}
	}
	if err != nil || first < 1 || last < first {
		return 0, 0, fmt.Errorf("%q is not a range of seeds FIRST-LAST, 1 <= FIRST <= LAST", s)
	}
	return first, last, nil
}

// ownPlanMinPeak: streams peaking below it are left out of the exact-run
// bound: a few granules of 64 KiB at the ends of the plan's pages are more
// than 0.3 % of them.
const ownPlanMinPeak = 1 << 30

// pairOutcome is one generated run under the other run's plan and with no
// plan, against PyTorch modelled on the same run.
type pairOutcome struct {
	on             *trace.Trace
	plan           memory.Layout // the other run's
	planned, plain *replay.Result
	peer           tracetest.PyTorchRun
}

// servedByPlan: goal 1, within 3 % and PyTorch with expandable segments,
// in no more device allocations than PyTorch.
func (o pairOutcome) servedByPlan() bool {
	return o.planned.Ratio() <= min(crossRunRatio, o.peer.ExpandableRatio) && o.planned.DriverAllocs <= o.peerAllocs()
}

// beatsPyTorchWithoutPlan: goal 3, no plan reserving no more than PyTorch
// with expandable segments, in no more device allocations.
func (o pairOutcome) beatsPyTorchWithoutPlan() bool {
	return o.plain.Ratio() <= o.peer.ExpandableRatio && o.plain.DriverAllocs <= o.peerAllocs()
}

func (o pairOutcome) peerAllocs() uint64 { return min(o.peer.DefaultAllocs, o.peer.ExpandableAllocs) }

func (o pairOutcome) String() string {
	return fmt.Sprintf("%-30s %7.1f MB peak live, under the other run's plan %.4f× (%d), no plan %.4f× (%d); PyTorch expandable %.4f× (%d)",
		o.on.Name, float64(o.plain.PeakLiveBytes)/1e6, o.planned.Ratio(), o.planned.DriverAllocs, o.plain.Ratio(), o.plain.DriverAllocs, o.peer.ExpandableRatio, o.peerAllocs())
}

// crossRuns replays each run of every pair under the other run's plan and
// with no plan.
func crossRuns(t testing.TB, pairs [][2]*trace.Trace) []pairOutcome {
	var out []pairOutcome
	for _, p := range pairs {
		plans := [2]memory.Layout{planFrom(t, p[0]), planFrom(t, p[1])}
		for i, on := range p {
			out = append(out, pairOutcome{on: on, plan: plans[1-i], planned: runUnder(t, on, plans[1-i]),
				plain: runUnder(t, on, memory.VirtualLayout(memory.VirtualPlan{})), peer: tracetest.ModelledPyTorch(t, on)})
		}
	}
	return out
}

// Generated pairs, each run under the other's plan and with no plan,
// against PyTorch modelled on the same run: a plan never fails a run, and
// the share of runs meeting each goal stays where it was measured. Runs of
// one generated workload differ up to tenfold in size, and on streams of
// 45–600 MB PyTorch makes a dozen device allocations: meeting both 3 % and
// PyTorch's count there takes knowing the run's peak in advance, which the
// plan's profile foresees only as far as the two runs grow alike, so the
// misses are reported by name, not hidden. Seeds 1–9 hold what foresight
// and the settled start gained (53 of 72 served without either, 59 with
// foresight alone), what small pools with no plan gained by growing by
// halves (66 beat PyTorch before), and what the pace's tenth in hand
// gained (67 before).
func TestGeneratedPairsAgainstPyTorch(t *testing.T) {
	seeds, wantServed, wantBeaten := 9, 63, 68
	if tracetest.Quick() {
		seeds, wantServed, wantBeaten = 1, 8, 7
	}
	outcomes := crossRuns(t, generatedPairs(seeds))
	served, beaten := 0, 0
	for _, o := range outcomes {
		t.Log(o)
		if o.servedByPlan() {
			served++
		} else {
			t.Logf("  %s: the other run's plan misses goal 1", o.on.Name)
		}
		if o.beatsPyTorchWithoutPlan() {
			beaten++
		} else {
			t.Logf("  %s: no plan misses goal 3", o.on.Name)
		}
	}
	t.Logf("%d of %d runs served by the other run's plan, %d beat PyTorch with no plan", served, len(outcomes), beaten)
	require.GreaterOrEqual(t, served, wantServed, "runs served within min(1.03×, PyTorch) in PyTorch's allocations by the other run's plan")
	require.GreaterOrEqual(t, beaten, wantBeaten, "runs beating PyTorch expandable with no plan")
}

// A strong plan is laid out on the granule its stream was measured on: on
// a device of 1 or 2 MiB granules the stream under its own plan does not
// spill (the pages were laid on 64 KiB granules, and transformer_training
// and dynamic_inference of seed 31 spilled once each).
func TestOwnPlansOfOtherGranulesDoNotSpill(t *testing.T) {
	for _, granule := range []uint64{1 << 20, 2 << 20} {
		for _, shape := range gen.Shapes() {
			on := gen.Run(31, shape, 2)
			opts := replay.Options{Granule: granule}
			dry, err := replay.Run(on, memory.VirtualLayout(memory.VirtualPlan{}), opts)
			require.NoError(t, err)
			l, err := Derive(dry.Report, Options{Strength: Strong, Trace: on, SearchSteps: searchSteps()})
			require.NoError(t, err)
			r, err := replay.Run(on, l, opts)
			require.NoError(t, err)
			require.Zero(t, r.Spills, "%s on %d B granules under its own plan", on.Name, granule)
		}
	}
}

// A stream of 1 GB or more under its own plan stays within 0.3 % of its
// peak live bytes.
func TestGeneratedOwnPlansFit(t *testing.T) {
	seeds := 2
	if tracetest.Quick() {
		seeds = 1
	}
	for _, p := range generatedPairs(seeds) {
		for _, on := range p {
			if on.Allocations == 0 {
				continue
			}
			r := runUnder(t, on, planFrom(t, on))
			what := fmt.Sprintf("%s under its own plan: %.4f× (%d device allocations)", on.Name, r.Ratio(), r.DriverAllocs)
			t.Log(what)
			if r.PeakLiveBytes >= ownPlanMinPeak {
				require.LessOrEqual(t, r.Ratio(), exactRunRatio, what)
			}
			require.Zero(t, r.Spills, what)
		}
	}
}

// BenchmarkGeneratedPairs replays each run of the generated pairs of seeds
// 1-9 (or those VKRT_PAIR_SEEDS names), every family, under the other
// run's plan and with no plan, and reports against PyTorch modelled on the
// same runs: the share served by the other run's plan (goal 1), the share
// beating PyTorch with no plan (goal 3), the worst and mean reserved peak
// over peak live bytes.
func BenchmarkGeneratedPairs(b *testing.B) {
	pairs := benchmarkPairs(b)
	for range b.N {
		outcomes := crossRuns(b, pairs)
		var worst, sum, worstPlain, sumPlain, served, beaten float64
		for _, o := range outcomes {
			worst, sum = max(worst, o.planned.Ratio()), sum+o.planned.Ratio()
			worstPlain, sumPlain = max(worstPlain, o.plain.Ratio()), sumPlain+o.plain.Ratio()
			if o.servedByPlan() {
				served++
			}
			if o.beatsPyTorchWithoutPlan() {
				beaten++
			}
		}
		n := float64(len(outcomes))
		// The counts first, then the misses: without -v a benchmark's log
		// is cut after ten lines.
		b.Logf("%.0f of %.0f runs served by the other run's plan, %.0f beat PyTorch with no plan", served, n, beaten)
		for _, o := range outcomes {
			if !o.servedByPlan() || !o.beatsPyTorchWithoutPlan() {
				b.Logf("miss: %v (goal 1 %v, goal 3 %v)", o, o.servedByPlan(), o.beatsPyTorchWithoutPlan())
			}
		}
		b.ReportMetric(served/n, "share-served-by-plan")
		b.ReportMetric(beaten/n, "share-beating-pytorch")
		b.ReportMetric(worst, "worst-ratio")
		b.ReportMetric(sum/n, "mean-ratio")
		b.ReportMetric(worstPlain, "no-plan-worst-ratio")
		b.ReportMetric(sumPlain/n, "no-plan-mean-ratio")
	}
}

// BenchmarkGeneratedPairsKnowingThePeak bounds what foresight can gain:
// each run of the pairs BenchmarkGeneratedPairs replays runs under the
// other run's plan as it is, and again under that plan told the run's own
// peak in advance (the granules the run needed under it, which no plan can
// know). It reports the share served (goal 1) each way.
func BenchmarkGeneratedPairsKnowingThePeak(b *testing.B) {
	pairs := benchmarkPairs(b)
	for range b.N {
		var (
			served, servedKnowing, n float64
			lines                    []string
		)
		for _, o := range crossRuns(b, pairs) {
			vp, ok := o.plan.Virtual()
			require.True(b, ok)
			k, ok := o.planned.Report.Dynamic[0].Kind.(memory.VirtualKind)
			require.True(b, ok)
			vp.PlannedBytes = k.NeededPeakBytes
			knowing := o
			knowing.planned = runUnder(b, o.on, memory.VirtualLayout(vp))
			lines = append(lines, fmt.Sprintf("%s: as planned %.4f× (%d), knowing its peak %.4f× (%d)", o.on.Name,
				o.planned.Ratio(), o.planned.DriverAllocs, knowing.planned.Ratio(), knowing.planned.DriverAllocs))
			n++
			if o.servedByPlan() {
				served++
			}
			if knowing.servedByPlan() {
				servedKnowing++
			}
		}
		b.Logf("%.0f of %.0f runs served by the other run's plan, %.0f knowing their peak", served, n, servedKnowing)
		for _, l := range lines {
			b.Log(l)
		}
		b.ReportMetric(served/n, "share-served-by-plan")
		b.ReportMetric(servedKnowing/n, "share-served-knowing-the-peak")
	}
}

// The pair benchmarks' seeds: a range, one seed, or 1-9 unset; anything
// else is refused with what was given rather than run on other seeds.
func TestPairSeedRangesRead(t *testing.T) {
	for in, want := range map[string][2]int{"": {1, 9}, "10-20": {10, 20}, "31": {31, 31}, "7-7": {7, 7}} {
		first, last, err := parseSeedRange(in)
		require.NoError(t, err, in)
		require.Equal(t, want, [2]int{first, last}, in)
	}
	for _, in := range []string{"0-9", "20-10", "x", "1-", "-3", "1-2-3", " 1-2"} {
		_, _, err := parseSeedRange(in)
		require.ErrorContains(t, err, fmt.Sprintf("%q is not a range of seeds", in), in)
	}
}

// The shape that failed t5_train: a capped plan pool refused 94.9 MB with
// 232 MB free in it, fragmented. A plan smaller than the run never fails
// it: the planned pool grows past its cap and counts it, and a reservation
// larger than every planned page still finds a pool.
func TestAPlanSmallerThanTheRunNeverFailsIt(t *testing.T) {
	dry := tracetest.Inline(t, "a 1 120000000 0\nf 1\na 2 120000000 0\nf 2\n")
	run := tracetest.Inline(t, "a 1 10000000 0\na 2 20000000 0\nf 1\na 3 94900000 0\na 4 500000000 0\nf 2\nf 3\nf 4\n")
	for _, measured := range []memory.Layout{memory.SubSlicesLayout(), memory.VirtualLayout(memory.VirtualPlan{})} {
		for _, strength := range []Strength{Basic, Strong} {
			d, err := replay.Run(dry, measured, replay.Options{})
			require.NoError(t, err)
			l, err := Derive(d.Report, Options{Strength: strength, Trace: dry})
			require.NoError(t, err)
			r, err := replay.Run(run, l, replay.Options{})
			require.NoError(t, err, "%s plan measured under %s: %s", strength, measured.Kind(), l)
			require.Positive(t, r.Spills, "%s plan measured under %s: the run outgrew its plan, and it shows", strength, measured.Kind())
		}
	}
}

// On a device without sparse residency a basic plan refused a run larger
// than its dry run: a buffer past the device's largest page (256 MiB here)
// was too big for every pool, and one that a way-out page four times its
// size would hold was refused by the device. The SubSlices preset ran
// both. Now such a buffer takes a device allocation of its own size.
func TestABasicPlanServesBuffersPastItsPagesOnAPlainDevice(t *testing.T) {
	dry := tracetest.Inline(t, "a 1 30000000 0\na 2 30000000 0\nf 1\nf 2\n")
	for _, c := range []struct {
		name string
		run  string
		mem  uint64
	}{
		{"past the largest page", "a 1 30000000 0\na 2 300000000 0\nf 1\nf 2\n", 1 << 30},
		{"a way-out page the device cannot give", "a 1 30000000 0\na 2 130000000 0\nf 1\nf 2\n", 300 << 20},
	} {
		t.Run(c.name, func(t *testing.T) {
			device := vkruntime.DeviceProperties{Alignment: 256, MaxPageSize: 256 << 20, MemorySize: c.mem}
			ro := replay.Options{Device: device, NoSparse: true}
			d, err := replay.Run(dry, memory.SubSlicesLayout(), ro)
			require.NoError(t, err)
			l, err := Derive(d.Report, Options{Strength: Basic, Trace: dry, Device: device})
			require.NoError(t, err)
			require.Equal(t, memory.LayoutSliced, l.Kind())
			run := tracetest.Inline(t, c.run)
			_, err = replay.Run(run, memory.SubSlicesLayout(), ro)
			require.NoError(t, err, "the device holds the run")
			r, err := replay.Run(run, l, ro)
			require.NoError(t, err, "%s", l)
			require.Positive(t, r.Spills)
		})
	}
}

// A dry run needs no device memory, so the run it measures may be larger
// than the device: transformer_training_1_run1, dry-run on the H200-like
// device and planned for a device of 681 MB without sparse residency, has a
// buffer of 1.70 GB, and its arena a page of that size. The layout was
// refused, failing the second run, which the device held with no plan
// (generated pairs of seeds 1–9 on devices of 1.05, 1.2 and 1.5 times the
// run's peak: 8 such refusals in 509 runs). Now the page's slots go to the
// fallback pools.
func TestAStrongPlanFromALargerDryRunServesASmallerRunOnAPlainDevice(t *testing.T) {
	first, second := gen.Run(1, gen.TransformerTraining, 1), gen.Run(1, gen.TransformerTraining, 2)
	plain, err := replay.Run(second, memory.SubSlicesLayout(), replay.Options{NoSparse: true})
	require.NoError(t, err)
	device := replay.H200()
	device.MemorySize = plain.PeakLiveBytes * 6 / 5
	ro := replay.Options{Device: device, NoSparse: true}
	_, err = replay.Run(second, memory.SubSlicesLayout(), ro)
	require.NoError(t, err, "the device holds the second run with no plan")

	d, err := replay.Run(first, memory.SubSlicesLayout(), replay.Options{NoSparse: true})
	require.NoError(t, err, "the dry run, on the H200-like device")
	require.Greater(t, d.PeakLiveBytes, device.MemorySize, "the first run is larger than the device")
	l, err := Derive(d.Report, Options{Strength: Strong, Trace: first, Device: device})
	require.NoError(t, err)
	a, ok := l.Arena()
	require.True(t, ok, "a strong plan on a device without sparse residency is an arena")
	require.Greater(t, slices.Max(a.Pages), device.MemorySize, "a page the device cannot hold")
	r, err := replay.Run(second, l, ro)
	require.NoError(t, err, "a plan never fails a run the device has memory for")
	require.Positive(t, r.Spills, "the run missed the plan, and it shows")
}

// A basic plan keeps the pool its dry run measured exclusive exclusive: a
// 96 MB buffer of another run took a slice of a 480 MB page made for the
// dry run's largest buffer, and the 480 MB buffer after it found 384 MB
// free there and the device without memory for another page, where the
// SubSlices preset gave each its own allocation.
func TestABasicPlanKeepsAnExclusivePoolExclusive(t *testing.T) {
	device := vkruntime.DeviceProperties{Alignment: 256, MaxPageSize: 256 << 20, MemorySize: 700_000_000}
	ro := replay.Options{Device: device, NoSparse: true}
	dry := tracetest.Inline(t, "a 1 480000000 0\nf 1\na 2 1000000 0\nf 2\n")
	d, err := replay.Run(dry, memory.SubSlicesLayout(), ro)
	require.NoError(t, err)
	l, err := Derive(d.Report, Options{Strength: Basic, Trace: dry, Device: device})
	require.NoError(t, err)
	pools, ok := l.Sliced()
	require.True(t, ok)
	require.True(t, pools[len(pools)-1].Exclusive, "%s", l)
	run := tracetest.Inline(t, "a 1 96000000 0\na 2 480000000 0\nf 1\nf 2\n")
	_, err = replay.Run(run, memory.SubSlicesLayout(), ro)
	require.NoError(t, err, "the device holds the run")
	r, err := replay.Run(run, l, ro)
	require.NoError(t, err, "%s", l)
	require.Equal(t, uint64(576_000_000), r.ReservedPeakBytes, "each buffer in an allocation of its own size")
	require.Equal(t, uint64(1), r.Spills, "two exclusive pages where the plan had one")
}

// A basic plan made from the report of a run under a basic plan, with no
// stream, is the same plan: the unused exclusive pool the manager ends a
// plan in is no pool of the plan (each round of planning again gained a
// capped page of the largest size).
func TestPlanningFromAPlansReportIsAFixedPoint(t *testing.T) {
	tr := tracetest.Inline(t, "a 1 3000000 0\na 2 300000 0\nf 1\nf 2\n")
	device := vkruntime.DeviceProperties{Alignment: 256, MaxPageSize: 256 << 20, MemorySize: 1 << 30}
	ro := replay.Options{Device: device, NoSparse: true}
	d, err := replay.Run(tr, memory.SubSlicesLayout(), ro)
	require.NoError(t, err)
	l, err := Derive(d.Report, Options{Strength: Basic, Device: device})
	require.NoError(t, err)
	for round := range 3 {
		r, err := replay.Run(tr, l, ro)
		require.NoError(t, err)
		next, err := Derive(r.Report, Options{Strength: Basic, Device: device})
		require.NoError(t, err)
		require.True(t, next.Equal(l), "round %d: %s became %s", round, l, next)
	}
}

// A strong virtual plan profiles its stream's need as the pool counts it:
// marks in reservation order, growing, the last the planned peak.
func TestAVirtualPlanProfilesItsStream(t *testing.T) {
	for _, shape := range gen.Shapes() {
		tr := gen.Trace(1, shape)
		vp, ok := planFrom(t, tr).Virtual()
		require.True(t, ok)
		require.NotEmpty(t, vp.Profile, tr.Name)
		for k := 1; k < len(vp.Profile); k++ {
			require.Greater(t, vp.Profile[k].Ordinal, vp.Profile[k-1].Ordinal, tr.Name)
			require.Greater(t, vp.Profile[k].Bytes, vp.Profile[k-1].Bytes, tr.Name)
		}
		last := vp.Profile[len(vp.Profile)-1]
		require.Equal(t, vp.PlannedBytes, last.Bytes, "%s: the profile ends at the planned peak", tr.Name)
		require.Less(t, last.Ordinal, uint64(tr.Allocations), tr.Name)
		require.LessOrEqual(t, len(vp.Profile), profileMarks+1, tr.Name)
	}
}

// A strong virtual plan marks its stream's settled start: the first
// reservations, freed only after the stream's last (if at all), and what
// they needed; a stream whose first reservation is freed sooner has none.
func TestAVirtualPlanMarksItsSettledStart(t *testing.T) {
	const weights = "a 0 1048576 0\na 1 2097152 0\na 2 1048576 0\n"
	tr, err := trace.Read("settled", strings.NewReader(weights+"a 3 4194304 0\na 4 65536 0\nf 4\nf 3\na 5 8388608 0\nf 5\n"))
	require.NoError(t, err)
	vp, ok := planFrom(t, tr).Virtual()
	require.True(t, ok)
	require.Equal(t, memory.VirtualMark{Ordinal: 2, Bytes: 4 << 20}, vp.Settled, "three reservations of weights, 4 MiB")
	require.Equal(t, uint64(12<<20), vp.PlannedBytes)

	// Weights freed after the last reservation, as a process frees
	// everything at its end, are settled too.
	tr, err = trace.Read("freed at the end", strings.NewReader(weights+"a 3 4194304 0\nf 3\na 4 65536 0\nf 4\nf 0\nf 2\nf 1\n"))
	require.NoError(t, err)
	vp, _ = planFrom(t, tr).Virtual()
	require.Equal(t, memory.VirtualMark{Ordinal: 2, Bytes: 4 << 20}, vp.Settled)

	tr, err = trace.Read("unsettled", strings.NewReader("a 0 1048576 0\nf 0\n"+strings.ReplaceAll(weights, "a ", "a 1")))
	require.NoError(t, err)
	vp, _ = planFrom(t, tr).Virtual()
	require.Zero(t, vp.Settled)

	for _, shape := range gen.Shapes() {
		tr := gen.Trace(1, shape)
		vp, _ := planFrom(t, tr).Virtual()
		require.NotZero(t, vp.Settled.Bytes, tr.Name)
		require.LessOrEqual(t, vp.Settled.Bytes, vp.PlannedBytes, tr.Name)
	}
}
