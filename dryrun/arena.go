package dryrun

import (
	"cmp"
	"fmt"
	"slices"
)

// Lifetime is one allocation of a stream as the offline arena assignment sees
// it: its aligned size and the half-open interval [Start, End) of allocation
// ordinals during which it is live. Allocation k starts at k; it ends at the
// number of allocations made before it was freed (the stream length if it
// never was), so two allocations overlap in time exactly when each starts
// before the other ends.
type Lifetime struct {
	Size       uint64
	Start, End int32
}

// Placement is where the assignment put one allocation: a page and an offset
// inside it.
type Placement struct {
	Page   uint32
	Offset uint64
}

// Assignment is an offline arena assignment: page sizes and, per allocation,
// its placement. No two allocations that overlap in time overlap in address,
// and every allocation lies inside its page.
type Assignment struct {
	Pages      []uint64
	Placements []Placement
}

// Reserved is the sum of the page sizes: what the assignment holds on the
// device once every page is in use.
func (a Assignment) Reserved() uint64 {
	var sum uint64
	for _, p := range a.Pages {
		sum += p
	}
	return sum
}

// Lifetimes computes the lifetimes of a trace's allocations, sizes rounded
// up to alignment.
func Lifetimes(t *Trace, alignment uint64) []Lifetime {
	out := make([]Lifetime, t.Allocations)
	allocs := int32(0)
	for _, e := range t.Events {
		if e.Op == OpAlloc {
			out[e.Index] = Lifetime{Size: alignUp(e.Size, alignment), Start: allocs, End: -1}
			allocs++
		} else {
			out[e.Index].End = allocs
		}
	}
	for i := range out {
		if out[i].End < 0 {
			out[i].End = allocs
		}
	}
	return out
}

func alignUp(n, alignment uint64) uint64 {
	if alignment <= 1 {
		return n
	}
	return (n + alignment - 1) / alignment * alignment
}

// PeakOverlap is the most bytes of the lifetimes live at once: the floor
// under any assignment's Reserved.
func PeakOverlap(lifetimes []Lifetime) uint64 {
	delta := make([]int64, len(lifetimes)+1)
	for _, l := range lifetimes {
		delta[l.Start] += int64(l.Size)
		delta[l.End] -= int64(l.Size)
	}
	var live, peak int64
	for _, d := range delta {
		live += d
		peak = max(peak, live)
	}
	return uint64(peak)
}

// AssignOrder is the order in which the greedy assignment places allocations.
type AssignOrder int

const (
	// BySize places the largest allocations first.
	BySize AssignOrder = iota
	// ByArea places the allocations with the largest size × lifetime first.
	ByArea
)

// AssignArena places every allocation at the lowest offset of the first page
// where it collides with no already placed allocation that overlaps it in
// time, taking allocations in the given order. Pages hold at most pageLimit
// bytes; an allocation larger than that opens a page of its own size (which
// later allocations may share). Page sizes are the highest end placed in them.
//
// Cost: for each allocation, the placed allocations live at its start plus
// those starting during its lifetime — no quadratic scan over the stream.
func AssignArena(lifetimes []Lifetime, pageLimit uint64, order AssignOrder) (Assignment, error) {
	n := len(lifetimes)
	if pageLimit == 0 {
		return Assignment{}, fmt.Errorf("dryrun: arena page limit is 0")
	}
	for k, l := range lifetimes {
		if l.Size == 0 || l.Start != int32(k) || l.End <= l.Start || int(l.End) > n {
			return Assignment{}, fmt.Errorf("dryrun: lifetime %d is %+v, want a non-zero size and %d <= start < end <= %d", k, l, k, n)
		}
	}
	ids := make([]int32, n)
	for i := range ids {
		ids[i] = int32(i)
	}
	key := func(l Lifetime) uint64 {
		if order == ByArea {
			return l.Size * uint64(l.End-l.Start)
		}
		return l.Size
	}
	slices.SortFunc(ids, func(a, b int32) int {
		la, lb := lifetimes[a], lifetimes[b]
		if c := cmp.Compare(key(lb), key(la)); c != 0 {
			return c
		}
		if c := cmp.Compare(lb.End-lb.Start, la.End-la.Start); c != 0 {
			return c
		}
		return cmp.Compare(a, b)
	})

	const unplaced = ^uint32(0)
	out := Assignment{Placements: make([]Placement, n)}
	for i := range out.Placements {
		out.Placements[i].Page = unplaced
	}
	var capacity []uint64 // per page: pageLimit, or the size of the oversized allocation that opened it
	tree := newStabTree(n)
	type span struct{ offset, end uint64 }
	var byPage [][]span
	for _, id := range ids {
		l := lifetimes[id]
		for p := range byPage {
			byPage[p] = byPage[p][:0]
		}
		collect := func(j int32) {
			pl := out.Placements[j]
			if pl.Page == unplaced {
				return
			}
			byPage[pl.Page] = append(byPage[pl.Page], span{pl.Offset, pl.Offset + lifetimes[j].Size})
		}
		// Placed allocations live at l.Start, then those starting inside l.
		tree.stab(l.Start, func(j int32) {
			if lifetimes[j].End > l.Start {
				collect(j)
			}
		})
		for j := l.Start + 1; j < l.End; j++ {
			collect(j)
		}
		placed := false
		for p := range byPage {
			spans := byPage[p]
			slices.SortFunc(spans, func(a, b span) int { return cmp.Compare(a.offset, b.offset) })
			offset := uint64(0)
			for _, s := range spans {
				if s.offset >= offset+l.Size {
					break
				}
				offset = max(offset, s.end)
			}
			if offset+l.Size <= capacity[p] {
				out.Placements[id] = Placement{Page: uint32(p), Offset: offset}
				out.Pages[p] = max(out.Pages[p], offset+l.Size)
				placed = true
				break
			}
		}
		if !placed {
			out.Placements[id] = Placement{Page: uint32(len(byPage)), Offset: 0}
			out.Pages = append(out.Pages, l.Size)
			capacity = append(capacity, max(pageLimit, l.Size))
			byPage = append(byPage, nil)
		}
		tree.insert(l.Start, l.End, id)
	}
	return out, nil
}

// stabTree is a segment tree over allocation ordinals: an interval is stored
// in the O(log n) nodes that cover it exactly, so the intervals containing a
// point are those stored on the path from the root to its leaf.
type stabTree struct {
	size  int
	nodes [][]int32
}

func newStabTree(n int) *stabTree {
	size := 1
	for size < n {
		size *= 2
	}
	return &stabTree{size: size, nodes: make([][]int32, 2*size)}
}

// insert stores id over [lo, hi).
func (t *stabTree) insert(lo, hi, id int32) {
	l, r := int(lo)+t.size, int(hi)+t.size
	for l < r {
		if l&1 == 1 {
			t.nodes[l] = append(t.nodes[l], id)
			l++
		}
		if r&1 == 1 {
			r--
			t.nodes[r] = append(t.nodes[r], id)
		}
		l /= 2
		r /= 2
	}
}

// stab calls visit for every id whose interval contains point.
func (t *stabTree) stab(point int32, visit func(int32)) {
	for i := int(point) + t.size; i >= 1; i /= 2 {
		for _, id := range t.nodes[i] {
			visit(id)
		}
	}
}
