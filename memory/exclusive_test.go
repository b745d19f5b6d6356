package memory

import (
	"math/rand/v2"
	"testing"

	"github.com/stretchr/testify/require"
)

// A random stream against the exclusive pool's rule: a request takes the
// smallest free page that holds it, the lowest index among equals, and
// opens a page of its own size only when no free page fits, first
// returning the free pages smaller than it when they hold half as many bytes;
// sweeps return pages idle for a period.
func TestExclusivePoolTakesTheSmallestFreePageThatFits(t *testing.T) {
	rng := rand.New(rand.NewPCG(3, 4))
	storage := newFakeStorage()
	p := newExclusivePool(poolConfig{shape: shapeExclusive, maxAlloc: 1 << 20}, storage, &Usage{})
	sizes := []uint64{256, 512, 1024, 4096, 4096 + 256, 65536}
	free := map[int32]uint64{} // the model's free pages
	var live []int32
	for step := range 5000 {
		if len(live) > 0 && rng.IntN(2) == 0 {
			k := rng.IntN(len(live))
			ref := live[k]
			live[k] = live[len(live)-1]
			live = live[:len(live)-1]
			p.free(ref, p.pages[ref].size)
			free[ref] = p.pages[ref].size
		} else {
			size := sizes[rng.IntN(len(sizes))]
			want := int32(none)
			for ref, s := range free {
				if s >= size && (want == none || s < free[want] || s == free[want] && ref < want) {
					want = ref
				}
			}
			if want == none {
				var smaller uint64
				for _, s := range free {
					if s < size {
						smaller += s
					}
				}
				if 2*smaller >= size {
					for ref, s := range free {
						if s < size {
							delete(free, ref)
						}
					}
				}
			}
			ref, err := p.reserve(size, size, false)
			require.NoError(t, err)
			if want != none {
				require.Equal(t, want, ref, "step %d: reserve %d B", step, size)
				delete(free, ref)
			} else {
				require.NotContains(t, free, ref, "step %d: a new page", step)
				require.Equal(t, size, p.pages[ref].size)
			}
			live = append(live, ref)
			for ref := range free {
				if !p.pages[ref].held {
					delete(free, ref) // swept
				}
			}
		}
		require.NoError(t, p.checkInvariants(), "step %d", step)
	}
	require.Less(t, len(p.pages), 200, "pages are reused")
	p.cleanup(true)
	require.Len(t, storage.live, len(live), "explicit cleanup returns every free page")
	for _, ref := range live {
		p.free(ref, p.pages[ref].size)
	}
	p.cleanup(true)
	require.Empty(t, storage.live)
	require.Empty(t, p.groups)
	require.Empty(t, p.groupOf)
	require.NoError(t, p.checkInvariants())
}

// A page is never split: a small reservation gets a page of its own
// rather than most of a large free one, which then holds a large one
// after it; where the device refuses the new page, the free page serves.
func TestExclusivePoolLeavesALargeFreePageToALargeReservation(t *testing.T) {
	storage := newFakeStorage()
	p := newExclusivePool(poolConfig{shape: shapeExclusive, maxAlloc: 1 << 40}, storage, &Usage{})
	big, err := p.reserve(90<<20, 90<<20, false)
	require.NoError(t, err)
	p.free(big, 90<<20)
	small, err := p.reserve(10<<20, 10<<20, false)
	require.NoError(t, err)
	require.NotEqual(t, big, small, "10 MiB would leave 80 MiB of the free page unused")
	require.Equal(t, uint64(10<<20), p.pages[small].size)
	large, err := p.reserve(60<<20, 60<<20, false)
	require.NoError(t, err)
	require.Equal(t, big, large, "60 MiB takes the free 90 MiB page")
	require.Equal(t, 2, storage.allocs)

	// 46 MiB takes more than half of the free 90 MiB page: it reuses it.
	p.free(large, 60<<20)
	again, err := p.reserve(46<<20, 46<<20, false)
	require.NoError(t, err)
	require.Equal(t, big, again)
	require.Equal(t, 2, storage.allocs)

	// The device refuses a page of its own: the large free page serves.
	p.free(again, 46<<20)
	storage.failAfter = 0
	served, err := p.reserve(1<<20, 1<<20, false)
	require.NoError(t, err)
	require.Equal(t, big, served)
	require.NoError(t, p.checkInvariants())
}

// A dry run's lazy reservation takes the page its real run's eager one
// does: where the device memory, as the pools count it, cannot hold a page
// of its own, both take the large free page.
func TestExclusivePoolDecidesByTheHeapLazyOrNot(t *testing.T) {
	for _, lazy := range []bool{false, true} {
		storage := newFakeStorage()
		p := newExclusivePool(poolConfig{shape: shapeExclusive, maxAlloc: 1 << 40, heap: 120 << 20}, storage, &Usage{})
		big, err := p.reserve(90<<20, 90<<20, false)
		require.NoError(t, err)
		p.free(big, 90<<20)
		small, err := p.reserve(40<<20, 40<<20, lazy)
		require.NoError(t, err)
		require.Equal(t, big, small, "lazy %v: 90 MiB held and 40 MiB more pass the 120 MiB heap", lazy)
		_, err = p.resolve(small)
		require.NoError(t, err)
		require.NoError(t, p.checkInvariants())
		require.Equal(t, 1, storage.allocs)
	}
}
