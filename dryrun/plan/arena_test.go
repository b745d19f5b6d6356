package plan

import (
	"cmp"
	"fmt"
	"math/rand/v2"
	"slices"
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/vkrt/vkrt/dryrun/trace"
	"github.com/vkrt/vkrt/internal/tracetest"
)

// checkAssignment fails unless every placement lies inside its page and no
// two allocations live at the same time share a byte. It sweeps the
// allocations in time order keeping each page's live ranges sorted, so a
// collision shows up as an overlap with a neighbour.
func checkAssignment(t testing.TB, lifetimes []lifetime, a assignment) {
	t.Helper()
	require.Len(t, a.Placements, len(lifetimes))
	type live struct {
		offset, end uint64
		id          int
	}
	pages := make([][]live, len(a.Pages))
	endingAt := make([][]int, len(lifetimes)+1)
	for k, l := range lifetimes {
		endingAt[l.End] = append(endingAt[l.End], k)
	}
	find := func(page []live, offset uint64) (int, bool) {
		return slices.BinarySearchFunc(page, offset, func(l live, o uint64) int { return cmp.Compare(l.offset, o) })
	}
	for k, l := range lifetimes {
		for _, gone := range endingAt[k] {
			pl := a.Placements[gone]
			i, found := find(pages[pl.Page], pl.Offset)
			require.True(t, found)
			pages[pl.Page] = slices.Delete(pages[pl.Page], i, i+1)
		}
		pl := a.Placements[k]
		require.Less(t, int(pl.Page), len(a.Pages), "allocation %d on a page that does not exist", k)
		require.LessOrEqual(t, pl.Offset+l.Size, a.Pages[pl.Page], "allocation %d passes the end of page %d", k, pl.Page)
		page := pages[pl.Page]
		i, _ := find(page, pl.Offset)
		if i > 0 {
			require.LessOrEqual(t, page[i-1].end, pl.Offset, "allocation %d overlaps live allocation %d", k, page[i-1].id)
		}
		if i < len(page) {
			require.GreaterOrEqual(t, page[i].offset, pl.Offset+l.Size, "allocation %d overlaps live allocation %d", k, page[i].id)
		}
		pages[pl.Page] = slices.Insert(page, i, live{pl.Offset, pl.Offset + l.Size, k})
	}
}

func randomLifetimes(rng *rand.Rand, n int, maxSize uint64) []lifetime {
	out := make([]lifetime, n)
	for k := range out {
		span := 1 + rng.IntN(20)
		if rng.IntN(10) == 0 {
			span = 1 + rng.IntN(n)
		}
		out[k] = lifetime{Size: 16 * (1 + rng.Uint64N(maxSize/16)), Start: int32(k), End: int32(min(n, k+span))}
	}
	return out
}

func TestAssignArenaRandomStreamsAreSound(t *testing.T) {
	rng := rand.New(rand.NewPCG(1, 2))
	rounds := 200
	if tracetest.Quick() {
		rounds = 40
	}
	for round := range rounds {
		n := 1 + rng.IntN(300)
		maxSize := uint64(16 << rng.IntN(12))
		limit := uint64(16 << rng.IntN(14))
		lifetimes := randomLifetimes(rng, n, maxSize)
		for _, order := range planStrategies {
			a, err := assignArena(lifetimes, limit, order)
			require.NoError(t, err)
			t.Run(fmt.Sprint(round, order), func(t *testing.T) { checkAssignment(t, lifetimes, a) })
			require.GreaterOrEqual(t, a.Reserved(), peakOverlap(lifetimes))
			// A page past the limit was opened by an allocation larger
			// than the limit, and is no larger than the largest it holds.
			largest := make([]uint64, len(a.Pages))
			for k, pl := range a.Placements {
				largest[pl.Page] = max(largest[pl.Page], lifetimes[k].Size)
			}
			for p, size := range a.Pages {
				if size > limit {
					require.Greater(t, largest[p], limit, "page %d of %d B holds nothing past the limit of %d B", p, size, limit)
					require.LessOrEqual(t, size, largest[p], "page %d grew past the allocation that opened it", p)
				}
			}
		}
	}
}

func TestAssignArenaReusesMemoryOfDisjointLifetimes(t *testing.T) {
	// Three allocations of 100 B, one after another: one slot's worth of page.
	seq := []lifetime{{Size: 100, Start: 0, End: 1}, {Size: 100, Start: 1, End: 2}, {Size: 100, Start: 2, End: 3}}
	a, err := assignArena(seq, 1<<20, strategy{Order: bySize})
	require.NoError(t, err)
	require.Equal(t, []uint64{100}, a.Pages)
	// Overlapping ones stack; a page limit of 250 B forces a second page.
	stacked := []lifetime{{Size: 100, Start: 0, End: 3}, {Size: 100, Start: 1, End: 3}, {Size: 100, Start: 2, End: 3}}
	a, err = assignArena(stacked, 250, strategy{Order: bySize})
	require.NoError(t, err)
	require.Equal(t, []uint64{200, 100}, a.Pages)
	checkAssignment(t, stacked, a)
	// An allocation past the limit gets a page of its own size.
	a, err = assignArena([]lifetime{{Size: 1000, Start: 0, End: 1}}, 250, strategy{Order: bySize})
	require.NoError(t, err)
	require.Equal(t, []uint64{1000}, a.Pages)
}

func TestAssignArenaRejectsBadLifetimes(t *testing.T) {
	_, err := assignArena([]lifetime{{Size: 0, Start: 0, End: 1}}, 1<<20, strategy{Order: bySize})
	require.ErrorContains(t, err, "lifetime 0")
	_, err = assignArena([]lifetime{{Size: 16, Start: 0, End: 2}}, 1<<20, strategy{Order: bySize})
	require.Error(t, err)
	_, err = assignArena([]lifetime{{Size: 16, Start: 0, End: 1}}, 0, strategy{Order: bySize})
	require.Error(t, err)
}

func TestAssignArenaShippedTraces(t *testing.T) {
	for _, path := range tracetest.Planned(t) {
		tr, err := trace.ReadFile(path)
		require.NoError(t, err)
		lifetimes := lifetimesOf(tr, 16)
		a, s, err := planArena(lifetimes, 4<<30-16, searchSteps(), nil)
		require.NoError(t, err)
		checkAssignment(t, lifetimes, a)
		t.Logf("%s %s: pages %d ratio %.4f", tr.Name, s, len(a.Pages), float64(a.Reserved())/float64(tr.PeakLiveBytes()))
	}
}

func TestAssignByStartMatchesTheGeneralBuilder(t *testing.T) {
	rng := rand.New(rand.NewPCG(5, 5))
	check := func(lifetimes []lifetime, limit uint64) {
		for _, bestFit := range []bool{false, true} {
			b := newArenaBuilder(lifetimes, limit)
			for _, id := range allIDs(len(lifetimes)) {
				b.place(id, bestFit)
			}
			require.Equal(t, b.out, assignByStart(lifetimes, limit, bestFit, nil))
		}
	}
	for range 300 {
		check(randomLifetimes(rng, 1+rng.IntN(300), uint64(16<<rng.IntN(12))), uint64(16<<rng.IntN(14)))
	}
	check(lifetimesOf(tracetest.Read(t, "gpt2_train"), 16), 4<<30-16)
}
