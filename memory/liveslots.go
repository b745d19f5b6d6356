package memory

import (
	"math/bits"
	"slices"
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
	x := &slotIndex{at: make([]int32, len(slots)), below: make([]int32, len(slots))}
	if !x.rankPacked(slots) {
		x.starts = make([]uint64, len(slots))
		for k, s := range slots {
			x.starts[k] = s.Offset
		}
		slices.Sort(x.starts)
		x.starts = slices.Compact(x.starts)
		for k, s := range slots {
			at, _ := slices.BinarySearch(x.starts, s.Offset)
			x.at[k] = int32(at)
		}
	}
	for k, s := range slots {
		at := int(x.at[k])
		x.below[k] = int32(at + firstAtOrPast(x.starts[at:], s.Offset+s.Size))
	}
	return x
}

// packedSlotBits: a slot's index takes the low bits of its sort key, its
// offset the rest.
const packedSlotBits = 24

// rankPacked sets starts and at by one sort of keys that pack each slot's
// offset over its index, where every offset and index fits: a plan's
// places are found in order, without a search per slot (a search per slot
// was half of an install of llama_generate's plan). It reports whether
// they fit.
func (x *slotIndex) rankPacked(slots []VirtualSlot) bool {
	if len(slots) > 1<<packedSlotBits {
		return false
	}
	keys := make([]uint64, len(slots))
	var highest uint64
	for k, s := range slots {
		if s.Offset >= 1<<(64-packedSlotBits) {
			return false
		}
		keys[k] = s.Offset<<packedSlotBits | uint64(k)
		highest = max(highest, s.Offset)
	}
	keys = sortByOffset(keys, bits.Len64(highest))
	starts := keys[:0] // written behind the read
	at := int32(-1)
	for _, key := range keys {
		off := key >> packedSlotBits
		if at < 0 || starts[at] != off {
			at++
			starts = append(starts, off)
		}
		x.at[key&(1<<packedSlotBits-1)] = at
	}
	x.starts = slices.Clip(starts)
	return true
}

// sortByOffset sorts packed keys by their offsets, offsetBits wide, least
// significant digit first: a few passes over the keys in order, where a
// comparison sort of a plan's hundred thousand places took most of the
// install. Each pass is stable, so keys of one offset stay in slot order.
func sortByOffset(keys []uint64, offsetBits int) []uint64 {
	const digitBits = 11
	var count [1 << digitBits]int
	buf := make([]uint64, len(keys))
	for shift := packedSlotBits; shift < packedSlotBits+offsetBits; shift += digitBits {
		clear(count[:])
		for _, key := range keys {
			count[key>>uint(shift)&(1<<digitBits-1)]++
		}
		sum := 0
		for d, c := range count {
			count[d] = sum
			sum += c
		}
		for _, key := range keys {
			d := key >> uint(shift) & (1<<digitBits - 1)
			buf[count[d]] = key
			count[d]++
		}
		keys, buf = buf, keys
	}
	return keys
}

// firstAtOrPast is the index of the first of sorted that is at least v,
// len(sorted) if none is. It gallops from the start, as a slot's end is
// mostly a few offsets past its own.
func firstAtOrPast(sorted []uint64, v uint64) int {
	if len(sorted) == 0 || sorted[0] >= v {
		return 0
	}
	lo, hi := 0, 1 // sorted[lo] < v
	for hi < len(sorted) && sorted[hi] < v {
		lo, hi = hi, 2*hi
	}
	hi = min(hi, len(sorted))
	i, _ := slices.BinarySearch(sorted[lo+1:hi], v)
	return lo + 1 + i
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

// has reports whether a place starting at the offset of index i is live.
func (l *liveSlots) has(i int) bool { return l.words[i>>6]&(1<<(i&63)) != 0 }

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
