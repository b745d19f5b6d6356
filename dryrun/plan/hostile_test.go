package plan

import (
	"fmt"
	"math/rand/v2"
	"runtime"
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/vkrt/vkrt/dryrun/replay"
	"github.com/vkrt/vkrt/dryrun/trace"
	"github.com/vkrt/vkrt/internal/tracetest"
	"github.com/vkrt/vkrt/memory"
)

// A window of one moved allocation that thousands of fixed ones outlive,
// each starting in a section of its own: listing each section's fixed
// ranges took n²/2 of them (200 MB here, 3.4 GB and 19 s to plan a stream
// of 40,000 events of this shape).
func TestWindowSolverFixedRangesGrowLinearly(t *testing.T) {
	const n = 5000
	lifetimes := []lifetime{{Size: 1000, Start: 0, End: n + 1}}
	placements := []placement{{}}
	fixed := make([]int32, 0, n)
	for k := int32(1); k <= n; k++ {
		lifetimes = append(lifetimes, lifetime{Size: 16, Start: k, End: n + 2})
		placements = append(placements, placement{Offset: 1000 + 16*uint64(k-1)})
		fixed = append(fixed, k)
	}
	var before, after runtime.MemStats
	runtime.ReadMemStats(&before)
	s := newWindowSolver(lifetimes, placements, window{0, n + 1}, []int32{0}, fixed, 1000+16*n)
	_, offsets := s.solve(1 << 12)
	runtime.ReadMemStats(&after)
	require.Equal(t, []uint64{0}, offsets)
	require.Less(t, after.TotalAlloc-before.TotalAlloc, uint64(16<<20), "bytes allocated for %d fixed ranges", n)
}

// A window whose moved allocations each lift over thousands of small fixed
// ranges packed below them: the lifts cost steps, so a small budget runs
// out before the search finds the layout a large one does. Lifts were free
// (each walked the ranges one by one): 100,000 events of this shape took
// 10 s to plan.
func TestWindowSolverPaysForLongLifts(t *testing.T) {
	const fixedN, movedN = 20000, 8
	var lifetimes []lifetime
	var placements []placement
	var fixed, moved []int32
	for k := range fixedN {
		lifetimes = append(lifetimes, lifetime{Size: 16, Start: 0, End: 2})
		placements = append(placements, placement{Offset: 16 * uint64(k)})
		fixed = append(fixed, int32(k))
	}
	var want []uint64
	for k := range movedN {
		lifetimes = append(lifetimes, lifetime{Size: 1 << 20, Start: 1, End: 3})
		placements = append(placements, placement{})
		moved = append(moved, int32(fixedN+k))
		want = append(want, 16*fixedN+uint64(k)<<20)
	}
	solver := func() *windowSolver {
		return newWindowSolver(lifetimes, placements, window{1, 3}, moved, fixed, 16*fixedN+movedN<<20)
	}
	spent, offsets := solver().solve(64)
	require.Nil(t, offsets, "found in 64 steps, lifting over %d ranges %d times", fixedN, movedN)
	require.Equal(t, 64, spent)
	spent, offsets = solver().solve(1 << 12)
	require.ElementsMatch(t, want, offsets)
	require.GreaterOrEqual(t, spent, movedN*(fixedN-freeJumps)/jumpsPerStep)
}

// freesBetweenLarge makes n/2 small allocations, then frees them one by
// one with a large allocation after every hundredth free, each living until
// the next: windows around the large ones have thousands of the small ones
// packed under them, crossing their start.
func freesBetweenLarge(n int) *trace.Trace {
	g := &streamBuilder{t: &trace.Trace{Name: fmt.Sprintf("frees_between_large_%d", n)}}
	k := n * 100 / 202
	var small, large []int32
	for range k {
		small = append(small, g.alloc(4096))
	}
	for i, id := range small {
		g.free(id)
		if i%100 == 99 {
			large = append(large, g.alloc(uint64(k)*4096/50))
			if len(large) > 1 {
				g.free(large[0])
				large = large[1:]
			}
		}
	}
	g.free(large...)
	return g.t
}

// smallUnderLarge makes small allocations that live to the end of the
// stream, one in a hundred allocations being a large one that lives for the
// next fifty large ones: the windows around the large ones have the small
// ones made meanwhile packed under them, crossing their end.
func smallUnderLarge(n int) *trace.Trace {
	g := &streamBuilder{t: &trace.Trace{Name: fmt.Sprintf("small_under_large_%d", n)}}
	rng := rand.New(rand.NewPCG(1, 2))
	var small, large []int32
	for len(g.t.Events) < n/2 {
		if rng.IntN(100) == 0 {
			large = append(large, g.alloc(1<<26))
			if len(large) > 50 {
				g.free(large[0])
				large = large[1:]
			}
		} else {
			small = append(small, g.alloc(uint64(16*(1+rng.IntN(64)))))
		}
	}
	g.free(large...)
	g.free(small...)
	return g.t
}

// sectionRanges and the edge families answer what lists of each
// section's ranges and of each allocation's ranges answered.
func TestWindowRangesMatchLists(t *testing.T) {
	rng := rand.New(rand.NewPCG(3, 4))
	for round := range 200 {
		sections := 1 + rng.IntN(30)
		// Disjoint ranges, each crossing the window's start or its end.
		var edges, fromStart, toEnd []sectionRange
		at := uint64(rng.IntN(50))
		for range rng.IntN(40) {
			size := 1 + uint64(rng.IntN(60))
			e := sectionRange{r: byteRange{at, at + size}}
			if rng.IntN(2) == 0 {
				e.lo, e.hi = 0, int32(1+rng.IntN(sections))
				fromStart = append(fromStart, e)
			} else {
				e.lo, e.hi = int32(rng.IntN(sections)), int32(sections)
				toEnd = append(toEnd, e)
			}
			edges = append(edges, e)
			at += size + uint64(rng.IntN(3)*rng.IntN(40))
		}
		rng.Shuffle(len(edges), func(i, j int) { edges[i], edges[j] = edges[j], edges[i] })
		limit := at/2 + uint64(rng.IntN(int(at)+1))
		sr := newSectionRanges(edges, sections, limit)
		fs := newEdgeFamily(fromStart, func(e sectionRange) int32 { return e.hi })
		te := newEdgeFamily(toEnd, func(e sectionRange) int32 { return -e.lo })
		for sec := range int32(sections) {
			for _, x := range []uint64{0, limit, uint64(rng.IntN(int(at) + 10)), uint64(rng.IntN(int(at) + 10))} {
				var want uint64
				for _, e := range edges {
					if e.lo <= sec && sec < e.hi && e.r.lo < x {
						want += min(e.r.hi, x) - e.r.lo
					}
				}
				require.Equal(t, want, sr.below(sec, x), "round %d section %d below %d", round, sec, x)
			}
			require.Equal(t, sr.below(sec, limit), sr.atLimit[sec])
		}
		for range 20 {
			lo := int32(rng.IntN(sections))
			hi := lo + 1 + int32(rng.IntN(sections-int(lo)))
			var met []byteRange
			for _, e := range edges {
				if e.lo < hi && e.hi > lo {
					met = append(met, e.r)
				}
			}
			met = mergeRanges(met)
			from, size := uint64(rng.IntN(int(at)+10)), 1+uint64(rng.IntN(80))
			want, _ := liftOver(met, from, size)
			got := from
			for {
				next, _ := fs.liftOver(got, size, lo)
				next, _ = te.liftOver(next, size, -hi)
				if next == got {
					break
				}
				got = next
			}
			require.Equal(t, want, got, "round %d: %d bytes from %d over sections [%d, %d)", round, size, from, lo, hi)
		}
	}
}

// edgeFan fragments a page so that the sweeps put one large allocation
// above the peak, then starts n/4 allocations that outlive it: the window
// around it has one allocation to move and n/4 fixed ones crossing its end.
func edgeFan(n int) *trace.Trace {
	g := &streamBuilder{t: &trace.Trace{Name: fmt.Sprintf("edge_fan_%d", n)}}
	var small, late []int32
	for range n / 4 {
		small = append(small, g.alloc(1024))
	}
	for i := 0; i < len(small); i += 2 {
		g.free(small[i])
	}
	big := g.alloc(uint64(n/4) * 1024)
	for i := 1; i < len(small); i += 2 {
		g.free(small[i])
	}
	for range n / 4 {
		late = append(late, g.alloc(512))
	}
	g.free(big)
	g.alloc(16)
	g.free(late...)
	return g.t
}

// manyWindows keeps n/4 small allocations live throughout while n/12
// times a 2 MiB allocation misses the hole two 1 MiB ones left: every
// window of the search has thousands of fixed allocations across it.
func manyWindows(n int) *trace.Trace {
	g := &streamBuilder{t: &trace.Trace{Name: fmt.Sprintf("many_windows_%d", n)}}
	var long []int32
	for range n / 4 {
		long = append(long, g.alloc(16))
	}
	for range n / 12 {
		x, y := g.alloc(1<<20), g.alloc(1<<20)
		g.free(x)
		z := g.alloc(2 << 20)
		g.free(y, z)
	}
	g.free(long...)
	return g.t
}

// BenchmarkPlanHostile plans streams shaped against the window search at
// growing lengths; s/plan should grow no faster than the events.
func BenchmarkPlanHostile(b *testing.B) {
	for _, shape := range []struct {
		name string
		make func(int) *trace.Trace
	}{{"edge_fan", edgeFan}, {"many_windows", manyWindows}, {"frees_between_large", freesBetweenLarge}, {"small_under_large", smallUnderLarge}} {
		for _, n := range []int{10_000, 20_000, 40_000, 100_000} {
			tr := shape.make(n)
			b.Run(fmt.Sprintf("%s/%d", shape.name, n), func(b *testing.B) {
				for b.Loop() {
					if _, err := Derive(memory.Report{}, Options{Strength: Strong, Trace: tr}); err != nil {
						b.Fatal(err)
					}
				}
				b.ReportMetric(b.Elapsed().Seconds()/float64(b.N), "s/plan")
			})
		}
	}
}

// Sizes whose sum passes 2^62 B would wrap in the planner's sums: Derive
// refuses them as ErrCannotPlan, naming the line, rather than giving a
// wrong plan or a confusing error.
func TestSizesPastWhatAPlanCanHoldAreRefused(t *testing.T) {
	for text, line := range map[string]string{
		"a 1 18446744073709551615 0\nf 1\n":                                "line 1",
		"a 1 100 0\na 2 4611686018427387904 0\n":                           "line 2",
		"a 1 3458764513820540928 0\na 2 3458764513820540928 0\nf 1\nf 2\n": "line 2",
	} {
		tr := tracetest.Inline(t, text)
		_, err := Derive(memory.Report{}, Options{Strength: Strong, Trace: tr})
		require.ErrorIs(t, err, ErrCannotPlan, "%q", text)
		require.ErrorContains(t, err, line, "%q", text)
	}
	// The same bytes one after the other are within the bound.
	tr := tracetest.Inline(t, "a 1 3458764513820540928 0\nf 1\na 2 3458764513820540928 0\nf 2\n")
	_, err := Derive(memory.Report{}, Options{Strength: Strong, Trace: tr})
	require.NotErrorIs(t, err, ErrCannotPlan)
}

// A nil trace handed to Runs, first or later, or to Measure is refused with
// trace.ErrNil: each panicked on the nil dereference.
func TestRunsAndMeasureRefuseANilTrace(t *testing.T) {
	tr := tracetest.Inline(t, "a 1 100 0\na 2 200 0\nf 1\nf 2\n")
	for want, streams := range map[string][]*trace.Trace{
		"stream 1 of 1": {nil}, "stream 1 of 2": {nil, tr}, "stream 3 of 3": {tr, tr, nil},
	} {
		require.NotPanics(t, func() {
			_, err := Runs(streams, Options{})
			require.ErrorIs(t, err, trace.ErrNil, want)
			require.ErrorIs(t, err, ErrCannotPlan, want)
			require.ErrorContains(t, err, want)
		}, want)
	}
	require.NotPanics(t, func() {
		m, err := Measure(nil, memory.SubSlicesLayout(), Options{})
		require.ErrorIs(t, err, trace.ErrNil)
		require.Nil(t, m)
	})
}

// A first stream with no allocation gives no plan, basic or strong: a
// basic one was the Virtual layout with no plan in it, written as the
// stream's plan. A later one needs nothing, and changes nothing.
func TestRunsRefusesAFirstStreamOfNoAllocations(t *testing.T) {
	empty := &trace.Trace{Name: "empty"}
	tr := tracetest.Inline(t, "a 1 100 0\na 2 200 0\nf 1\nf 2\n")
	for _, s := range []Strength{Basic, Strong} {
		_, err := Runs([]*trace.Trace{empty, tr}, Options{Strength: s})
		require.ErrorIs(t, err, ErrCannotPlan, s)
		require.EqualError(t, err, "plan: cannot plan: empty has no allocations", s)
		alone, err := Runs([]*trace.Trace{tr}, Options{Strength: s})
		require.NoError(t, err)
		with, err := Runs([]*trace.Trace{tr, empty}, Options{Strength: s})
		require.NoError(t, err)
		require.True(t, alone.Layout.Equal(with.Layout), s)
	}
}

// Derive and Measure refuse a stream with no allocation as Runs does,
// under every layout and strength: a basic plan of one measured under the
// Virtual layout was that layout with no plan in it.
func TestDeriveAndMeasureRefuseAStreamOfNoAllocations(t *testing.T) {
	empty := &trace.Trace{Name: "empty"}
	for _, l := range []memory.Layout{memory.VirtualLayout(memory.VirtualPlan{}), memory.SubSlicesLayout()} {
		for _, s := range []Strength{Basic, Strong} {
			what := fmt.Sprintf("%s %s", l.Kind(), s)
			_, err := Measure(empty, l, Options{Strength: s})
			require.ErrorIs(t, err, ErrCannotPlan, what)
			require.ErrorContains(t, err, "empty has no allocations", what)
			dry, err := replay.Run(empty, l, replay.Options{})
			require.NoError(t, err, what)
			_, err = Derive(dry.Report, Options{Strength: s, Trace: empty})
			require.ErrorIs(t, err, ErrCannotPlan, what)
			require.EqualError(t, err, "plan: cannot plan: empty has no allocations", what)
		}
	}
	// The report of such a run alone, measured under the Virtual layout.
	dry, err := replay.Run(empty, memory.VirtualLayout(memory.VirtualPlan{}), replay.Options{})
	require.NoError(t, err)
	for _, s := range []Strength{Basic, Strong} {
		_, err = Derive(dry.Report, Options{Strength: s})
		require.ErrorIs(t, err, ErrCannotPlan, s)
		require.ErrorContains(t, err, "never needed a byte", s)
	}
}
