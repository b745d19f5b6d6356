package memory

import (
	"fmt"
	"math/bits"
)

// granuleMap is what a virtual pool knows of each granule of its address
// range: whether a live reservation touches it (used), whether device
// memory is bound under it (bound), and which. A granule inside a
// reservation, not at either end, is that reservation's alone, so only the
// first and last granule of each reservation keep a count of the
// reservations touching them; the rest is bitmaps, and a reservation of
// hundreds of granules is set and cleared a word at a time.
type granuleMap struct {
	used, bound []uint64 // one bit a granule
	// real: bound granules whose binding the device has. A lazy
	// reservation binds granules in the pool's account only, so that a dry
	// run counts what a real run would hold; they reach the device when
	// resolved.
	real    []uint64
	ends    []uint32 // per granule: reservations it is the first or last granule of
	backing []int32  // per bound granule: its chunk
	backAt  []uint32 // per bound granule: its granule index in that chunk
	needed  uint64   // used granules
	idle    uint64   // bound granules not used
	hand    int      // the word where the search for an idle granule resumes
}

func (m *granuleMap) len() int { return len(m.ends) }

// grow makes room for granules below n.
func (m *granuleMap) grow(n int) {
	n = max(n, 2*len(m.ends), 1024) // amortised: the range is used from its low end up
	old := len(m.ends)
	m.ends = append(m.ends, make([]uint32, n-old)...)
	m.backAt = append(m.backAt, make([]uint32, n-old)...)
	m.backing = append(m.backing, make([]int32, n-old)...)
	for g := old; g < n; g++ {
		m.backing[g] = none
	}
	words := (n + 63) / 64
	m.used = append(m.used, make([]uint64, words-len(m.used))...)
	m.bound = append(m.bound, make([]uint64, words-len(m.bound))...)
	m.real = append(m.real, make([]uint64, words-len(m.real))...)
}

// wordMask is the bits of word w within granules g0..g1.
func wordMask(w, g0, g1 int) uint64 {
	lo, hi := max(g0-w*64, 0), min(g1-w*64, 63)
	return (^uint64(0) >> uint(63-hi+lo)) << uint(lo)
}

// touch adds a reservation over granules g0..g1 and returns how many of
// them have no memory bound.
func (m *granuleMap) touch(g0, g1 int) (unbound uint64) {
	m.ends[g0]++
	if g1 != g0 {
		m.ends[g1]++
	}
	for w := g0 >> 6; w <= g1>>6; w++ {
		mask := wordMask(w, g0, g1)
		fresh := mask &^ m.used[w]
		m.used[w] |= mask
		m.needed += uint64(bits.OnesCount64(fresh))
		m.idle -= uint64(bits.OnesCount64(fresh & m.bound[w]))
		unbound += uint64(bits.OnesCount64(mask &^ m.bound[w]))
	}
	return unbound
}

// untouch drops a reservation over granules g0..g1: its inner granules and
// the ends no other reservation touches are no longer used; bound ones
// become idle.
func (m *granuleMap) untouch(g0, g1 int) {
	m.ends[g0]--
	if g1 != g0 {
		m.ends[g1]--
	}
	for w := g0 >> 6; w <= g1>>6; w++ {
		mask := wordMask(w, g0, g1)
		if w == g0>>6 && m.ends[g0] != 0 {
			mask &^= 1 << uint(g0&63)
		}
		if w == g1>>6 && m.ends[g1] != 0 {
			mask &^= 1 << uint(g1&63)
		}
		gone := mask & m.used[w]
		m.used[w] &^= mask
		m.needed -= uint64(bits.OnesCount64(gone))
		m.idle += uint64(bits.OnesCount64(gone & m.bound[w]))
	}
}

// unboundIn counts the granules of g0..g1 with no memory bound.
func (m *granuleMap) unboundIn(g0, g1 int) (n uint64) {
	for w := g0 >> 6; w <= g1>>6; w++ {
		n += uint64(bits.OnesCount64(wordMask(w, g0, g1) &^ m.bound[w]))
	}
	return n
}

// nextUnbound is the first used granule of g..g1 with no memory bound, or
// -1.
func (m *granuleMap) nextUnbound(g, g1 int) int {
	for w := g >> 6; w <= g1>>6; w++ {
		if free := wordMask(w, g, g1) & m.used[w] &^ m.bound[w]; free != 0 {
			return w*64 + bits.TrailingZeros64(free)
		}
	}
	return -1
}

func (m *granuleMap) bind(g int, chunk int32, at uint32) {
	m.bound[g>>6] |= 1 << uint(g&63)
	m.backing[g], m.backAt[g] = chunk, at
	if m.used[g>>6]&(1<<uint(g&63)) == 0 {
		m.idle++
	}
}

// unbind drops g's binding; real says whether the device had it.
func (m *granuleMap) unbind(g int) (chunk int32, at uint32, real bool) {
	bit := uint64(1) << uint(g&63)
	m.bound[g>>6] &^= bit
	real = m.real[g>>6]&bit != 0
	m.real[g>>6] &^= bit
	if m.used[g>>6]&bit == 0 {
		m.idle--
	}
	chunk, at = m.backing[g], m.backAt[g]
	m.backing[g] = none
	return chunk, at, real
}

// setReal records that the device has g's binding.
func (m *granuleMap) setReal(g int) { m.real[g>>6] |= 1 << uint(g&63) }

// unrealIn counts the granules of g0..g1 whose binding the device lacks:
// unbound ones and those bound in the pool's account only.
func (m *granuleMap) unrealIn(g0, g1 int) (n uint64) {
	for w := g0 >> 6; w <= g1>>6; w++ {
		n += uint64(bits.OnesCount64(wordMask(w, g0, g1) &^ m.real[w]))
	}
	return n
}

// nextUnreal is the first bound granule of g..g1 whose binding the device
// lacks, or -1.
func (m *granuleMap) nextUnreal(g, g1 int) int {
	for w := g >> 6; w <= g1>>6; w++ {
		if pending := wordMask(w, g, g1) & m.bound[w] &^ m.real[w]; pending != 0 {
			return w*64 + bits.TrailingZeros64(pending)
		}
	}
	return -1
}

// nextIdle is a bound granule no reservation uses, found by a hand that
// sweeps the range round, so the granules idle longest tend to go first.
// It is -1 when there is none.
func (m *granuleMap) nextIdle() int {
	if m.idle == 0 {
		return -1
	}
	for range len(m.used) + 1 {
		if m.hand >= len(m.used) {
			m.hand = 0
		}
		if idle := m.bound[m.hand] &^ m.used[m.hand]; idle != 0 {
			return m.hand*64 + bits.TrailingZeros64(idle)
		}
		m.hand++
	}
	panic("memory: virtual pool counted idle granules it does not have")
}

// check recounts the map against the live reservations' granule ranges.
func (m *granuleMap) check(ranges [][2]int) error {
	ends := make([]uint32, len(m.ends))
	used := make([]uint64, len(m.used))
	for _, r := range ranges {
		ends[r[0]]++
		if r[1] != r[0] {
			ends[r[1]]++
		}
		for g := r[0]; g <= r[1]; g++ {
			used[g>>6] |= 1 << uint(g&63)
		}
	}
	var needed, idle uint64
	for w := range used {
		if used[w] != m.used[w] {
			return fmt.Errorf("granules %d..%d: used %#x, recorded %#x", w*64, w*64+63, used[w], m.used[w])
		}
		if stray := m.real[w] &^ m.bound[w]; stray != 0 {
			return fmt.Errorf("granule %d: the device's binding recorded, but the granule is not bound", w*64+bits.TrailingZeros64(stray))
		}
		needed += uint64(bits.OnesCount64(used[w]))
		idle += uint64(bits.OnesCount64(m.bound[w] &^ used[w]))
	}
	for g := range ends {
		bound := m.bound[g>>6]&(1<<uint(g&63)) != 0
		switch {
		case ends[g] != m.ends[g]:
			return fmt.Errorf("granule %d ends %d reservations, recorded %d", g, ends[g], m.ends[g])
		case bound != (m.backing[g] != none):
			return fmt.Errorf("granule %d: bound %v, backing chunk %d", g, bound, m.backing[g])
		}
	}
	if needed != m.needed || idle != m.idle {
		return fmt.Errorf("%d granules used and %d idle, recorded %d and %d", needed, idle, m.needed, m.idle)
	}
	return nil
}
