package memory

import (
	"math/rand/v2"
	"testing"

	"github.com/stretchr/testify/require"
)

// liveSlots answers as a scan of every live place does: whether a slot is
// free, and its nearest live neighbours, through random plans (many slots
// sharing offsets, as a plan's steps reuse them) and random churn;
// reproducible from the seed.
func TestLiveSlotsAgreeWithAScanOfEveryLivePlace(t *testing.T) {
	for seed := range uint64(20) {
		rng := rand.New(rand.NewPCG(seed, 7))
		n := 1 + rng.IntN(5000)
		spread := 1 + rng.IntN(20000) // distinct offsets in 16 B units: past 4096 the summary takes several words
		slots := make([]VirtualSlot, n)
		for k := range slots {
			slots[k] = VirtualSlot{Offset: 16 * uint64(rng.IntN(spread)), Size: 16 * uint64(1+rng.IntN(64))}
		}
		l := newLiveSlots(newSlotIndex(slots))
		live := map[int]bool{} // slot -> live
		overlaps := func(k int) bool {
			for j := range live {
				a, b := slots[j], slots[k]
				if a.Offset < b.Offset+b.Size && b.Offset < a.Offset+a.Size {
					return true
				}
			}
			return false
		}
		for step := range 4 * n {
			k := rng.IntN(n)
			if live[k] {
				l.remove(k)
				delete(live, k)
				continue
			}
			want := !overlaps(k)
			require.Equal(t, want, l.free(k), "seed %d step %d: slot %d %+v free", seed, step, k, slots[k])
			if !want {
				continue
			}
			l.add(k, slots[k].Size)
			live[k] = true
			below, above := uint64(0), ^uint64(0)
			for j := range live {
				if s := slots[j]; s.Offset < slots[k].Offset {
					below = max(below, s.Offset+s.Size)
				} else if s.Offset > slots[k].Offset {
					above = min(above, s.Offset)
				}
			}
			gotBelow, gotAbove := liveNeighbours(&l, k)
			require.Equal(t, below, gotBelow, "seed %d step %d: below slot %d", seed, step, k)
			require.Equal(t, above, gotAbove, "seed %d step %d: above slot %d", seed, step, k)
			require.Equal(t, len(live), l.n)
		}
		var got, want [][2]uint64
		l.each(func(off, end uint64) { got = append(got, [2]uint64{off, end}) })
		for k := range live {
			want = append(want, [2]uint64{slots[k].Offset, slots[k].Offset + slots[k].Size})
		}
		require.ElementsMatch(t, want, got, "seed %d: every live place, once", seed)
		for i := 1; i < len(got); i++ {
			require.Less(t, got[i-1][0], got[i][0], "seed %d: lowest first", seed)
		}
	}
}

// The nearest live place is found however far away it starts: past
// empty words and empty summary words, both ways.
func TestLiveSlotsFindNeighboursFarAway(t *testing.T) {
	const n = 3 * 64 * 64 // three summary words
	slots := make([]VirtualSlot, n+1)
	for k := range n {
		slots[k] = VirtualSlot{Offset: 16 * uint64(k), Size: 16}
	}
	slots[n] = VirtualSlot{Offset: 16 * 7000, Size: 16 * 3000} // spans slots 7000..9999
	l := newLiveSlots(newSlotIndex(slots))
	l.add(5, 16)
	l.add(n-3, 16)
	below, above := liveNeighbours(&l, 5)
	require.Equal(t, uint64(0), below)
	require.Equal(t, 16*uint64(n-3), above, "from slot 5 across two empty summary words")
	below, above = liveNeighbours(&l, n-3)
	require.Equal(t, 16*uint64(6), below, "from the last slot back to slot 5")
	require.Equal(t, ^uint64(0), above)
	require.True(t, l.free(n), "nothing live in 7000..9999")
	l.add(9999, 16)
	require.False(t, l.free(n), "slot 9999 lies under the wide slot's end")
	l.remove(9999)
	l.add(6999, 16)
	require.True(t, l.free(n), "slot 6999 ends where the wide slot starts")
}

// liveNeighbours are where the live places nearest slot k end below it and
// start above it, 0 and ^0 where there is none, found by the searches
// free and each make.
func liveNeighbours(l *liveSlots, k int) (below, above uint64) {
	i := int(l.x.at[k])
	below, above = 0, ^uint64(0)
	if p := l.last(i); p >= 0 {
		below = l.ends[p]
	}
	if q := l.first(i + 1); q >= 0 {
		above = l.x.starts[q]
	}
	return below, above
}

// The slot index places each slot among the distinct offsets as a scan
// does: where its offset stands, and how many offsets lie below its end;
// random plans, many slots sharing offsets, near the range's start and far
// past it; reproducible from the seed.
func TestSlotIndexAgreesWithAScan(t *testing.T) {
	for seed := range uint64(20) {
		rng := rand.New(rand.NewPCG(seed, 11))
		n := 1 + rng.IntN(3000)
		spread := 1 + rng.IntN(5000)
		// Odd seeds place the slots past 2^45, as an arena's later pages
		// may lie: too far to pack an offset over a slot's index.
		base := uint64(0)
		if seed%2 == 1 {
			base = 1 << 45
		}
		slots := make([]VirtualSlot, n)
		for k := range slots {
			slots[k] = VirtualSlot{Offset: base + 16*uint64(rng.IntN(spread)), Size: 16 * uint64(1+rng.IntN(1<<uint(rng.IntN(14))))}
		}
		x := newSlotIndex(slots)
		distinct := map[uint64]bool{}
		for _, s := range slots {
			distinct[s.Offset] = true
		}
		require.Len(t, x.starts, len(distinct), "seed %d: one start per distinct offset", seed)
		for i := 1; i < len(x.starts); i++ {
			require.Less(t, x.starts[i-1], x.starts[i], "seed %d: starts ascend", seed)
		}
		for k, s := range slots {
			var at, below int32
			for _, o := range x.starts {
				if o < s.Offset {
					at++
				}
				if o < s.Offset+s.Size {
					below++
				}
			}
			require.Equal(t, at, x.at[k], "seed %d: where slot %d %+v starts", seed, k, s)
			require.Equal(t, below, x.below[k], "seed %d: offsets below slot %d %+v's end", seed, k, s)
		}
	}
}

// BenchmarkSlotIndex indexes a plan of llama_generate's size (143,238
// slots) whose places reuse offsets, as a plan's steps do: what every
// install of such a plan pays before the run starts.
func BenchmarkSlotIndex(b *testing.B) {
	rng := rand.New(rand.NewPCG(1, 2))
	slots := make([]VirtualSlot, 143_238)
	for k := range slots {
		slots[k] = VirtualSlot{Offset: 256 * uint64(rng.IntN(40_000)), Size: 256 * uint64(1+rng.IntN(64))}
	}
	b.ReportAllocs()
	for b.Loop() {
		newSlotIndex(slots)
	}
	b.ReportMetric(float64(b.Elapsed().Nanoseconds())/float64(b.N)/float64(len(slots)), "ns/slot")
}
