package plan

import (
	"cmp"
	"slices"
)

// windowSolver places the allocations of one window under a height limit
// around fixed ones, by the depth-first search of MiniMalloc (Moffitt,
// ASPLOS 2023). Allocations are placed in non-decreasing offset order, each
// at the lowest offset the ones placed before it leave (its minimum offset,
// lifted over fixed ranges), so every layout is reached in one canonical
// form. A branch is cut when an allocation would sit at or above the top of
// another unplaced one at its minimum (that one could fill the gap below),
// or when some section of time can no longer hold its unplaced bytes above
// the current offset and what is placed across it.
type windowSolver struct {
	limit    uint64
	size     []uint64
	lo, hi   []int32 // section span [lo, hi) of each allocation
	overlaps [][]int32
	rank     []int32 // position in the static order
	minOff   []uint64
	placed   []bool
	offset   []uint64
	top      []uint64 // per section: the top of what is placed across it
	total    []uint64 // per section: bytes of unplaced allocations crossing it
	// Fixed ranges: those live over the whole window, merged, and those
	// crossing one of its edges, per section. Fixed allocations live at
	// the same time do not overlap, so the two never do either. Listing
	// each section's edge-crossing ranges would grow as the square of
	// them (thousands of allocations outliving a window, each starting in
	// a section of its own), so they are kept once, in structures that
	// answer what the search asks of a section or of an allocation's
	// lifetime in logarithmic time.
	spanning sortedRanges
	fixed    sectionRanges
	// For lifting: the edge-crossing ranges live in the first section
	// (crossing the window's start) and those live in the last (crossing
	// its end); each family is disjoint. Any other edge-crossing range
	// (none, when the page was sound) is listed per allocation it meets.
	fromStart, toEnd edgeFamily
	otherEdges       [][]byteRange
	steps            int
	// jumpDebt is what lifts lifted over past freeJumps each and the steps
	// have not paid for yet.
	jumpDebt int
	// nodeCost is what one search node costs in steps: it sorts the
	// unplaced allocations and checks every section.
	nodeCost int
	undo     []offsetSave
}

type offsetSave struct {
	index int32 // an allocation, or -1-section for a section top
	value uint64
}

func newWindowSolver(lifetimes []lifetime, placements []placement, w window, moved, fixed []int32, limit uint64) *windowSolver {
	clip := func(t int32) int32 { return min(max(t, w.lo), w.hi) }
	times := []int32{w.lo, w.hi}
	for _, ids := range [][]int32{moved, fixed} {
		for _, id := range ids {
			l := lifetimes[id]
			times = append(times, clip(l.Start), clip(l.End))
		}
	}
	slices.Sort(times)
	times = slices.Compact(times)
	sections := len(times) - 1
	section := func(t int32) int32 {
		i, _ := slices.BinarySearch(times, clip(t))
		return int32(i)
	}
	m := len(moved)
	s := &windowSolver{limit: limit, size: make([]uint64, m), lo: make([]int32, m), hi: make([]int32, m),
		overlaps: make([][]int32, m), rank: make([]int32, m), minOff: make([]uint64, m), placed: make([]bool, m),
		offset: make([]uint64, m), top: make([]uint64, sections), total: make([]uint64, sections),
		nodeCost: 1 + (m+sections)/256}
	var spanning []byteRange
	var edges, fromStart, toEnd, other []sectionRange
	for _, id := range fixed {
		l := lifetimes[id]
		r := byteRange{placements[id].Offset, placements[id].Offset + l.Size}
		if l.Start <= w.lo && l.End >= w.hi {
			spanning = append(spanning, r)
			continue
		}
		e := sectionRange{r, section(l.Start), section(l.End)}
		switch {
		case e.lo >= e.hi:
			continue // live in no section: it meets no moved allocation
		case e.lo == 0:
			fromStart = append(fromStart, e)
		case e.hi == int32(sections):
			toEnd = append(toEnd, e)
		default:
			other = append(other, e)
		}
		edges = append(edges, e)
	}
	s.spanning = newSortedRanges(mergeRanges(spanning), limit)
	s.fixed = newSectionRanges(edges, sections, limit)
	s.fromStart = newEdgeFamily(fromStart, func(e sectionRange) int32 { return e.hi })
	s.toEnd = newEdgeFamily(toEnd, func(e sectionRange) int32 { return -e.lo })
	// Unplaced bytes per section, added up from where each allocation
	// starts and ends (modulo 2^64, as adding section by section is).
	diff := make([]uint64, sections+1)
	for i, id := range moved {
		l := lifetimes[id]
		s.size[i], s.lo[i], s.hi[i] = l.Size, section(l.Start), section(l.End)
		diff[s.lo[i]] += l.Size
		diff[s.hi[i]] -= l.Size
		// moved is in start order.
		for j := i + 1; j < m && lifetimes[moved[j]].Start < l.End; j++ {
			s.overlaps[i] = append(s.overlaps[i], int32(j))
			s.overlaps[j] = append(s.overlaps[j], int32(i))
		}
	}
	var run uint64
	for sec := range s.total {
		run += diff[sec]
		s.total[sec] = run
	}
	if len(other) > 0 {
		s.otherEdges = make([][]byteRange, m)
		for i := range moved {
			var ranges []byteRange
			for _, e := range other {
				if e.lo < s.hi[i] && e.hi > s.lo[i] {
					ranges = append(ranges, e.r)
				}
			}
			s.otherEdges[i] = mergeRanges(ranges)
		}
	}
	return s
}

// lift is the lowest offset from at where allocation b meets no fixed range.
// The ranges it lifts over past freeJumps are a debt (jumpDebt) that solve
// and put pay in steps.
func (s *windowSolver) lift(b int32, at uint64) uint64 {
	size := s.size[b]
	total := 0
	for {
		// Each step skips only offsets where b meets a range, so the
		// order of the steps does not change where they end: the lowest
		// offset from at clear of every range.
		lifted, jumps := liftOver(s.spanning.ranges, at, size)
		total += jumps
		lifted, jumps = s.fromStart.liftOver(lifted, size, s.lo[b])
		total += jumps
		lifted, jumps = s.toEnd.liftOver(lifted, size, -s.hi[b])
		total += jumps
		if s.otherEdges != nil {
			lifted, jumps = liftOver(s.otherEdges[b], lifted, size)
			total += jumps
		}
		if lifted == at {
			s.jumpDebt += max(0, total-freeJumps)
			return at
		}
		at = lifted
	}
}

// liftOver is the lowest offset from at where size bytes meet none of the
// ranges, merged and sorted, and how many ranges it lifted over.
func liftOver(ranges []byteRange, at, size uint64) (uint64, int) {
	i, _ := slices.BinarySearchFunc(ranges, at, func(r byteRange, at uint64) int { return cmp.Compare(r.hi, at+1) })
	jumps := 0
	for _, r := range ranges[i:] {
		if r.lo >= at+size {
			break
		}
		at = r.hi
		jumps++
	}
	return at, jumps
}

// freeJumps is how many fixed ranges one lift lifts over at no cost; past
// it, jumpsPerStep of them cost a step. A lift walks the ranges one by one,
// so thousands of small fixed allocations packed under a window's moved
// ones (a stream freeing its buffers one by one while large ones come and
// go) made every lift cost thousands, uncounted: 100,000 events of that
// took 10 s. No lift of the shipped streams, their variants or 184
// generated ones passes 708 ranges, so their plans do not change.
const (
	freeJumps    = 1024
	jumpsPerStep = 128
)

// preorders are the static orders the solver takes turns with, as in
// MiniMalloc: by the most bytes live in any section the allocation spans
// (its contention), by size, by area, in three priorities.
var preorders = [][3]int{{0, 1, 2}, {1, 2, 0}, {0, 2, 1}}

// solve searches for offsets of the moved allocations, spending at most
// steps; it returns the steps spent and the offsets, nil when none were
// found. Like MiniMalloc it takes turns between the static orders with a
// node limit that doubles each round, so one order's bad early choice does
// not eat the budget.
func (s *windowSolver) solve(steps int) (int, []uint64) {
	for sec := range s.total {
		if s.total[sec] > s.room(int32(sec), 0) {
			return 1, nil // the window's peak is above the limit
		}
	}
	m := len(s.size)
	// Lifts over many ranges cost steps: the window may use up its steps
	// before its search starts.
	for b := range m {
		s.minOff[b] = s.lift(int32(b), 0)
		if s.jumpDebt/jumpsPerStep >= steps {
			return steps, nil
		}
	}
	spent := s.jumpDebt / jumpsPerStep
	s.jumpDebt %= jumpsPerStep
	keys := make([][3]uint64, m)
	most := newRangeMax(s.total)
	for b := range m {
		contention := most.most(int(s.lo[b]), int(s.hi[b]))
		keys[b] = [3]uint64{contention, s.size[b], s.size[b] * uint64(s.hi[b]-s.lo[b])}
	}
	for limit := 2 * m; ; limit *= 2 {
		for _, p := range preorders {
			order := make([]int32, m)
			for b := range order {
				order[b] = int32(b)
			}
			slices.SortStableFunc(order, func(a, b int32) int {
				return cmp.Or(cmp.Compare(keys[b][p[0]], keys[a][p[0]]), cmp.Compare(keys[b][p[1]], keys[a][p[1]]),
					cmp.Compare(keys[b][p[2]], keys[a][p[2]]))
			})
			for r, b := range order {
				s.rank[b] = int32(r)
			}
			s.steps = min(limit, steps-spent)
			budget := s.steps
			found := s.search(m, 0, -1)
			spent += budget - max(s.steps, 0)
			switch {
			case found:
				return spent, s.offset
			case s.steps >= 0:
				// Searched to the end: no canonical layout fits, in any order.
				return spent, nil
			case spent >= steps:
				return spent, nil
			}
		}
	}
}

// room is what section sec has free between floor and the limit.
func (s *windowSolver) room(sec int32, floor uint64) uint64 {
	if floor >= s.limit {
		return 0
	}
	// The bytes of disjoint ranges in [floor, limit) are those below the
	// limit less those below floor.
	free := s.limit - floor
	free -= s.spanning.atLimit - s.spanning.below(floor)
	free -= s.fixed.atLimit[sec] - s.fixed.below(sec, floor)
	return free
}

// search places the left unplaced allocations at offsets no lower than
// last, after the allocation of rank lastRank at last; false when this
// branch (or the steps) ran out.
func (s *windowSolver) search(left int, last uint64, lastRank int32) bool {
	if left == 0 {
		return true
	}
	if s.steps -= s.nodeCost; s.steps < 0 {
		return false
	}
	var cands []int32
	minHeight := ^uint64(0)
	for b := range s.size {
		if !s.placed[b] {
			cands = append(cands, int32(b))
			minHeight = min(minHeight, s.minOff[b]+s.size[b])
		}
	}
	slices.SortFunc(cands, func(a, b int32) int {
		return cmp.Or(cmp.Compare(s.minOff[a], s.minOff[b]), cmp.Compare(s.rank[a], s.rank[b]))
	})
	for _, b := range cands {
		off := s.minOff[b]
		if off >= minHeight {
			break // a gap another allocation would fill
		}
		if off < last || off == last && s.rank[b] < lastRank || off+s.size[b] > s.limit {
			continue // not canonical, or too high
		}
		mark := len(s.undo)
		if s.put(b, off) && s.search(left-1, off, s.rank[b]) {
			return true
		}
		s.take(b, mark)
		if s.steps < 0 {
			return false
		}
	}
	return false
}

// put places b at offset and raises the minimum offsets of the unplaced
// allocations sharing its time; false when some section can no longer hold
// its unplaced bytes.
func (s *windowSolver) put(b int32, offset uint64) bool {
	s.placed[b], s.offset[b] = true, offset
	top := offset + s.size[b]
	for _, o := range s.overlaps[b] {
		if !s.placed[o] && s.minOff[o] < top {
			s.undo = append(s.undo, offsetSave{o, s.minOff[o]})
			s.minOff[o] = s.lift(o, top)
		}
	}
	s.steps -= s.jumpDebt / jumpsPerStep
	s.jumpDebt %= jumpsPerStep
	for sec := s.lo[b]; sec < s.hi[b]; sec++ {
		s.undo = append(s.undo, offsetSave{-1 - sec, s.top[sec]})
		s.top[sec] = max(s.top[sec], top)
		s.total[sec] -= s.size[b]
	}
	for sec := range s.total {
		if s.total[sec] > 0 && s.total[sec] > s.room(int32(sec), max(offset, s.top[sec])) {
			return false
		}
	}
	return true
}

// take undoes put.
func (s *windowSolver) take(b int32, mark int) {
	for len(s.undo) > mark {
		u := s.undo[len(s.undo)-1]
		if u.index >= 0 {
			s.minOff[u.index] = u.value
		} else {
			s.top[-1-u.index] = u.value
		}
		s.undo = s.undo[:len(s.undo)-1]
	}
	for sec := s.lo[b]; sec < s.hi[b]; sec++ {
		s.total[sec] += s.size[b]
	}
	s.placed[b] = false
}
