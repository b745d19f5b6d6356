package memory

import (
	"fmt"
	"math/bits"
)

// granuleMap is what a virtual pool knows of each granule of its address
// range: whether a live reservation touches it (used), whether device
// memory is bound under it (bound), and which. Those are bitmaps, so a
// reservation of hundreds of granules is set and cleared a word at a time;
// whether a reservation's first or last granule is another's too the pool
// tells from its placement. The memory under bound granules is kept as
// extents: runs of granules bound to consecutive granules of one chunk,
// found by their first granule, so binding or unbinding a run costs the
// same however many granules it spans, and the map holds a few bits a
// granule: a range of tens of gigabytes in 64 KiB granules is cheap to
// start.
type granuleMap struct {
	used, bound []uint64 // one bit a granule
	// real: bound granules whose binding the device has. A lazy
	// reservation binds granules in the pool's account only, so that a dry
	// run counts what a real run would hold; they reach the device when
	// resolved.
	real []uint64
	// first: the first granule of each extent.
	first  []uint64
	ext    extentTable // the extents, by first granule
	n      int         // granules the bitmaps cover
	needed uint64      // used granules
	unreal uint64      // bound granules whose binding the device lacks
	idle   uint64      // bound granules not used
	hand   int         // the word where the search for an idle granule resumes
	top    int         // no granule at or past it was ever bound
}

// extent is n granules bound to chunk granules from at on.
type extent struct {
	n     uint32
	chunk int32
	at    uint32
}

// maxExtent bounds an extent's granules, so finding the extent of a
// granule reads at most maxExtent/64 words of the first bitmap.
const maxExtent = 1 << 12

// granuleSet names a set of granules, as a bitmap expression.
type granuleSet int

const (
	unboundUsed granuleSet = iota // used, no memory bound
	boundUnreal                   // bound in the pool's account only
	idleBound                     // bound, not used
	realBound                     // bound on the device
	notReal                       // not bound on the device
	usedAny                       // used, bound or not
	unboundAny                    // no memory bound, used or not
)

func (m *granuleMap) word(s granuleSet, w int) uint64 {
	switch s {
	case unboundUsed:
		return m.used[w] &^ m.bound[w]
	case boundUnreal:
		return m.bound[w] &^ m.real[w]
	case idleBound:
		return m.bound[w] &^ m.used[w]
	case realBound:
		return m.real[w]
	case usedAny:
		return m.used[w]
	case unboundAny:
		return ^m.bound[w]
	default:
		return ^m.real[w]
	}
}

func (m *granuleMap) len() int { return m.n }

// grow makes room for granules below n.
func (m *granuleMap) grow(n int) {
	n = max(n, 2*m.n, 1024) // amortised: the range is used from its low end up
	m.n = n
	words := (n + 63) / 64
	// The four bitmaps in one allocation, each copied once: by append
	// each was allocated zeroed, then copied into a larger one.
	all := make([]uint64, 4*words)
	used, bound, real, first := m.used, m.bound, m.real, m.first
	m.used = all[:words:words]
	m.bound = all[words : 2*words : 2*words]
	m.real = all[2*words : 3*words : 3*words]
	m.first = all[3*words:]
	copy(m.used, used)
	copy(m.bound, bound)
	copy(m.real, real)
	copy(m.first, first)
}

// wordMask is the bits of word w within granules g0..g1.
func wordMask(w, g0, g1 int) uint64 {
	lo, hi := max(g0-w*64, 0), min(g1-w*64, 63)
	return (^uint64(0) >> uint(63-hi+lo)) << uint(lo)
}

// touch adds a reservation over granules g0..g1 and returns how many of
// them have no memory bound, and how many lack the device's binding (those
// and the ones bound in the pool's account only). Only its first and last
// granule can be used already: the rest lies inside the reservation.
func (m *granuleMap) touch(g0, g1 int) (unbound, unreal uint64) {
	w0, w1 := g0>>6, g1>>6
	lo, hi := ^uint64(0)<<uint(g0&63), ^uint64(0)>>uint(63-g1&63)
	end0, end1 := uint64(1)<<uint(g0&63), uint64(1)<<uint(g1&63)
	fresh := uint64(g1 - g0 + 1)
	if w0 == w1 {
		u, mask := m.used[w0], lo&hi
		if u&end0 != 0 {
			fresh--
		}
		if g1 != g0 && u&end1 != 0 {
			fresh--
		}
		m.used[w0] = u | mask
		// Mostly every granule is bound: then there is nothing to count.
		if x := mask &^ m.bound[w0]; x != 0 {
			unbound = uint64(bits.OnesCount64(x))
		}
	} else {
		u1, u0 := m.used[w1], m.used[w0]
		if u0&end0 != 0 {
			fresh--
		}
		if u1&end1 != 0 {
			fresh--
		}
		m.used[w0], m.used[w1] = u0|lo, u1|hi
		// Inner words are mostly bound through: count only the ones that
		// are not, in the pass that marks them used.
		if x, y := lo&^m.bound[w0], hi&^m.bound[w1]; x|y != 0 {
			unbound = uint64(bits.OnesCount64(x) + bits.OnesCount64(y))
		}
		if w1 > w0+1 {
			used, bound := m.used[w0+1:w1], m.bound[w0+1:w1:w1]
			all := ^uint64(0)
			for i := range used {
				used[i] = ^uint64(0)
				all &= bound[i]
			}
			if all != ^uint64(0) {
				for _, b := range bound {
					unbound += uint64(bits.OnesCount64(^b))
				}
			}
		}
	}
	// Used granules are bound, so the unbound ones were not used, and the
	// rest of those newly used were idle.
	m.needed += fresh
	m.idle -= fresh - unbound
	if m.unreal == 0 {
		return unbound, unbound
	}
	return unbound, m.count(notReal, g0, g1)
}

// untouch drops a reservation over granules g0..g1: its inner granules and
// the ends no other reservation touches (keep0, keep1 say whether one
// does) are no longer used; bound ones become idle.
func (m *granuleMap) untouch(g0, g1 int, keep0, keep1 bool) {
	var gone, idle uint64
	for w, last := g0>>6, g1>>6; w <= last; w++ {
		mask := wordMask(w, g0, g1)
		if w == g0>>6 && keep0 {
			mask &^= 1 << uint(g0&63)
		}
		if w == last && keep1 {
			mask &^= 1 << uint(g1&63)
		}
		g := mask & m.used[w]
		m.used[w] &^= mask
		gone += uint64(bits.OnesCount64(g))
		idle += uint64(bits.OnesCount64(g & m.bound[w]))
	}
	m.needed -= gone
	m.idle += idle
}

// untouchBound is untouch for a reservation all of whose granules are
// bound, as every live one's are: they all become idle but the ends kept.
func (m *granuleMap) untouchBound(g0, g1 int, keep0, keep1 bool) {
	w0, w1 := g0>>6, g1>>6
	lo, hi := ^uint64(0)<<uint(g0&63), ^uint64(0)>>uint(63-g1&63)
	gone := uint64(g1 - g0 + 1)
	if keep0 {
		gone--
		lo &^= 1 << uint(g0&63)
	}
	if keep1 {
		if g1 != g0 || !keep0 {
			gone--
		}
		hi &^= 1 << uint(g1&63)
	}
	if w0 == w1 {
		// lo and hi are masks of one word: each keeps its own end.
		m.used[w0] &^= lo & hi
	} else {
		m.used[w1] &^= hi
		m.used[w0] &^= lo
		if w1 > w0+1 {
			clear(m.used[w0+1 : w1])
		}
	}
	m.needed -= gone
	m.idle += gone
}

// allBound says whether memory is bound under every granule of g0..g1.
func (m *granuleMap) allBound(g0, g1 int) bool {
	w0, w1 := g0>>6, g1>>6
	lo, hi := ^uint64(0)<<uint(g0&63), ^uint64(0)>>uint(63-g1&63)
	if w0 == w1 {
		return m.bound[w0]&(lo&hi) == lo&hi
	}
	if m.bound[w0]&lo != lo || m.bound[w1]&hi != hi {
		return false
	}
	for _, b := range m.bound[w0+1 : w1] {
		if b != ^uint64(0) {
			return false
		}
	}
	return true
}

// count is how many granules of g0..g1 are in s.
func (m *granuleMap) count(s granuleSet, g0, g1 int) (n uint64) {
	for w := g0 >> 6; w <= g1>>6; w++ {
		n += uint64(bits.OnesCount64(m.word(s, w) & wordMask(w, g0, g1)))
	}
	return n
}

// run is the first run of granules of s within g..g1, [a, b), or a = -1.
func (m *granuleMap) run(s granuleSet, g, g1 int) (a, b int) {
	if g > g1 {
		return -1, -1
	}
	// Only the first and the last word are masked.
	w, last := g>>6, g1>>6
	x := m.word(s, w) & (^uint64(0) << uint(g&63))
	for x == 0 && w < last {
		w++
		x = m.word(s, w)
	}
	if w == last {
		x &= ^uint64(0) >> uint(63-g1&63)
	}
	if x == 0 {
		return -1, -1
	}
	a = w*64 + bits.TrailingZeros64(x)
	return a, m.runEnd(s, a, g1)
}

// runEnd is where the run of granules of s from a (one of them) ends, at
// most at g1+1.
func (m *granuleMap) runEnd(s granuleSet, a, g1 int) int {
	w, last := a>>6, g1>>6
	b := a + bits.TrailingZeros64(^((m.word(s, w) & wordMask(w, a, g1)) >> uint(a&63)))
	if b&63 != 0 || b > g1 {
		return b
	}
	// Whole words of the run, then the word it ends in.
	w++
	n := m.wholeWords(s, w, last)
	w, b = w+n, b+64*n
	if w > last {
		return b
	}
	return b + bits.TrailingZeros64(^(m.word(s, w) & wordMask(w, b, g1)))
}

// wholeWords is how many words from w on, before last, hold only granules
// of s. Runs of idle granules and of a reservation's unbound ones run long:
// those are tested several words a step.
func (m *granuleMap) wholeWords(s granuleSet, w, last int) int {
	from := w
	switch s {
	case idleBound:
		for ; w+4 <= last; w += 4 {
			b, u := m.bound[w:w+4:w+4], m.used[w:w+4:w+4]
			if b[0]&b[1]&b[2]&b[3] != ^uint64(0) || u[0]|u[1]|u[2]|u[3] != 0 {
				break
			}
		}
	case unboundUsed:
		for ; w+4 <= last; w += 4 {
			b, u := m.bound[w:w+4:w+4], m.used[w:w+4:w+4]
			if b[0]|b[1]|b[2]|b[3] != 0 || u[0]&u[1]&u[2]&u[3] != ^uint64(0) {
				break
			}
		}
	}
	for w < last && m.word(s, w) == ^uint64(0) {
		w++
	}
	return w - from
}

// setBits sets (or clears) the bits of granules a..b-1 in bm: the end
// words masked, the words between whole.
func setBits(bm []uint64, a, b int, on bool) {
	w0, w1 := a>>6, (b-1)>>6
	lo, hi := ^uint64(0)<<uint(a&63), ^uint64(0)>>uint(63-(b-1)&63)
	if w0 == w1 {
		lo &= hi
	}
	fill := uint64(0)
	if on {
		fill = ^uint64(0)
	}
	bm[w0] = bm[w0]&^lo | fill&lo
	if w0 == w1 {
		return
	}
	bm[w1] = bm[w1]&^hi | fill&hi
	for w := w0 + 1; w < w1; w++ {
		bm[w] = fill
	}
}

func (m *granuleMap) has(bm []uint64, g int) bool { return bm[g>>6]&(1<<uint(g&63)) != 0 }

// bindRun records granules a..b-1 bound to chunk from granule at on;
// used says that every one of them is used, or else none is (the pool
// binds unused granules only ahead of a plan's places, or back where a
// refused submission unbound idle ones), real that the device has the
// bindings.
func (m *granuleMap) bindRun(a, b int, chunk int32, at uint32, used, real bool) {
	if !used {
		m.idle += uint64(b - a)
	}
	if !real {
		m.unreal += uint64(b - a)
	}
	setBits(m.bound, a, b, true)
	m.top = max(m.top, b)
	if real {
		setBits(m.real, a, b, true)
	}
	m.addExtent(a, b, chunk, at)
}

// unbindRun drops the bindings of granules a..b-1, every one of them bound,
// calling give with each extent's part in turn: where it starts, its chunk
// and chunk granule, and how many granules, and whether the device has
// those bindings (a part is all real or all not). idle says that no
// reservation uses any of them.
func (m *granuleMap) unbindRun(a, b int, idle bool, give func(g int, chunk int32, at, n uint32, real bool)) {
	m.split(a)
	if b < m.len() {
		m.split(b)
	}
	if idle {
		m.idle -= uint64(b - a)
	} else {
		m.idle -= uint64(b-a) - m.count(usedAny, a, b-1)
	}
	var unreal uint64
	if m.unreal > 0 {
		unreal = m.count(boundUnreal, a, b-1)
		m.unreal -= unreal
	}
	for s := a; s < b; {
		e := *m.ext.get(s)
		n, chunk, at := int(e.n), e.chunk, e.at
		m.first[s>>6] &^= 1 << uint(s&63)
		m.ext.del(s)
		if unreal == 0 {
			give(s, chunk, at, uint32(n), true)
			s += n
			continue
		}
		for g := s; g < s+n; {
			real := m.has(m.real, g)
			set := boundUnreal
			if real {
				set = realBound
			}
			e := m.runEnd(set, g, s+n-1)
			give(g, chunk, at+uint32(g-s), uint32(e-g), real)
			g = e
		}
		s += n
	}
	setBits(m.bound, a, b, false)
	setBits(m.real, a, b, false)
}

// extentOf is the first granule of the extent holding bound granule g.
func (m *granuleMap) extentOf(g int) int {
	w := g >> 6
	x := m.first[w] & (^uint64(0) >> uint(63-g&63))
	for x == 0 {
		w--
		x = m.first[w]
	}
	return w*64 + 63 - bits.LeadingZeros64(x)
}

// split makes bound granule g the first of an extent; an unbound g is left
// alone.
func (m *granuleMap) split(g int) {
	if !m.has(m.bound, g) || m.has(m.first, g) {
		return
	}
	s := m.extentOf(g)
	e := m.ext.get(s)
	k := uint32(g - s)
	rest := extent{e.n - k, e.chunk, e.at + k}
	e.n = k
	m.setExtent(g, rest)
}

func (m *granuleMap) setExtent(g int, e extent) {
	m.first[g>>6] |= 1 << uint(g&63)
	m.ext.put(g, e)
}

// addExtent records a..b-1, just bound, as extents, merged with the
// extent before or after where the chunk's granules continue each other.
func (m *granuleMap) addExtent(a, b int, chunk int32, at uint32) {
	if a > 0 && m.has(m.bound, a-1) {
		// The extent before ends at a: a was not bound.
		s := m.extentOf(a - 1)
		if e := m.ext.get(s); e.chunk == chunk && e.at+e.n == at && e.n < maxExtent {
			k := min(uint32(b-a), maxExtent-e.n)
			e.n += k
			a, at = a+int(k), at+k
		}
	}
	for a < b {
		k := min(uint32(b-a), maxExtent)
		m.setExtent(a, extent{k, chunk, at})
		a, at = a+int(k), at+k
	}
	if b < m.len() && m.has(m.first, b) {
		if next := *m.ext.get(b); next.chunk == chunk && next.at == at {
			s := m.extentOf(b - 1)
			if e := m.ext.get(s); e.n+next.n <= maxExtent {
				e.n += next.n
				m.first[b>>6] &^= 1 << uint(b&63)
				m.ext.del(b)
			}
		}
	}
}

// extent is the extent holding bound granule g, from g on: its chunk, the
// chunk granule under g, and how many granules from g it runs.
func (m *granuleMap) extent(g int) (chunk int32, at uint32, n int) {
	s := m.extentOf(g)
	e := m.ext.get(s)
	k := g - s
	return e.chunk, e.at + uint32(k), int(e.n) - k
}

// setReal records that the device has the bindings of a..b-1.
func (m *granuleMap) setReal(a, b int) {
	m.unreal -= m.count(boundUnreal, a, b-1)
	setBits(m.real, a, b, true)
}

// nextIdleRun is a whole run of bound granules no reservation uses, found
// by a hand that sweeps the range round, so the granules idle longest tend
// to go first. a is -1 when there is none.
func (m *granuleMap) nextIdleRun() (a, b int) {
	if m.idle == 0 {
		return -1, -1
	}
	// Words past the highest granule ever bound hold no idle granule.
	words := min(len(m.used), (m.top+63)>>6)
	used, bound := m.used[:words], m.bound[:words]
	if m.hand >= len(used) {
		m.hand = 0
	}
	// From the hand to the end, then from the start through the hand.
	w, end := m.hand, len(used)
	for range 2 {
		// Eight words a step: most hold no idle granule.
		for ; w+8 <= end; w += 8 {
			b, u := bound[w:w+8:w+8], used[w:w+8:w+8]
			if b[0]&^u[0]|b[1]&^u[1]|b[2]&^u[2]|b[3]&^u[3]|b[4]&^u[4]|b[5]&^u[5]|b[6]&^u[6]|b[7]&^u[7] != 0 {
				break
			}
		}
		for ; w < end; w++ {
			if idle := bound[w] &^ used[w]; idle != 0 {
				a = w*64 + bits.TrailingZeros64(idle)
				b = m.runEnd(idleBound, a, m.len()-1)
				// The hand rests where the run ends.
				m.hand = (b - 1) >> 6
				return a, b
			}
		}
		w, end = 0, min(m.hand+1, len(used))
	}
	panic("memory: virtual pool counted idle granules it does not have")
}

// check recounts the map against the live reservations' granule ranges
// and walks its extents, calling each with its granules, chunk and chunk
// granule.
func (m *granuleMap) check(ranges [][2]int, each func(g, n int, chunk int32, at uint32) error) error {
	used := make([]uint64, len(m.used))
	for _, r := range ranges {
		for g := r[0]; g <= r[1]; g++ {
			used[g>>6] |= 1 << uint(g&63)
		}
	}
	var needed, idle, unreal uint64
	for w := range used {
		if used[w] != m.used[w] {
			return fmt.Errorf("granules %d..%d: used %#x, recorded %#x", w*64, w*64+63, used[w], m.used[w])
		}
		if stray := m.real[w] &^ m.bound[w]; stray != 0 {
			return fmt.Errorf("granule %d: the device's binding recorded, but the granule is not bound", w*64+bits.TrailingZeros64(stray))
		}
		if stray := used[w] &^ m.bound[w]; stray != 0 {
			return fmt.Errorf("granule %d is used, but no memory is bound under it", w*64+bits.TrailingZeros64(stray))
		}
		if stray := m.first[w] &^ m.bound[w]; stray != 0 {
			return fmt.Errorf("granule %d starts an extent, but it is not bound", w*64+bits.TrailingZeros64(stray))
		}
		needed += uint64(bits.OnesCount64(used[w]))
		unreal += uint64(bits.OnesCount64(m.bound[w] &^ m.real[w]))
		idle += uint64(bits.OnesCount64(m.bound[w] &^ used[w]))
	}
	// Every bound granule is in exactly one extent, and extents start where
	// the first bitmap says.
	extents := 0
	for g := 0; g < m.len(); {
		if !m.has(m.bound, g) {
			g++
			continue
		}
		if !m.has(m.first, g) {
			return fmt.Errorf("bound granule %d is in no extent", g)
		}
		e := m.ext.get(g)
		if e == nil {
			return fmt.Errorf("extent at granule %d not recorded", g)
		}
		n := int(e.n)
		if n == 0 || n > maxExtent || g+n > m.len() {
			return fmt.Errorf("extent at granule %d runs %d granules", g, n)
		}
		for k := g + 1; k < g+n; k++ {
			if !m.has(m.bound, k) || m.has(m.first, k) {
				return fmt.Errorf("extent at granule %d (%d granules) breaks at %d", g, n, k)
			}
		}
		if err := each(g, n, e.chunk, e.at); err != nil {
			return err
		}
		extents++
		g += n
	}
	if extents != m.ext.n {
		return fmt.Errorf("%d extents in the bitmap, %d recorded", extents, m.ext.n)
	}
	if unreal != m.unreal {
		return fmt.Errorf("%d bound granules lack the device's binding, recorded %d", unreal, m.unreal)
	}
	if needed != m.needed || idle != m.idle {
		return fmt.Errorf("%d granules used and %d idle, recorded %d and %d", needed, idle, m.needed, m.idle)
	}
	return nil
}
