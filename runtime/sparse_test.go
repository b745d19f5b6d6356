package runtime

import (
	"errors"
	"testing"
)

// Binds that only touch are apart; two that share a byte, in any order
// among the others, are found, lowest index first.
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
