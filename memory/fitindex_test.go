package memory

import (
	"math/rand/v2"
	"testing"

	"github.com/stretchr/testify/require"
)

// The fit index answers what a scan of every page's bound answers: the
// lowest page whose bound holds the size, across classes, words and growth.
func TestFitIndexFindsTheLowestPageThatFits(t *testing.T) {
	const largest = 1 << 21
	rng := rand.New(rand.NewPCG(1, 2))
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
		i := rng.IntN(200)
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
		require.Equal(t, scan(want), idx.first(want), "step %d: first(%d)", step, want)
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
	require.Equal(t, fitClass(1<<63), fitClass(^uint64(0))-1)
}
