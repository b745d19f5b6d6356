package plan

import (
	"cmp"
	"math"
	"slices"
)

// sectionRange is a fixed allocation's bytes in a window and the sections
// [lo, hi) it lives in.
type sectionRange struct {
	r      byteRange
	lo, hi int32
}

// sortedRanges are disjoint byte ranges in offset order, with the bytes
// they cover below the window solver's limit.
type sortedRanges struct {
	ranges  []byteRange
	prefix  []uint64 // prefix[k]: the bytes of the first k ranges
	atLimit uint64
}

func newSortedRanges(ranges []byteRange, limit uint64) sortedRanges {
	sr := sortedRanges{ranges: ranges, prefix: make([]uint64, len(ranges)+1)}
	for k, r := range ranges {
		sr.prefix[k+1] = sr.prefix[k] + (r.hi - r.lo)
	}
	sr.atLimit = sr.below(limit)
	return sr
}

// below is how many bytes of the ranges lie under offset x.
func (sr *sortedRanges) below(x uint64) uint64 {
	k, _ := slices.BinarySearchFunc(sr.ranges, x, func(r byteRange, x uint64) int { return cmp.Compare(r.lo, x) })
	if k == 0 {
		return 0
	}
	sum := sr.prefix[k]
	if hi := sr.ranges[k-1].hi; hi > x {
		sum -= hi - x
	}
	return sum
}

// sectionRanges are the edge-crossing fixed ranges of a window, and for
// each section the bytes of those live in it below an offset: a persistent
// segment tree over the ranges in offset order, one version per section,
// each made from the one before by the ranges that start or stop living.
// It costs O(r log r) for r ranges, where lists per section cost up to
// r² (r ranges each outliving the window from a section of its own).
type sectionRanges struct {
	los, his []uint64    // the leaves: the ranges in offset order
	nodes    []rangeNode // nodes[0] is the empty tree
	roots    []int32     // per section
	atLimit  []uint64    // per section: the bytes below the limit
}

type rangeNode struct {
	left, right int32
	bytes       uint64 // the bytes of the ranges present under the node
}

// newSectionRanges indexes edges, of which those live in one section are
// disjoint, over sections sections.
func newSectionRanges(edges []sectionRange, sections int, limit uint64) sectionRanges {
	t := sectionRanges{nodes: make([]rangeNode, 1), roots: make([]int32, sections), atLimit: make([]uint64, sections)}
	byOffset := make([]int32, len(edges))
	for i := range byOffset {
		byOffset[i] = int32(i)
	}
	slices.SortFunc(byOffset, func(a, b int32) int {
		return cmp.Or(cmp.Compare(edges[a].r.lo, edges[b].r.lo), cmp.Compare(edges[a].r.hi, edges[b].r.hi), cmp.Compare(a, b))
	})
	leaf := make([]int, len(edges))
	t.los, t.his = make([]uint64, len(edges)), make([]uint64, len(edges))
	for k, i := range byOffset {
		leaf[i] = k
		t.los[k], t.his[k] = edges[i].r.lo, edges[i].r.hi
	}
	byStart, byEnd := slices.Clone(byOffset), slices.Clone(byOffset)
	slices.SortStableFunc(byStart, func(a, b int32) int { return cmp.Compare(edges[a].lo, edges[b].lo) })
	slices.SortStableFunc(byEnd, func(a, b int32) int { return cmp.Compare(edges[a].hi, edges[b].hi) })
	root := int32(0)
	for sec, i, j := int32(0), 0, 0; int(sec) < sections; sec++ {
		for ; j < len(byEnd) && edges[byEnd[j]].hi <= sec; j++ {
			if e := edges[byEnd[j]]; e.lo < e.hi {
				root = t.set(root, 0, len(edges), leaf[byEnd[j]], 0)
			}
		}
		for ; i < len(byStart) && edges[byStart[i]].lo <= sec; i++ {
			if e := edges[byStart[i]]; e.lo < e.hi && e.hi > sec {
				root = t.set(root, 0, len(edges), leaf[byStart[i]], e.r.hi-e.r.lo)
			}
		}
		t.roots[sec] = root
		t.atLimit[sec] = t.below(sec, limit)
	}
	return t
}

// set is the tree under node with leaf pos holding bytes (0: absent),
// copied along the path.
func (t *sectionRanges) set(node int32, lo, hi, pos int, bytes uint64) int32 {
	n := t.nodes[node]
	if hi-lo == 1 {
		n.bytes = bytes
	} else {
		mid := (lo + hi) / 2
		if pos < mid {
			n.left = t.set(n.left, lo, mid, pos, bytes)
		} else {
			n.right = t.set(n.right, mid, hi, pos, bytes)
		}
		n.bytes = t.nodes[n.left].bytes + t.nodes[n.right].bytes
	}
	t.nodes = append(t.nodes, n)
	return int32(len(t.nodes) - 1)
}

// below is how many bytes of the ranges live in section sec lie under
// offset x: all of those starting under x, less what the last of them
// (the only one that can, being disjoint from the others) reaches above x.
func (t *sectionRanges) below(sec int32, x uint64) uint64 {
	p, _ := slices.BinarySearch(t.los, x) // the leaves starting under x
	var sum uint64
	last, lastLo, lastHi := int32(0), 0, 0 // the rightmost subtree summed that holds a range
	node, lo, hi := t.roots[sec], 0, len(t.los)
	for node != 0 && p > lo {
		if p >= hi {
			if b := t.nodes[node].bytes; b > 0 {
				sum += b
				last, lastLo, lastHi = node, lo, hi
			}
			break
		}
		mid := (lo + hi) / 2
		n := t.nodes[node]
		if p > mid {
			if b := t.nodes[n.left].bytes; b > 0 {
				sum += b
				last, lastLo, lastHi = n.left, lo, mid
			}
			node, lo = n.right, mid
		} else {
			node, hi = n.left, mid
		}
	}
	if last == 0 {
		return sum
	}
	for lastHi-lastLo > 1 {
		mid := (lastLo + lastHi) / 2
		if r := t.nodes[last].right; t.nodes[r].bytes > 0 {
			last, lastLo = r, mid
		} else {
			last, lastHi = t.nodes[last].left, mid
		}
	}
	if h := t.his[lastLo]; h > x {
		sum -= h - x
	}
	return sum
}

// edgeFamily are edge-crossing fixed ranges all live in one section, so
// disjoint, in offset order, each with a key: a tree finds the lowest of
// them above an offset whose key passes a threshold, the ones whose
// lifetime meets a moved allocation's.
type edgeFamily struct {
	ranges []byteRange
	keys   maxTree
}

func newEdgeFamily(edges []sectionRange, key func(sectionRange) int32) edgeFamily {
	slices.SortFunc(edges, func(a, b sectionRange) int { return cmp.Compare(a.r.lo, b.r.lo) })
	f := edgeFamily{ranges: make([]byteRange, len(edges))}
	keys := make([]int32, len(edges))
	for i, e := range edges {
		f.ranges[i], keys[i] = e.r, key(e)
	}
	f.keys = newMaxTree32(keys)
	return f
}

// liftOver is the lowest offset from at where size bytes meet none of the
// ranges whose key is above the given one, and how many ranges it lifted
// over.
func (f *edgeFamily) liftOver(at, size uint64, above int32) (uint64, int) {
	// The first range ending above at: the lowest that can meet
	// [at, at+size). Past a range lifted over, it is the next one.
	i, _ := slices.BinarySearchFunc(f.ranges, at, func(r byteRange, at uint64) int { return cmp.Compare(r.hi, at+1) })
	for jumps := 0; ; jumps++ {
		j := f.keys.firstAbove(i, above)
		if j < 0 || f.ranges[j].lo >= at+size {
			return at, jumps
		}
		at, i = f.ranges[j].hi, j+1
	}
}

// maxTree is a segment tree of the largest of int32 values.
type maxTree struct {
	n, size int
	max     []int32
}

func newMaxTree32(values []int32) maxTree {
	size := 1
	for size < len(values) {
		size *= 2
	}
	t := maxTree{n: len(values), size: size, max: make([]int32, 2*size)}
	for i := range t.max[size:] {
		t.max[size+i] = math.MinInt32
	}
	copy(t.max[size:], values)
	for i := size - 1; i >= 1; i-- {
		t.max[i] = max(t.max[2*i], t.max[2*i+1])
	}
	return t
}

// firstAbove is the first index from i whose value is above the given one, -1 if
// none is.
func (t *maxTree) firstAbove(i int, above int32) int {
	if i >= t.n {
		return -1
	}
	node := i + t.size
	for {
		if t.max[node] > above {
			for node < t.size {
				if t.max[2*node] > above {
					node = 2 * node
				} else {
					node = 2*node + 1
				}
			}
			return node - t.size
		}
		for node&1 == 1 {
			node >>= 1
		}
		if node == 0 {
			return -1
		}
		node++
	}
}

// rangeMax is a segment tree of the largest of uint64 values over ranges.
type rangeMax struct {
	size int
	top  []uint64
}

func newRangeMax(values []uint64) rangeMax {
	size := max(1, len(values))
	t := rangeMax{size: size, top: make([]uint64, 2*size)}
	copy(t.top[size:], values)
	for i := size - 1; i >= 1; i-- {
		t.top[i] = max(t.top[2*i], t.top[2*i+1])
	}
	return t
}

// most is the largest value in [lo, hi), 0 when the range is empty.
func (t *rangeMax) most(lo, hi int) uint64 {
	var m uint64
	for l, r := lo+t.size, hi+t.size; l < r; l, r = l/2, r/2 {
		if l&1 == 1 {
			m = max(m, t.top[l])
			l++
		}
		if r&1 == 1 {
			r--
			m = max(m, t.top[r])
		}
	}
	return m
}
