package memory

import "math/bits"

// fitIndex finds the lowest page whose largest-free bound is at least a
// size. Bounds fall into size classes, two to a power of two, and class c
// has a bitmap over the pages with bit i set when page i's bound reaches
// the least size of class c. A size's class bitmap so holds, in page order,
// every page that can fit it and a few of the same class that cannot: the
// first set bit whose bound holds the size is the answer, nearly always the
// very first. Unlike a tree descent it takes no loop whose length depends
// on the page count (a mispredicted exit on most reservations), and one
// bitmap word covers 64 pages.
type fitIndex struct {
	bounds  []uint64 // per page; its length is 64 per bitmap word
	words   int      // bitmap words per class
	classes int      // classes in use: that of the largest bound, and below
	bitmaps []uint64 // class c's words are bitmaps[c*words : (c+1)*words]
}

// newFitIndex indexes bounds up to largest.
func newFitIndex(largest uint64) fitIndex {
	return fitIndex{classes: fitClass(largest) + 1}
}

// fitClass is the size class of v, two to each power of two: twice the bit
// length of v, plus the bit after the leading one. It takes no branch; the
// classes 1 and 3 stay empty, and values of 2^63 or more share a class.
func fitClass(v uint64) int {
	n := bits.Len64(v)
	return n<<1 | int(v<<2>>(uint(n)&63)&1) // the mask spares a shift-width check
}

// class clamps a value's class to the classes in use; a bound past the
// largest (only a corrupted page has one) lands in the top class.
func (t *fitIndex) class(v uint64) int { return min(fitClass(v), t.classes-1) }

func (t *fitIndex) set(i int, v uint64) {
	if i >= len(t.bounds) {
		t.grow(i + 1)
	}
	old := t.bounds[i]
	t.bounds[i] = v
	from, to := t.class(old), t.class(v)
	at, bit := i>>6, uint64(1)<<(i&63)
	// Class 0 holds only empty bounds and keeps no bits. With one word a
	// class, the classes a change crosses are one contiguous run.
	if t.words == 1 {
		if to > from {
			for c, run := 0, t.bitmaps[from+1:to+1]; c < len(run); c++ {
				run[c] |= bit
			}
		} else {
			for c, run := 0, t.bitmaps[to+1:from+1]; c < len(run); c++ {
				run[c] &^= bit
			}
		}
		return
	}
	for c := from + 1; c <= to; c++ {
		t.bitmaps[c*t.words+at] |= bit
	}
	for c := to + 1; c <= from; c++ {
		t.bitmaps[c*t.words+at] &^= bit
	}
}

func (t *fitIndex) grow(n int) {
	words := (n + 63) >> 6
	bitmaps := make([]uint64, t.classes*words)
	for c := range t.classes {
		copy(bitmaps[c*words:], t.bitmaps[c*t.words:(c+1)*t.words])
	}
	bounds := make([]uint64, words<<6)
	copy(bounds, t.bounds)
	t.bounds, t.words, t.bitmaps = bounds, words, bitmaps
}

// first is the lowest index whose bound is at least v (v > 0), or -1.
func (t *fitIndex) first(v uint64) int {
	row := fitClass(v)
	if row >= t.classes {
		return -1 // past the largest bound
	}
	row *= t.words
	for w := range t.words {
		for word := t.bitmaps[row+w]; word != 0; word &= word - 1 {
			if i := w<<6 | bits.TrailingZeros64(word); t.bounds[i] >= v {
				return i
			}
		}
	}
	return -1
}

func (t *fitIndex) get(i int) uint64 {
	if i >= len(t.bounds) {
		return 0
	}
	return t.bounds[i]
}
