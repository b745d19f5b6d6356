package memory

import (
	"math/rand/v2"
	"testing"

	"github.com/stretchr/testify/require"
)

// The fit index answers what a scan of every page's bound answers: the
// lowest page whose bound holds the size, across classes, words and growth.
func TestFitIndexFindsTheLowestPageThatFits(t *testing.T) {
	for _, pages := range []int{50, 200} { // one bitmap word a class, and several
		checkFitIndex(t, pages)
	}
}

func checkFitIndex(t *testing.T, pages int) {
	const largest = 1 << 21
	rng := rand.New(rand.NewPCG(1, uint64(pages)))
	idx := newFitIndex(largest)
	var bounds []uint64
	scan := func(v uint64) int {
		for i, b := range bounds {
			if b >= v {
				return i
			}
		}
		return -1
	}
	for step := range 20000 {
		i := rng.IntN(pages)
		for len(bounds) <= i {
			bounds = append(bounds, 0)
		}
		v := uint64(0)
		switch rng.IntN(4) {
		case 0: // released or full
		case 1:
			v = largest
		default:
			v = 1 + rng.Uint64N(largest)
		}
		idx.set(i, v)
		bounds[i] = v
		want := 1 + rng.Uint64N(largest)
		require.Equal(t, scan(want), idx.first(want), "%d pages, step %d: first(%d)", pages, step, want)
		require.Equal(t, v, idx.get(i))
	}
	require.Equal(t, uint64(0), idx.get(1<<20), "a page never set has no room")
}

func TestFitClassesAreOrdered(t *testing.T) {
	prev := 0
	for v := uint64(0); v < 1<<12; v++ {
		c := fitClass(v)
		require.GreaterOrEqual(t, c, prev, "class of %d", v)
		prev = c
	}
	require.Less(t, fitClass(1<<21), fitClass(1<<21+1<<20))
	require.Less(t, fitClass(1<<62), fitClass(1<<62+1<<61))
	require.Less(t, fitClass(1<<62+1<<61), fitClass(1<<63))
	require.Equal(t, fitClass(1<<63), fitClass(^uint64(0)), "the top values share a class")
}
