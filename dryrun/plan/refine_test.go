package plan

import (
	"math/rand/v2"
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/vkrt/vkrt/dryrun/trace"
	"github.com/vkrt/vkrt/internal/gen"
	"github.com/vkrt/vkrt/internal/tracetest"
	"github.com/vkrt/vkrt/memory"
)

// layerChain is an encoder forward pass the way PyTorch allocates it: per
// layer the q, k and v projections, three attention buffers, the attention
// output, two feed-forward buffers four times as large, two more, and the
// layer's output, which lives on through the next layer. At the
// feed-forward step the input, the attention output and both feed-forward
// buffers are live with the pass's persistent input: only a layout that
// alternates where each layer puts them stays at the peak.
func layerChain(layers int, unit uint64) *trace.Trace {
	g := &streamBuilder{t: &trace.Trace{Name: "layer_chain"}}
	persistent := g.alloc(unit)
	in := g.alloc(unit)
	for range layers {
		q, k, v := g.alloc(unit), g.alloc(unit), g.alloc(unit)
		scores := g.alloc(unit)
		g.free(q, k, v)
		probs, ctx := g.alloc(unit), g.alloc(unit)
		attn := g.alloc(unit)
		g.free(scores, probs, ctx)
		fc1 := g.alloc(4 * unit)
		act := g.alloc(4 * unit)
		g.free(fc1)
		fc2, norm := g.alloc(unit), g.alloc(unit)
		out := g.alloc(unit)
		g.free(in, attn, act, fc2, norm)
		in = out
	}
	g.free(in, persistent)
	return g.t
}

// streamBuilder writes a stream allocation by allocation.
type streamBuilder struct{ t *trace.Trace }

func (g *streamBuilder) alloc(bytes uint64) int32 {
	id := int32(g.t.Allocations)
	g.t.Events = append(g.t.Events, trace.Event{Op: trace.OpAlloc, Index: id, Size: bytes})
	g.t.Allocations++
	return id
}

func (g *streamBuilder) free(ids ...int32) {
	for _, id := range ids {
		g.t.Events = append(g.t.Events, trace.Event{Op: trace.OpFree, Index: id})
	}
}

func TestSearchClosesTheGapGreedyPlacementsLeave(t *testing.T) {
	const unit = 1 << 20
	lifetimes := lifetimesOf(layerChain(12, unit), 16)
	peak := peakOverlap(lifetimes)
	require.Equal(t, uint64(11*unit), peak, "the feed-forward step holds eleven units")

	greedy, _, err := planArena(lifetimes, 1<<40, 0, nil)
	require.NoError(t, err)
	require.Greater(t, greedy.Reserved(), peak, "no greedy order alternates the layers")

	searched, s, err := planArena(lifetimes, 1<<40, DefaultSearchSteps, nil)
	require.NoError(t, err)
	checkAssignment(t, lifetimes, searched)
	require.Equal(t, peak, searched.Reserved())
	require.True(t, s.Search, "%s", s)
	require.Contains(t, s.String(), "lowered by search")

	// Through Plan: SearchSteps < 0 turns the search off.
	tr := layerChain(12, unit)
	on, err := Measure(tr, memory.SubSlicesLayout(), Options{Strength: Strong})
	require.NoError(t, err)
	off, err := Measure(tr, memory.SubSlicesLayout(), Options{Strength: Strong, SearchSteps: -1})
	require.NoError(t, err)
	require.Zero(t, on.Planned.Spills)
	require.Equal(t, peak, on.Planned.ReservedPeakBytes)
	require.Greater(t, off.Planned.ReservedPeakBytes, on.Planned.ReservedPeakBytes)
}

func TestRefinedAssignmentsStaySoundAndNeverRise(t *testing.T) {
	rng := rand.New(rand.NewPCG(3, 4))
	rounds := 150
	if tracetest.Quick() {
		rounds = 15
	}
	lowered := 0
	for range rounds {
		n := 2 + rng.IntN(300)
		limit := uint64(16 << rng.IntN(14))
		lifetimes := randomLifetimes(rng, n, uint64(16<<rng.IntN(12)))
		for _, s := range planStrategies {
			a := assign(lifetimes, limit, s, nil)
			refined, left := refineAssignment(lifetimes, a, 1<<12, nil)
			require.GreaterOrEqual(t, left, -64, "the search keeps to its steps, give or take one node")
			checkAssignment(t, lifetimes, refined)
			require.Len(t, refined.Pages, len(a.Pages))
			for p := range a.Pages {
				require.LessOrEqual(t, refined.Pages[p], a.Pages[p], "page %d rose", p)
			}
			if refined.Reserved() < a.Reserved() {
				lowered++
			}
		}
	}
	require.Positive(t, lowered, "the search lowers some greedy placements")
}

func TestWindowSolverPlacesAroundFixedAllocations(t *testing.T) {
	// Allocation 0 crosses the window's start and stays at [100, 200);
	// allocations 1 and 2 live inside it at the same time.
	lifetimes := []lifetime{{Size: 100, Start: 0, End: 3}, {Size: 100, Start: 1, End: 3}, {Size: 100, Start: 2, End: 3}}
	placements := []placement{{Offset: 100}, {}, {}}
	w := window{1, 3}
	s := newWindowSolver(lifetimes, placements, w, []int32{1, 2}, []int32{0}, 300)
	_, offsets := s.solve(100)
	require.ElementsMatch(t, []uint64{0, 200}, offsets)

	s = newWindowSolver(lifetimes, placements, w, []int32{1, 2}, []int32{0}, 299)
	spent, offsets := s.solve(100)
	require.Nil(t, offsets, "three hundred bytes are live at once")
	require.Equal(t, 1, spent)

	// Room enough in bytes, but split by the fixed range: below it only
	// 100 bytes, and 150 + 110 do not fit above it under 360.
	lifetimes[1].Size, lifetimes[2].Size = 150, 110
	s = newWindowSolver(lifetimes, placements, w, []int32{1, 2}, []int32{0}, 360)
	spent, offsets = s.solve(1000)
	require.Nil(t, offsets)
	require.Less(t, spent, 1000, "the search ends before its steps")
	s = newWindowSolver(lifetimes, placements, w, []int32{1, 2}, []int32{0}, 460)
	_, offsets = s.solve(1000)
	require.Equal(t, []uint64{200, 350}, offsets, "both above the fixed range, the larger lower")
}

func TestPlanArenaSearchIsDeterministic(t *testing.T) {
	for _, shape := range gen.Shapes() {
		lifetimes := lifetimesOf(gen.Trace(11, shape), 16)
		a, sa, err := planArena(lifetimes, 4<<30-16, searchSteps()/4, nil)
		require.NoError(t, err)
		b, sb, err := planArena(lifetimes, 4<<30-16, searchSteps()/4, nil)
		require.NoError(t, err)
		require.Equal(t, sa, sb)
		require.Equal(t, a, b, "%s", shape)
	}
}

func TestPageSoundFindsOverlapsOfLiveAllocations(t *testing.T) {
	lifetimes := []lifetime{{Size: 100, Start: 0, End: 2}, {Size: 100, Start: 1, End: 3}, {Size: 100, Start: 2, End: 3}}
	r := &refiner{lifetimes: lifetimes}
	ids := []int32{0, 1, 2}
	sound := []placement{{Offset: 0}, {Offset: 100}, {Offset: 0}}
	require.True(t, r.pageSound(ids, sound), "2 reuses 0's bytes after 0 is freed")
	for _, bad := range [][]placement{
		{{Offset: 0}, {Offset: 50}, {Offset: 200}},   // 1 overlaps 0 from above
		{{Offset: 100}, {Offset: 50}, {Offset: 200}}, // 1 overlaps 0 from below
		{{Offset: 0}, {Offset: 0}, {Offset: 200}},    // same offset
		{{Offset: 0}, {Offset: 100}, {Offset: 150}},  // 2 overlaps 1
	} {
		require.False(t, r.pageSound(ids, bad), "%v", bad)
	}
}
