package runtime

import (
	"errors"
	"math"
	"testing"

	"github.com/stretchr/testify/require"
)

// Binds that only touch are apart, and a bind of 0 B names no bytes; two
// that share a byte, in any order among the others, are found, lowest
// index first.
func TestOverlappingBinds(t *testing.T) {
	for _, c := range []struct {
		name  string
		binds []SparseBind
		i, j  int
		ok    bool
	}{
		{"none", nil, 0, 0, false},
		{"one", []SparseBind{{Offset: 0, Size: 8}}, 0, 0, false},
		{"touching", []SparseBind{{Offset: 8, Size: 8}, {Offset: 0, Size: 8}, {Offset: 16, Size: 8, Memory: 1}}, 0, 0, false},
		{"an unbind and a bind of one granule", []SparseBind{{Offset: 0, Size: 24}, {Offset: 8, Size: 8, Memory: 1}}, 0, 1, true},
		{"out of order", []SparseBind{{Offset: 32, Size: 8}, {Offset: 0, Size: 8}, {Offset: 4, Size: 8}}, 1, 2, true},
		{"long, apart", spaced(40, 8, -1), 0, 0, false},
		{"long, one overlap", spaced(40, 8, 30), 30, 31, true},
		{"none inside a bind", []SparseBind{{Offset: 0, Size: 24}, {Offset: 8, Size: 0, Memory: 1}}, 0, 0, false},
		{"none at a bind", []SparseBind{{Offset: 8, Size: 8}, {Offset: 8, Size: 0}}, 0, 0, false},
		{"long, none at a bind", append(spaced(40, 8, -1), SparseBind{Offset: 80}), 0, 0, false},
		{"long, none at a bind first", append([]SparseBind{{Offset: 80}}, spaced(40, 8, -1)...), 0, 0, false},
		{"long, none inside a bind", append(spaced(40, 8, -1), SparseBind{Offset: 84}), 0, 0, false},
		{"one ending past 2^64", []SparseBind{{Offset: 0, Size: 8192}, {Offset: 4096, Size: math.MaxUint64 - 4095}}, 0, 1, true},
		{"one ending past 2^64 first", []SparseBind{{Offset: 4096, Size: math.MaxUint64}, {Offset: 1 << 40, Size: 8}}, 0, 1, true},
		{"long, one ending past 2^64", append(spaced(40, 8, -1), SparseBind{Offset: 2, Size: math.MaxUint64}), 39, 40, true},
	} {
		i, j, ok := overlappingBinds(c.binds)
		if ok != c.ok || (ok && (i != c.i || j != c.j)) {
			t.Errorf("%s: overlappingBinds = %d, %d, %v; want %d, %d, %v", c.name, i, j, ok, c.i, c.j, c.ok)
		}
		err := CheckOverlappingBinds(c.binds)
		var typed *OverlappingBindsError
		switch {
		case !c.ok && err != nil:
			t.Errorf("%s: CheckOverlappingBinds = %v; want nil", c.name, err)
		case c.ok && (!errors.Is(err, ErrOverlappingBinds) || !errors.As(err, &typed)):
			t.Errorf("%s: CheckOverlappingBinds = %v; want an *OverlappingBindsError matching ErrOverlappingBinds", c.name, err)
		case c.ok && (typed.First != c.i || typed.Second != c.j || typed.A != c.binds[c.i] || typed.B != c.binds[c.j]):
			t.Errorf("%s: CheckOverlappingBinds names %d (%+v) and %d (%+v); want %d and %d", c.name, typed.First, typed.A, typed.Second, typed.B, c.i, c.j)
		}
	}
}

// spaced is n binds of size bytes end to end, highest first, bind k
// moved half a bind down onto bind k+1 when k is not -1.
func spaced(n int, size uint64, k int) []SparseBind {
	binds := make([]SparseBind, n)
	for i := range binds {
		binds[i] = SparseBind{Offset: uint64(n-i) * size, Size: size}
	}
	if k >= 0 {
		binds[k].Offset -= size / 2
	}
	return binds
}

// The ranges take three fourths of the reported sparse address space at
// most, and leave room within thirteen sixteenths of it for the whole heap
// counted three times, as the H200's driver maps allocations; at least an
// eighth where the heap is too large for that.
func TestRangesLeaveRoomForTheHeap(t *testing.T) {
	const tib = 1 << 40
	h200 := uint64(150754820096) // the H200's heap, as its driver reports it
	require.Equal(t, uint64(tib/16*13)-3*h200, RangesSpace(tib, h200))
	require.InDelta(t, 441e9, float64(RangesSpace(tib, h200)), 1e9)
	require.Equal(t, uint64(tib/4*3), RangesSpace(tib, 1<<30), "a small heap: three fourths")
	require.Equal(t, uint64(tib/8), RangesSpace(tib, tib), "a heap past the rule: an eighth")
	require.Equal(t, uint64(tib/8), RangesSpace(tib, tib/16*13/3), "nothing left by the rule: an eighth")
}
