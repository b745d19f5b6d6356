package memory

import (
	"math/bits"
	"slices"
	"sort"
)

// slotIndex places a plan's slots among the distinct offsets they start
// at, once per install: at[k] is where slot k starts among starts, and
// below[k] how many of those lie below slot k's end.
type slotIndex struct {
	starts []uint64
	at     []int32
	below  []int32
}

func newSlotIndex(slots []VirtualSlot) *slotIndex {
	starts := make([]uint64, len(slots))
	for k, s := range slots {
		starts[k] = s.Offset
	}
	slices.Sort(starts)
	starts = slices.Compact(starts)
	x := &slotIndex{starts: starts, at: make([]int32, len(slots)), below: make([]int32, len(slots))}
	for k, s := range slots {
		x.at[k] = int32(sort.Search(len(starts), func(i int) bool { return starts[i] >= s.Offset }))
		end := s.Offset + s.Size
		x.below[k] = x.at[k] + int32(sort.Search(len(starts)-int(x.at[k]), func(i int) bool { return starts[int(x.at[k])+i] >= end }))
	}
	return x
}

// liveSlots is the set of a Virtual pool's live planned places, which
// never overlap, by where they start among the plan's slot offsets: a
// bitmap with a summary word per 64 words finds the nearest live place
// below or above a place in a few word operations, where a B-tree walk was
// most of the cost of a planned reservation.
type liveSlots struct {
	x       *slotIndex
	ends    []uint64 // ends[i]: the end of the live place starting at x.starts[i]
	words   []uint64 // bit i: a place starting at x.starts[i] is live
	summary []uint64 // bit w: words[w] has a bit set
	n       int
}

func newLiveSlots(x *slotIndex) liveSlots {
	n := len(x.starts)
	w := (n + 63) / 64
	return liveSlots{x: x, ends: make([]uint64, n), words: make([]uint64, w), summary: make([]uint64, (w+63)/64)}
}

// add makes slot k, size bytes from its offset, live.
func (l *liveSlots) add(k int, size uint64) {
	i := int(l.x.at[k])
	l.ends[i] = l.x.starts[i] + size
	l.words[i>>6] |= 1 << (i & 63)
	l.summary[i>>12] |= 1 << ((i >> 6) & 63)
	l.n++
}

// remove makes the place live at slot k's offset dead.
func (l *liveSlots) remove(k int) {
	i := int(l.x.at[k])
	l.words[i>>6] &^= 1 << (i & 63)
	if l.words[i>>6] == 0 {
		l.summary[i>>12] &^= 1 << ((i >> 6) & 63)
	}
	l.n--
}

// free reports whether no live place overlaps slot k.
func (l *liveSlots) free(k int) bool {
	p := l.last(int(l.x.below[k]))
	return p < 0 || l.ends[p] <= l.x.starts[l.x.at[k]]
}

// last is the highest live index below before, -1 where there is none.
func (l *liveSlots) last(before int) int {
	if before <= 0 {
		return -1
	}
	i := before - 1
	w := i >> 6
	if m := l.words[w] & (^uint64(0) >> (63 - uint(i&63))); m != 0 {
		return w<<6 + 63 - bits.LeadingZeros64(m)
	}
	// The summary, from the word below w down.
	if w == 0 {
		return -1
	}
	j := w - 1
	for s := j >> 6; s >= 0; s-- {
		m := l.summary[s]
		if s == j>>6 {
			m &= ^uint64(0) >> (63 - uint(j&63))
		}
		if m != 0 {
			ww := s<<6 + 63 - bits.LeadingZeros64(m)
			return ww<<6 + 63 - bits.LeadingZeros64(l.words[ww])
		}
	}
	return -1
}

// first is the lowest live index from from on, -1 where there is none.
func (l *liveSlots) first(from int) int {
	if from >= len(l.ends) {
		return -1
	}
	w := from >> 6
	if m := l.words[w] &^ (1<<(uint(from&63)) - 1); m != 0 {
		return w<<6 + bits.TrailingZeros64(m)
	}
	j := w + 1
	for s := j >> 6; s < len(l.summary); s++ {
		m := l.summary[s]
		if s == j>>6 {
			m &^= 1<<(uint(j&63)) - 1
		}
		if m != 0 {
			ww := s<<6 + bits.TrailingZeros64(m)
			return ww<<6 + bits.TrailingZeros64(l.words[ww])
		}
	}
	return -1
}

// each calls f with every live place's offset and end, lowest first.
func (l *liveSlots) each(f func(off, end uint64)) {
	for i := l.first(0); i >= 0; i = l.first(i + 1) {
		f(l.x.starts[i], l.ends[i])
	}
}
