package plan

import (
	"cmp"
	"slices"
)

// assignByStart is assign for the byStart order, made fast: placing in the
// order allocations were made, the placed allocations that overlap the next
// one are exactly those still live when it is made, so each page keeps its
// live ranges sorted (they are disjoint) as time advances instead of
// gathering and sorting them for every allocation. It places exactly as
// the general builder does.
func assignByStart(lifetimes []lifetime, pageLimit uint64, bestFit bool) assignment {
	n := len(lifetimes)
	out := assignment{Placements: make([]placement, n)}
	endingAt := make([][]int32, n+1)
	for k, l := range lifetimes {
		endingAt[l.End] = append(endingAt[l.End], int32(k))
	}
	type live struct{ offset, end uint64 }
	var pages [][]live
	var capacity []uint64
	find := func(page []live, offset uint64) int {
		i, _ := slices.BinarySearchFunc(page, offset, func(l live, o uint64) int { return cmp.Compare(l.offset, o) })
		return i
	}
	for k, l := range lifetimes {
		for _, gone := range endingAt[k] {
			pl := out.Placements[gone]
			page := pages[pl.Page]
			i := find(page, pl.Offset)
			pages[pl.Page] = slices.Delete(page, i, i+1)
		}
		page, offset := len(pages), uint64(0)
		for p, spans := range pages {
			at, found := uint64(0), false
			bestWidth := ^uint64(0)
			prev := uint64(0)
			for _, s := range spans {
				if w := s.offset - prev; w >= l.Size {
					if !bestFit {
						at, found = prev, true
						break
					}
					if w < bestWidth {
						at, bestWidth, found = prev, w, true
					}
				}
				prev = s.end
			}
			if !found {
				at = prev
			}
			if at+l.Size <= capacity[p] {
				page, offset = p, at
				break
			}
		}
		if page == len(pages) {
			pages = append(pages, nil)
			capacity = append(capacity, max(pageLimit, l.Size))
			out.Pages = append(out.Pages, 0)
		}
		out.Placements[k] = placement{Page: uint32(page), Offset: offset}
		out.Pages[page] = max(out.Pages[page], offset+l.Size)
		i := find(pages[page], offset)
		pages[page] = slices.Insert(pages[page], i, live{offset, offset + l.Size})
	}
	return out
}
