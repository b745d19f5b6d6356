package plan

import (
	"fmt"
	"strings"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/vkrt/vkrt/dryrun/replay"
	"github.com/vkrt/vkrt/dryrun/trace"
	"github.com/vkrt/vkrt/internal/gen"
	"github.com/vkrt/vkrt/internal/tracetest"
	"github.com/vkrt/vkrt/memory"
	vkruntime "github.com/vkrt/vkrt/runtime"
)

// searchSteps is the search the tests give strong plans whose search is
// not what they check: the default, or a sixteenth of it under the race
// detector, which slows the search about tenfold.
func searchSteps() int {
	if tracetest.RaceEnabled {
		return DefaultSearchSteps / 16
	}
	return DefaultSearchSteps
}

// plannedRatioBound is what a strong plan must reach on any stream: within
// 3 % of the peak live bytes.
const plannedRatioBound = 1.03

func TestStrongPlanBeatsPyTorchOnShippedTraces(t *testing.T) {
	for _, path := range tracetest.Shipped(t) {
		_, ok := tracetest.PyTorch[trace.NameOf(path)]
		require.True(t, ok, "no PyTorch figures for %s", path)
	}
	for _, path := range tracetest.Planned(t) {
		tr, err := trace.ReadFile(path)
		require.NoError(t, err)
		peer := tracetest.PyTorch[tr.Name]
		pr, err := Measure(tr, memory.SubSlicesLayout(), Options{Strength: Strong, SearchSteps: searchSteps()})
		require.NoError(t, err)
		p := pr.Planned
		t.Logf("%s: default %.3f× (%d allocs), planned %.4f× (%d allocs, %d spills), PyTorch %.3f×/%.3f× (%d/%d)",
			tr.Name, pr.DryRun.Ratio(), pr.DryRun.DriverAllocs, p.Ratio(), p.DriverAllocs, p.Spills,
			peer.DefaultRatio, peer.ExpandableRatio, peer.DefaultAllocs, peer.ExpandableAllocs)
		require.Equal(t, memory.LayoutArena, p.Layout.Kind())
		require.Zero(t, p.Spills)
		require.LessOrEqual(t, p.Ratio(), min(plannedRatioBound, peer.ExpandableRatio), "%s reserved/peak", tr.Name)
		require.LessOrEqual(t, p.DriverAllocs, min(peer.DefaultAllocs, peer.ExpandableAllocs), "%s driver allocations", tr.Name)
		require.Equal(t, pr.DryRun.PeakLiveBytes, p.PeakLiveBytes)
	}
}

// generatedStreams are the streams the planner is judged on besides the
// shipped ones: every shape, several seeds.
func generatedStreams() []*trace.Trace {
	var out []*trace.Trace
	seeds := uint64(6)
	if tracetest.Quick() {
		seeds = 2
	}
	for _, shape := range gen.Shapes() {
		for seed := range seeds {
			out = append(out, gen.Trace(100+seed, shape))
		}
	}
	return out
}

func TestStrongPlanOnGeneratedStreams(t *testing.T) {
	for _, tr := range generatedStreams() {
		t.Run(tr.Name, func(t *testing.T) {
			pr, err := Measure(tr, memory.SubSlicesLayout(), Options{Strength: Strong})
			require.NoError(t, err)
			basic, err := Measure(tr, memory.SubSlicesLayout(), Options{Strength: Basic})
			require.NoError(t, err)
			t.Logf("default %.3f× (%d), basic %.3f× (%d), strong %.4f× (%d)", pr.DryRun.Ratio(), pr.DryRun.DriverAllocs,
				basic.Planned.Ratio(), basic.Planned.DriverAllocs, pr.Planned.Ratio(), pr.Planned.DriverAllocs)
			require.Zero(t, pr.Planned.Spills)
			require.Zero(t, basic.Planned.Spills, "the basic plan fits the stream it was measured on")
			require.LessOrEqual(t, pr.Planned.ReservedPeakBytes, basic.Planned.ReservedPeakBytes, "strong never reserves more than basic")
			require.LessOrEqual(t, pr.Planned.Ratio(), plannedRatioBound)
			require.LessOrEqual(t, pr.Planned.DriverAllocs, pr.DryRun.DriverAllocs)
		})
	}
}

func TestBasicPlanFitsItsOwnStream(t *testing.T) {
	var traces []*trace.Trace
	for _, path := range tracetest.Planned(t) {
		tr, err := trace.ReadFile(path)
		require.NoError(t, err)
		traces = append(traces, tr)
	}
	for _, tr := range append(traces, generatedStreams()...) {
		for _, measured := range []memory.Layout{memory.SubSlicesLayout(), memory.ExclusivePagesLayout()} {
			pr, err := Measure(tr, measured, Options{Strength: Basic})
			require.NoError(t, err, "%s measured under %s", tr.Name, measured.Kind())
			require.Zero(t, pr.Planned.Spills, tr.Name)
			pools, ok := pr.Planned.Layout.Sliced()
			require.True(t, ok)
			requireForecast(t, pools, tr.Name)
		}
	}
}

// A basic plan measured under the Virtual layout fits its own stream too:
// here 14 reservations whose 153,223,168 B of granules with no plan were
// one granule short under a plan of that (a pool growing towards a plan
// binds other granules, and one reservation landed elsewhere), as were
// some shipped and generated streams.
func TestBasicVirtualPlanFitsItsOwnStream(t *testing.T) {
	short, err := trace.Read("one-granule-short", strings.NewReader("a 0 1000717 0\na 2 15124640 0\na 7 2447651 0\n"+
		"a 8 627937 0\na 27 6850211 0\na 29 15661590 0\nf 27\na 42 13691117 0\na 49 87277812 0\nf 49\n"+
		"a 62 5537187 0\na 64 424684 0\na 66 890817 0\na 70 97725589 0\n"))
	require.NoError(t, err)
	traces := []*trace.Trace{short}
	for _, path := range tracetest.Planned(t) {
		tr, err := trace.ReadFile(path)
		require.NoError(t, err)
		traces = append(traces, tr)
	}
	for _, tr := range append(traces, generatedStreams()...) {
		pr, err := Measure(tr, memory.VirtualLayout(memory.VirtualPlan{}), Options{Strength: Basic})
		require.NoError(t, err, tr.Name)
		planned, ok := pr.Planned.Layout.Virtual()
		require.True(t, ok, tr.Name)
		require.Empty(t, planned.Slots, "%s: a basic plan places nothing", tr.Name)
		assert.Zero(t, pr.Planned.Spills, "%s: under a plan of %d B", tr.Name, planned.PlannedBytes)
	}
}

func TestBasicPlanFromAReportAlone(t *testing.T) {
	// Measured under capped-but-roomy pools, which route by max_slice alone,
	// the report's caps fit the same stream with no trace needed.
	roomy, slice := uint64(growableCap), uint64(1<<20)
	measured := memory.SlicedLayout(
		memory.SlicedPool{PageSize: 8 << 20, Pages: &roomy, MaxSlice: &slice},
		memory.SlicedPool{PageSize: 1 << 30, Pages: &roomy})
	tr := tracetest.Read(t, "resnet50_train")
	dry, err := replay.Run(tr, measured, replay.Options{})
	require.NoError(t, err)
	plan, err := Derive(dry.Report, Options{})
	require.NoError(t, err)
	pools, _ := plan.Sliced()
	require.Len(t, pools, len(dry.Report.Dynamic))
	requireForecast(t, pools, tr.Name)
	for i, pr := range dry.Report.Dynamic {
		require.Equal(t, pr.PagesPeak, *pools[i].Pages, "pool %d capped at its peak", i)
	}
	run, err := replay.Run(tr, plan, replay.Options{})
	require.NoError(t, err)
	require.Zero(t, run.Spills)
	require.Equal(t, dry.ReservedPeakBytes, run.ReservedPeakBytes, "same routing, same pages")
}

func TestStrongPlanFallsBackToALeanerBasicPlan(t *testing.T) {
	tr := gen.Trace(7, gen.TransformerTraining)
	_, err := planBasic(memory.Report{}, Options{})
	require.Error(t, err, "an empty report has nothing to cap")
	dry, err := replay.Run(tr, memory.SubSlicesLayout(), replay.Options{})
	require.NoError(t, err)
	basic, err := Derive(dry.Report, Options{Strength: Basic, Trace: tr})
	require.NoError(t, err)

	// An arena that never reuses a byte, on a page of 100 GB.
	wasteful := memory.ArenaPlan{Pages: []uint64{100_000_000_000}}
	var end uint64
	for _, l := range lifetimesOf(tr, replay.H200().Alignment) {
		wasteful.Slots = append(wasteful.Slots, memory.ArenaSlot{Size: l.Size, Offset: end})
		end += l.Size
	}
	require.Less(t, end, wasteful.Pages[0])
	chosen, err := leaner(tr, memory.ArenaLayout(wasteful), basic, vkruntime.DeviceProperties{})
	require.NoError(t, err)
	require.True(t, chosen.Equal(basic), "the basic plan wins when the arena would reserve more")

	strong, err := Derive(dry.Report, Options{Strength: Strong, Trace: tr, SearchSteps: searchSteps()})
	require.NoError(t, err)
	chosen, err = leaner(tr, strong, basic, vkruntime.DeviceProperties{})
	require.NoError(t, err)
	require.True(t, chosen.Equal(strong))
}

func TestPlanRefusesWhatItCannotPlan(t *testing.T) {
	tr := tracetest.Inline(t, "a 1 100 0\na 2 300 0\nf 1\n")
	_, err := Derive(memory.Report{}, Options{Strength: Strong})
	require.ErrorIs(t, err, ErrCannotPlan, "a strong plan needs the stream")
	_, err = Derive(memory.Report{}, Options{Strength: Strength(9), Trace: tr})
	require.ErrorIs(t, err, ErrCannotPlan)
	require.ErrorContains(t, err, "unknown strength 9")
	_, err = Derive(memory.Report{}, Options{Strength: Strong, Trace: &trace.Trace{Name: "empty"}})
	require.ErrorIs(t, err, ErrCannotPlan)

	direct, err := replay.Run(tr, memory.DirectLayout(), replay.Options{})
	require.NoError(t, err)
	_, err = Derive(direct.Report, Options{Strength: Basic})
	require.ErrorIs(t, err, ErrCannotPlan)
	require.ErrorContains(t, err, `"Direct"`)
	strong, err := Derive(direct.Report, Options{Strength: Strong, Trace: tr, SearchSteps: searchSteps()})
	require.NoError(t, err, "a strong plan does not need pools it can cap")
	require.Equal(t, memory.LayoutArena, strong.Kind())
}

func TestStrongPlanInstallsAndExplainsItself(t *testing.T) {
	tr := tracetest.Read(t, "resnet50_train")
	plan, err := Derive(memory.Report{}, Options{Strength: Strong, Trace: tr, SearchSteps: searchSteps()})
	require.NoError(t, err)
	arena, ok := plan.Arena()
	require.True(t, ok)
	require.Len(t, arena.Slots, tr.Allocations)
	var pageBytes uint64
	for _, p := range arena.Pages {
		require.LessOrEqual(t, p, replay.H200().MaxPageSize, "pages bind as one buffer")
		pageBytes += p
	}
	back, err := memory.ParseLayout(plan.String())
	require.NoError(t, err)
	require.True(t, back.Equal(plan), "the plan survives its JSON form")

	run, err := replay.Run(tr, back, replay.Options{})
	require.NoError(t, err)
	kind, ok := run.Report.Dynamic[0].Kind.(memory.ArenaKind)
	require.True(t, ok, "the arena reports first")
	require.Equal(t, memory.ArenaKind{PageBytes: pageBytes, Slots: uint64(tr.Allocations)}, kind)
	require.Equal(t, uint64(len(arena.Pages)), run.Report.Dynamic[0].PagesPeak)
	require.Equal(t, pageBytes, run.ReservedPeakBytes)

	// A real run that diverges leaves the plan: with no page held, the
	// fallback pools take it, even a reservation its slot would fit, and
	// count spills.
	diverged := tracetest.Inline(t, fmt.Sprintf("a 1 %d 0\na 2 %d 0\n", arena.Slots[0].Size+16, arena.Slots[1].Size))
	run, err = replay.Run(diverged, plan, replay.Options{})
	require.NoError(t, err)
	require.Equal(t, uint64(2), run.Spills, "the first reservation's size differs from its slot; the second follows it")
	require.Equal(t, memory.LayoutArena, run.Layout.Kind())
	require.Zero(t, run.Report.Dynamic[0].Usage.NumberAllocs)
}

// requireForecast checks a basic plan's pools: each capped, its cap a
// forecast it grows past. What is larger than every planned page goes to
// the exclusive pool the manager ends a plan with.
func requireForecast(t *testing.T, pools []memory.SlicedPool, name string) {
	t.Helper()
	for i, p := range pools {
		require.NotNil(t, p.Pages, "%s: pool %d is capped", name, i)
		require.True(t, p.Grow, "%s: pool %d's cap is a forecast", name, i)
	}
}

func TestBasicPlanWithoutTheStreamFitsOrSaysItCannot(t *testing.T) {
	for _, path := range tracetest.Planned(t) {
		tr, err := trace.ReadFile(path)
		require.NoError(t, err)
		for _, measured := range []memory.Layout{memory.SubSlicesLayout(), memory.ExclusivePagesLayout()} {
			dry, err := replay.Run(tr, measured, replay.Options{})
			require.NoError(t, err)
			layout, err := Derive(dry.Report, Options{Strength: Basic})
			if err != nil {
				require.ErrorIs(t, err, ErrCannotPlan, "%s under %s", tr.Name, measured.Kind())
				require.ErrorContains(t, err, "give the stream")
				continue
			}
			run, err := replay.Run(tr, layout, replay.Options{})
			require.NoError(t, err)
			require.Zero(t, run.Spills, "%s under %s: a basic plan made without the stream fits it", tr.Name, measured.Kind())
		}
	}
}

func TestPlansArePerStream(t *testing.T) {
	tr := tracetest.Inline(t, "a 1 100 0\na 2 100 1\nf 1\nf 2\n")
	dry, err := replay.Run(tr, memory.SubSlicesLayout(), replay.Options{})
	require.NoError(t, err)
	for _, s := range []Strength{Basic, Strong} {
		_, err := Derive(dry.Report, Options{Strength: s, Trace: tr})
		require.ErrorIs(t, err, ErrCannotPlan)
		require.ErrorContains(t, err, "streams 0 and 1")
	}
}

// boundSeeds is how many generated streams of each shape the bound is held
// over: 200, or 20 under -short or the race detector.
func boundSeeds() uint64 {
	if tracetest.Quick() {
		return 20
	}
	return 200
}

// strongRatioAtMost bounds a strong plan's reserved peak over the stream's
// peak live bytes from above, cheaply where it can: the greedy placements
// alone bound it, since the search only ever lowers a placement and Derive
// only swaps in a basic plan that reserves less. A stream the greedy
// placements leave above the bound is planned in full and replayed.
func strongRatioAtMost(t *testing.T, tr *trace.Trace) float64 {
	t.Helper()
	device := replay.H200()
	a, _, err := planArena(lifetimesOf(tr, device.Alignment), device.MaxPageSize, 0, nil)
	require.NoError(t, err)
	if greedy := float64(a.Reserved()) / float64(tr.PeakLiveBytes()); greedy <= plannedRatioBound {
		return greedy
	}
	m, err := Measure(tr, memory.SubSlicesLayout(), Options{Strength: Strong})
	require.NoError(t, err)
	require.Zero(t, m.Planned.Spills, tr.Name)
	return m.Planned.Ratio()
}

func TestGreedyPlacementsBoundTheStrongPlan(t *testing.T) {
	for _, shape := range gen.Shapes() {
		for seed := range uint64(2) {
			tr := gen.Trace(seed, shape)
			device := replay.H200()
			a, _, err := planArena(lifetimesOf(tr, device.Alignment), device.MaxPageSize, 0, nil)
			require.NoError(t, err)
			m, err := Measure(tr, memory.SubSlicesLayout(), Options{Strength: Strong, SearchSteps: searchSteps()})
			require.NoError(t, err)
			require.LessOrEqual(t, m.Planned.ReservedPeakBytes, a.Reserved(), "%s: the full plan reserves no more than the greedy placements", tr.Name)
		}
	}
}

func TestStrongPlanStaysWithinTheBoundOnGeneratedStreams(t *testing.T) {
	seeds := boundSeeds()
	for _, shape := range gen.Shapes() {
		worst, worstSeed := 0.0, uint64(0)
		for seed := range seeds {
			tr := gen.Trace(seed, shape)
			ratio := strongRatioAtMost(t, tr)
			require.LessOrEqual(t, ratio, plannedRatioBound, "%s", tr.Name)
			if ratio > worst {
				worst, worstSeed = ratio, seed
			}
		}
		t.Logf("%s: at most %.4f× (seed %d) over %d seeds", shape, worst, worstSeed, seeds)
	}
}

// A buffer larger than every page a basic plan planned takes a way-out page
// at most four times its size: one way-out pool of the device's largest
// page gave a 24 MB buffer a 4 GiB page.
func TestABasicPlanOutgrownTakesPagesNearTheSize(t *testing.T) {
	small := tracetest.Inline(t, "a 1 1000000 0\na 2 1000000 0\nf 1\nf 2\n")
	dry, err := replay.Run(small, memory.SubSlicesLayout(), replay.Options{})
	require.NoError(t, err)
	layout, err := Derive(dry.Report, Options{Strength: Basic, Trace: small})
	require.NoError(t, err)
	pools, ok := layout.Sliced()
	require.True(t, ok)
	requireForecast(t, pools, "small")
	big := tracetest.Inline(t, "a 1 1000000 0\na 2 24000000 0\nf 1\nf 2\n")
	run, err := replay.Run(big, layout, replay.Options{})
	require.NoError(t, err)
	require.LessOrEqual(t, run.ReservedPeakBytes, uint64(4*24000000+4<<20), "a page near the buffer's size, not the device's largest")
	t.Logf("reserved peak %d B, spills %d", run.ReservedPeakBytes, run.Spills)
	require.Positive(t, run.Spills, "the way out counts")
}

// On a device whose memory the basic plan's pages would pass, Derive keeps
// the strong plan rather than failing: two 17 MB buffers fit a 40 MiB
// device placed exactly, not in two 32 MiB pages.
func TestAStrongPlanStandsWhereTheBasicOneDoesNotFit(t *testing.T) {
	tr := tracetest.Inline(t, "a 1 17000000 0\na 2 17000000 0\nf 1\nf 2\n")
	// Measured on a larger device under pages of 32 MiB: two of them.
	dry, err := replay.Run(tr, memory.SlicedLayout(memory.SlicedPool{PageSize: 32 << 20}), replay.Options{})
	require.NoError(t, err)
	small := replay.H200()
	small.MemorySize = 40 << 20
	layout, err := Derive(dry.Report, Options{Strength: Strong, Trace: tr, Device: small})
	require.NoError(t, err)
	run, err := replay.Run(tr, layout, replay.Options{Device: small})
	require.NoError(t, err)
	require.LessOrEqual(t, run.ReservedPeakBytes, uint64(40<<20))
}

// A stream built by hand that Read could not have made is ErrMalformed at
// Derive, as at replay.Run: an index past its allocations or a negative
// count panicked, and a reservation made twice gave a basic plan.
// A stream of more allocations than a strong plan has slots is refused
// before it is planned: it ran the whole search, minutes for 2^24 of them,
// and only then did the pools refuse the plan's slots. A basic plan of it
// stands.
func TestAStrongPlanOfMoreAllocationsThanSlotsIsRefusedFirst(t *testing.T) {
	defer func(n int) { maxStrongAllocations = n }(maxStrongAllocations)
	maxStrongAllocations = 2
	tr := tracetest.Inline(t, "a 1 1000 0\na 2 1000 0\nf 1\na 3 500 0\nf 2\nf 3\n")
	for _, l := range []memory.Layout{memory.VirtualLayout(memory.VirtualPlan{}), memory.SubSlicesLayout()} {
		dry, err := replay.Run(tr, l, replay.Options{NoSparse: l.Kind() != memory.VirtualLayout(memory.VirtualPlan{}).Kind()})
		require.NoError(t, err)
		_, err = Derive(dry.Report, Options{Strength: Strong, Trace: tr})
		require.ErrorIs(t, err, ErrCannotPlan)
		require.ErrorContains(t, err, "3 allocations, more than the 2 slots")
		_, err = Derive(dry.Report, Options{Strength: Basic, Trace: tr})
		require.NoError(t, err)
	}
}

func TestDeriveRefusesAMalformedStream(t *testing.T) {
	dry, err := replay.Run(tracetest.Inline(t, "a 1 1000 0\nf 1\n"), memory.VirtualLayout(memory.VirtualPlan{}), replay.Options{})
	require.NoError(t, err)
	for _, tr := range []*trace.Trace{
		{Name: "past", Allocations: 1, Events: []trace.Event{{Op: trace.OpAlloc, Index: 0, Size: 10}, {Op: trace.OpFree, Index: 5}}},
		{Name: "negative", Allocations: -1, Events: []trace.Event{{Op: trace.OpAlloc, Index: 0, Size: 10}}},
		{Name: "twice", Allocations: 2, Events: []trace.Event{{Op: trace.OpAlloc, Index: 0, Size: 10}, {Op: trace.OpAlloc, Index: 0, Size: 10}}},
	} {
		for _, s := range []Strength{Basic, Strong} {
			_, err := Derive(dry.Report, Options{Strength: s, Trace: tr})
			require.ErrorIs(t, err, trace.ErrMalformed, "%s, strength %d", tr.Name, s)
		}
	}
}

// Of a strong plan and the basic one, the one that fails to replay its own
// run loses, whichever it is: a basic plan that the device could not hold
// made planning fail where the arena plan replayed.
func TestTheLeanerPlanIsOneThatReplays(t *testing.T) {
	tr := tracetest.Inline(t, "a 1 3000000 0\na 2 3000000 0\nf 1\nf 2\n")
	one := uint64(1)
	replays, fails := memory.SubSlicesLayout(), memory.SlicedLayout(memory.SlicedPool{PageSize: 4 << 20, Pages: &one})
	for _, c := range []struct{ candidate, fallback, want memory.Layout }{
		{replays, fails, replays},
		{fails, replays, replays},
	} {
		got, err := leaner(tr, c.candidate, c.fallback, replay.H200())
		require.NoError(t, err)
		require.True(t, got.Equal(c.want), "%s", got)
	}
	_, err := leaner(tr, fails, fails, replay.H200())
	require.ErrorIs(t, err, vkruntime.ErrPoolCapacityExceeded)
}

// An unknown Strength is refused before anything is replayed: Measure
// and Runs replayed the dry run (seconds on a long stream) and only then
// had Derive refuse it, or failed on the replay and never told it.
func TestAnUnknownStrengthIsRefusedBeforeReplaying(t *testing.T) {
	tr := tracetest.Inline(t, "a 1 1000 0\nf 1\n")
	// A device too small for the stream: a replay fails if one starts.
	small := vkruntime.DeviceProperties{Alignment: 16, MaxPageSize: 1 << 20, MemorySize: 100}
	_, err := Measure(tr, memory.SubSlicesLayout(), Options{Strength: 7, Device: small})
	require.ErrorIs(t, err, ErrCannotPlan)
	require.ErrorContains(t, err, "unknown strength 7")
	_, err = Runs([]*trace.Trace{tr}, Options{Strength: -1, Device: small})
	require.ErrorIs(t, err, ErrCannotPlan)
	require.ErrorContains(t, err, "unknown strength -1")
	_, err = Derive(memory.Report{}, Options{Strength: 2})
	require.ErrorIs(t, err, ErrCannotPlan)
	require.ErrorContains(t, err, "unknown strength 2")
}

// A report built by hand with a pool of no kind is refused as
// ErrCannotPlan: the basic plan panicked naming it.
func TestABasicPlanOfAPoolOfNoKindIsRefused(t *testing.T) {
	report := memory.Report{Dynamic: []memory.PoolReport{{Kind: memory.SlicedKind{PageSize: 2 << 20, MaxSliceSize: 1 << 20}, PagesPeak: 1}, {PagesPeak: 1}}}
	require.NotPanics(t, func() {
		_, err := Derive(report, Options{Strength: Basic})
		require.ErrorIs(t, err, ErrCannotPlan)
		require.ErrorContains(t, err, "dynamic pool 1 of the report has no kind")
	})
}

// A basic plan from a report alone is checked against the device, as a
// replay checks the plan of a stream: a report built by hand whose
// largest allocation wraps past 2^64 once aligned made a plan of pages of
// 0 B, and one of pages of 2^64 - 1 B a plan no run installs.
func TestABasicPlanFromAReportAloneIsCheckedAgainstTheDevice(t *testing.T) {
	const most = 1<<64 - 1
	for name, pr := range map[string]memory.PoolReport{
		"an exclusive pool's largest wrapping": {Kind: memory.ExclusiveKind{}, LargestAlloc: most, PagesPeak: 1},
		"a sliced pool's pages past 2^64":      {Kind: memory.SlicedKind{PageSize: most, MaxSliceSize: most}, LargestAlloc: 5, PagesPeak: 2},
	} {
		_, err := Derive(memory.Report{Dynamic: []memory.PoolReport{pr}}, Options{Strength: Basic})
		require.ErrorIs(t, err, ErrCannotPlan, name)
		require.ErrorContains(t, err, "make no plan for the device", name)
	}
	sound := memory.PoolReport{Kind: memory.SlicedKind{PageSize: 2 << 20, MaxSliceSize: 1 << 20}, LargestAlloc: 5, PagesPeak: 2}
	_, err := Derive(memory.Report{Dynamic: []memory.PoolReport{sound}}, Options{Strength: Basic})
	require.NoError(t, err)
}
