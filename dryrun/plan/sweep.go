package plan

// assignByStart is assign for the byStart order, made fast: placing in the
// order allocations were made, the placed allocations that overlap the next
// one are exactly those still live when it is made, so a sweep in time
// keeps each page's free holes indexed (pageHoles) as allocations come and
// go instead of gathering the placed ones for every allocation. It places
// exactly as the general builder does, in O(log n) per allocation however
// many are live at once.
func assignByStart(lifetimes []lifetime, pageLimit uint64, bestFit bool, p *progress) assignment {
	n := len(lifetimes)
	out := assignment{Placements: make([]placement, n)}
	// endingAt[t] chains the allocations freed at time t through next.
	endingAt, next := make([]int32, n+1), make([]int32, n)
	for t := range endingAt {
		endingAt[t] = -1
	}
	for k, l := range lifetimes {
		next[k], endingAt[l.End] = endingAt[l.End], int32(k)
	}
	var pages []*pageHoles
	var rooms roomTree
	for k, l := range lifetimes {
		for gone := endingAt[k]; gone >= 0; gone = next[gone] {
			pl := out.Placements[gone]
			pages[pl.Page].release(pl.Offset, pl.Offset+lifetimes[gone].Size)
			rooms.set(int(pl.Page), pages[pl.Page].room())
		}
		page := rooms.first(l.Size)
		if page < 0 {
			page = len(pages)
			pages = append(pages, newPageHoles(max(pageLimit, l.Size), bestFit))
			out.Pages = append(out.Pages, 0)
		}
		offset := pages[page].take(l.Size)
		rooms.set(page, pages[page].room())
		out.Placements[k] = placement{Page: uint32(page), Offset: offset}
		out.Pages[page] = max(out.Pages[page], offset+l.Size)
		p.placed(k)
	}
	p.add(n % progressEvery)
	return out
}

// pageHoles are the free byte ranges of one page while a sweep in time
// places and frees allocations on it: the finite holes between live
// allocations and the open space from top to the page's capacity. Holes
// never touch one another: a freed range joins the holes beside it.
type pageHoles struct {
	capacity uint64
	top      uint64 // the end of the highest live allocation
	bestFit  bool
	// Lowest fit asks for the lowest hole at least so wide: holes keyed
	// by offset, weighing their width. Best fit asks for the narrowest:
	// holes keyed by width, then offset.
	index   *treap
	endOf   map[uint64]uint64 // hole start -> hole end
	startOf map[uint64]uint64 // hole end -> hole start
}

func newPageHoles(capacity uint64, bestFit bool) *pageHoles {
	return &pageHoles{capacity: capacity, bestFit: bestFit, index: newTreap(),
		endOf: make(map[uint64]uint64), startOf: make(map[uint64]uint64)}
}

func (p *pageHoles) key(lo, hi uint64) treapKey {
	if p.bestFit {
		return treapKey{hi - lo, lo}
	}
	return treapKey{lo, 0}
}

func (p *pageHoles) addHole(lo, hi uint64) {
	p.index.insert(p.key(lo, hi), hi-lo)
	p.endOf[lo], p.startOf[hi] = hi, lo
}

func (p *pageHoles) removeHole(lo, hi uint64) {
	p.index.remove(p.key(lo, hi))
	delete(p.endOf, lo)
	delete(p.startOf, hi)
}

// widest is the width of the widest finite hole.
func (p *pageHoles) widest() uint64 {
	if !p.bestFit {
		return p.index.maxWeight()
	}
	k, ok := p.index.last()
	if !ok {
		return 0
	}
	return k.a
}

// room is the largest allocation the page can take now.
func (p *pageHoles) room() uint64 { return max(p.widest(), p.capacity-p.top) }

// take places size bytes, which the page has room for, at the start of the
// lowest (or, with bestFit, the narrowest, lowest of equals) hole that
// holds them, else at the top, and returns the offset.
func (p *pageHoles) take(size uint64) uint64 {
	var k treapKey
	var ok bool
	if p.bestFit {
		k, _, ok = p.index.ceiling(treapKey{size, 0})
		k = treapKey{k.b, 0}
	} else {
		k, _, ok = p.index.firstWeighing(size)
	}
	if !ok {
		at := p.top
		p.top += size
		return at
	}
	lo := k.a
	hi := p.endOf[lo]
	if lo+size == hi {
		p.removeHole(lo, hi)
		return lo
	}
	p.moveHole(lo, hi, lo+size, hi)
	return lo
}

// moveHole turns hole [lo, hi) into [nlo, nhi), which no other hole
// separates from it: in place when the index keeps holes by offset.
func (p *pageHoles) moveHole(lo, hi, nlo, nhi uint64) {
	if p.bestFit {
		p.removeHole(lo, hi)
		p.addHole(nlo, nhi)
		return
	}
	p.index.rekey(p.key(lo, hi), p.key(nlo, nhi), nhi-nlo)
	delete(p.endOf, lo)
	delete(p.startOf, hi)
	p.endOf[nlo], p.startOf[nhi] = nhi, nlo
}

// release frees [lo, hi), joining the holes on either side.
func (p *pageHoles) release(lo, hi uint64) {
	below, hasBelow := p.startOf[lo]
	above, hasAbove := p.endOf[hi]
	switch {
	case hi == p.top && hasBelow:
		p.removeHole(below, lo)
		p.top = below
	case hi == p.top:
		p.top = lo
	case hasBelow && hasAbove:
		p.removeHole(hi, above)
		p.moveHole(below, lo, below, above)
	case hasBelow:
		p.moveHole(below, lo, below, hi)
	case hasAbove:
		p.moveHole(hi, above, lo, above)
	default:
		p.addHole(lo, hi)
	}
}

// roomTree finds the first page with room for an allocation: a max tree
// over the pages' rooms, grown by doubling.
type roomTree struct {
	leaves int
	max    []uint64
}

func (r *roomTree) set(page int, room uint64) {
	if page >= r.leaves {
		old, oldLeaves := r.max, r.leaves
		r.leaves = max(1, 2*r.leaves)
		for page >= r.leaves {
			r.leaves *= 2
		}
		r.max = make([]uint64, 2*r.leaves)
		for i := range oldLeaves {
			r.max[r.leaves+i] = old[oldLeaves+i]
		}
		for i := r.leaves - 1; i >= 1; i-- {
			r.max[i] = max(r.max[2*i], r.max[2*i+1])
		}
	}
	i := r.leaves + page
	r.max[i] = room
	for i /= 2; i >= 1; i /= 2 {
		r.max[i] = max(r.max[2*i], r.max[2*i+1])
	}
}

// first is the lowest page whose room is at least size, -1 if none.
func (r *roomTree) first(size uint64) int {
	if r.leaves == 0 || r.max[1] < size {
		return -1
	}
	i := 1
	for i < r.leaves {
		if r.max[2*i] >= size {
			i = 2 * i
		} else {
			i = 2*i + 1
		}
	}
	return i - r.leaves
}
