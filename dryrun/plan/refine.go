package plan

import (
	"cmp"
	"slices"
)

// DefaultSearchSteps is the search planArena spends lowering its greedy
// placements, shared among them, in steps: one search node each, more for
// a node of a wide window (see windowSolver.nodeCost), so that a step
// costs about the same anywhere, 5 to 15 µs on the CI machine. Counting
// steps rather than time keeps plans the same on every machine.
const DefaultSearchSteps = 1 << 17

// windowSteps bounds the steps of one window search per allocation it
// moves: a layout the search finds at all it finds within a few nodes per
// allocation, so a window it cannot solve stops costing early.
const windowSteps = 64

// maxWindowAllocs bounds the allocations one window search moves: past it
// a search node costs too much for the steps to mean anything.
const maxWindowAllocs = 1024

// windowBuildSteps is what setting up a window search costs in steps
// beyond its nodes: a step for every 256 fixed allocations past
// maxWindowAllocs. Gathering and indexing them costs about that, and a
// window of few moved allocations under thousands live across it (every
// window of a stream that keeps them live throughout) would otherwise
// cost a step, so the steps would bound the windows searched, not the
// work: 60,000 events of such windows took 22 s. No window of the shipped
// or generated streams has more than 981 fixed allocations.
func windowBuildSteps(fixed int) int {
	return max(0, fixed-maxWindowAllocs) / 256
}

// refiner lowers the pages of an assignment one page at a time, each
// independently of the others. A page's height is set by the allocations
// that reach above a target height; the allocations living inside the time
// window around them are taken out and placed again by an exact search,
// with the allocations that cross the window's edges left where they are.
type refiner struct {
	lifetimes []lifetime
	out       assignment
	trial     []placement // scratch of lowerTo, equal to out.Placements between its calls
}

// refineAssignment returns a copy of a whose pages are as low as the search
// could make them within steps, shared equally among the pages, and the
// steps left. It counts the steps it is given into p (which may be nil).
func refineAssignment(lifetimes []lifetime, a assignment, steps int, p *progress) (assignment, int) {
	r := &refiner{lifetimes: lifetimes,
		out: assignment{Pages: slices.Clone(a.Pages), Placements: slices.Clone(a.Placements)}, trial: slices.Clone(a.Placements)}
	onPage := make([][]int32, len(a.Pages))
	for k, pl := range a.Placements {
		onPage[pl.Page] = append(onPage[pl.Page], int32(k))
	}
	for page, ids := range onPage {
		share := steps / (len(onPage) - page)
		spent := share - r.refinePage(uint32(page), ids, share)
		steps -= spent
		p.add(spent)
	}
	p.add(steps)
	return r.out, steps
}

// refinePage lowers page p, whose allocations are ids in start order,
// within steps, and returns the steps left: first straight to the page's
// own peak, then by halving the distance between the lowest height refused
// and the highest reached.
func (r *refiner) refinePage(p uint32, ids []int32, steps int) int {
	floor := r.pagePeak(ids)
	reached := r.out.Pages[p]
	refused := floor - 1
	if reached == floor || steps <= 0 {
		return steps
	}
	tree := newPageTree(r.lifetimes, ids)
	// Stop when the remaining gap is under a thousandth of the page.
	for reached-refused > max(16, reached/1024) && steps > 0 {
		target := floor
		if refused >= floor {
			target = refused + (reached-refused)/2
		}
		// The first try, straight to the peak, gets half the steps.
		budget := max(steps/3, 1)
		if target == floor {
			budget = max(steps/2, 1)
		}
		// Half the try widens windows evenly, half mostly into the past.
		ok, left := r.lowerTo(p, ids, tree, target, budget/2, evenly)
		if !ok {
			ok, left = r.lowerTo(p, ids, tree, target, left+budget-budget/2, leftBiased)
		} else {
			left += budget - budget/2
		}
		steps -= budget - left
		if ok {
			// A failed try proves nothing: the search may land below it.
			reached = r.out.Pages[p]
			refused = min(refused, reached-1)
		} else {
			refused = target
		}
	}
	return steps
}

// pagePeak is the most bytes of ids live at once, found by sorting their
// starts and ends rather than walking the whole stream's time, so that a
// stream of many pages costs no more than its length to refine.
func (r *refiner) pagePeak(ids []int32) uint64 {
	type change struct {
		at    int32
		bytes int64
	}
	changes := make([]change, 0, 2*len(ids))
	for _, id := range ids {
		l := r.lifetimes[id]
		changes = append(changes, change{l.Start, int64(l.Size)}, change{l.End, -int64(l.Size)})
	}
	// Ends before starts at the same time: an allocation freed at t no
	// longer overlaps one made at t.
	slices.SortFunc(changes, func(a, b change) int { return cmp.Or(cmp.Compare(a.at, b.at), cmp.Compare(a.bytes, b.bytes)) })
	var live, peak int64
	for _, c := range changes {
		live += c.bytes
		peak = max(peak, live)
	}
	return uint64(peak)
}

// pageTree is a stab tree over the times at which a page's allocations
// start or end, so its size is the page's, not the stream's.
type pageTree struct {
	times []int32 // sorted, distinct
	tree  *stabTree
}

func newPageTree(lifetimes []lifetime, ids []int32) *pageTree {
	times := make([]int32, 0, 2*len(ids))
	for _, id := range ids {
		times = append(times, lifetimes[id].Start, lifetimes[id].End)
	}
	slices.Sort(times)
	times = slices.Compact(times)
	pt := &pageTree{times: times, tree: newStabTree(len(times))}
	for _, id := range ids {
		lo, _ := slices.BinarySearch(times, lifetimes[id].Start)
		hi, _ := slices.BinarySearch(times, lifetimes[id].End)
		pt.tree.insert(int32(lo), int32(hi), id, nil)
	}
	return pt
}

// stab calls visit for every allocation live at time t.
func (pt *pageTree) stab(t int32, visit func(int32)) {
	// The last page time at or before t: an allocation is live at t
	// exactly when it is live at that time.
	i, found := slices.BinarySearch(pt.times, t)
	if !found {
		i--
	}
	if i >= 0 {
		pt.tree.stab(int32(i), visit)
	}
}

// window is a time range [lo, hi) of a page whose allocations are placed
// again.
type window struct{ lo, hi int32 }

// A window that cannot be solved is widened: by its length into the past,
// and by its length over rightShare into the future. Evenly suits an
// allocation pushed up by what comes after it; leftBiased one pushed up by
// earlier placements, as when a chain of layers needs each layer's output
// at the other end of the page from its input: the window must reach back
// to where the chain went wrong, and the layers after it, which cross its
// far edge, stay fixed. Of widening into the future by a half, a quarter
// and an eighth, a quarter was the first to plan dynamic_inference seed 22
// at its peak (1.0493× with even widening alone); an eighth planned the same
// streams no better.
const (
	evenly     = 1
	leftBiased = 4
)

// lowerTo tries to make page p no higher than target. The allocations
// reaching above it mark time windows (their lifetimes, joined where they
// overlap); the allocations living inside a window are placed again by an
// exact search (windowSolver) around the ones crossing its edges, which
// stay. A window the search cannot solve within its share of steps is
// widened (see leftBiased) until it holds more than maxWindowAllocs. It
// commits only when every window is solved.
func (r *refiner) lowerTo(p uint32, ids []int32, tree *pageTree, target uint64, steps int, rightShare int32) (bool, int) {
	var windows []window
	for _, id := range ids {
		l := r.lifetimes[id]
		if r.out.Placements[id].Offset+l.Size <= target {
			continue
		}
		if n := len(windows); n > 0 && l.Start < windows[n-1].hi {
			windows[n-1].hi = max(windows[n-1].hi, l.End)
		} else {
			windows = append(windows, window{l.Start, l.End})
		}
	}
	n := int32(len(r.lifetimes))
	// r.trial equals r.out.Placements between calls; the moved
	// allocations' offsets are written into it and, unless every window
	// is solved, taken back.
	trial := r.trial
	var changed []int32
	undo := func() {
		for _, id := range changed {
			trial[id] = r.out.Placements[id]
		}
	}
	for i, w := range windows {
		// Each window gets an equal share of the steps left, half of
		// what is left of it for each widening.
		budget := steps / (len(windows) - i)
		for {
			moved, fixed := r.split(ids, tree, w)
			build := windowBuildSteps(len(fixed))
			if len(moved) > maxWindowAllocs || budget <= build {
				undo()
				return false, steps
			}
			steps -= build
			budget -= build
			s := newWindowSolver(r.lifetimes, trial, w, moved, fixed, target)
			spent, offsets := s.solve(min(max(budget/2, 1), windowSteps*len(moved)))
			steps -= spent
			budget -= spent
			if offsets != nil {
				for k, id := range moved {
					trial[id].Offset = offsets[k]
				}
				changed = append(changed, moved...)
				break
			}
			if w.lo == 0 && w.hi == n {
				undo()
				return false, steps
			}
			length := w.hi - w.lo
			w = window{max(0, w.lo-length), min(n, w.hi+length/rightShare)}
		}
	}
	// Windows widened past one another were solved around the ones solved
	// before them; the check guards the commit all the same.
	if !r.pageSound(ids, trial) {
		undo()
		return false, steps
	}
	for _, id := range changed {
		r.out.Placements[id] = trial[id]
	}
	r.out.Pages[p] = r.height(ids)
	return true, steps
}

// split sorts the page's allocations overlapping w into those living
// inside it (moved, in start order) and those crossing its edges (fixed).
func (r *refiner) split(ids []int32, tree *pageTree, w window) (moved, fixed []int32) {
	tree.stab(w.lo, func(id int32) {
		if r.lifetimes[id].Start < w.lo {
			fixed = append(fixed, id)
		}
	})
	from, _ := slices.BinarySearch(ids, w.lo)
	for _, id := range ids[from:] {
		l := r.lifetimes[id]
		if l.Start >= w.hi {
			break
		}
		if l.End <= w.hi {
			moved = append(moved, id)
		} else {
			fixed = append(fixed, id)
		}
	}
	return moved, fixed
}

func (r *refiner) height(ids []int32) uint64 {
	var h uint64
	for _, id := range ids {
		h = max(h, r.out.Placements[id].Offset+r.lifetimes[id].Size)
	}
	return h
}

// pageSound reports whether no two of ids (in start order) live at the same
// time overlap under placements: a sweep in time keeps the live ranges in
// a treap by offset, so each allocation meets only its two neighbours.
func (r *refiner) pageSound(ids []int32, placements []placement) bool {
	byEnd := slices.Clone(ids)
	slices.SortFunc(byEnd, func(a, b int32) int { return cmp.Compare(r.lifetimes[a].End, r.lifetimes[b].End) })
	live := newTreap()
	next := 0
	for _, id := range ids {
		l := r.lifetimes[id]
		for ; next < len(byEnd) && r.lifetimes[byEnd[next]].End <= l.Start; next++ {
			live.remove(treapKey{placements[byEnd[next]].Offset, 0})
		}
		off := placements[id].Offset
		if _, end, ok := live.floorBefore(treapKey{off, 1}); ok && end > off {
			return false
		}
		if above, _, ok := live.ceiling(treapKey{off, 0}); ok && above.a < off+l.Size {
			return false
		}
		live.insert(treapKey{off, 0}, off+l.Size)
	}
	return true
}

// byteRange is a fixed allocation's bytes in a window.
type byteRange struct{ lo, hi uint64 }

// mergeRanges sorts ranges by offset and joins those that touch or overlap,
// in place.
func mergeRanges(ranges []byteRange) []byteRange {
	slices.SortFunc(ranges, func(a, b byteRange) int { return cmp.Compare(a.lo, b.lo) })
	out := ranges[:0]
	for _, r := range ranges {
		if n := len(out); n > 0 && r.lo <= out[n-1].hi {
			out[n-1].hi = max(out[n-1].hi, r.hi)
		} else {
			out = append(out, r)
		}
	}
	return out
}
