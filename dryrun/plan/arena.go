package plan

import (
	"cmp"
	"fmt"
	goruntime "runtime"
	"slices"
	"sync"

	"github.com/vkrt/vkrt/dryrun/trace"
	"github.com/vkrt/vkrt/memory"
)

// lifetime is one allocation of a stream as the offline arena assignment sees
// it: its aligned size and the half-open interval [Start, End) of allocation
// ordinals during which it is live. Allocation k starts at k; it ends at the
// number of allocations made before it was freed (the stream length if it
// never was), so two allocations overlap in time exactly when each starts
// before the other ends.
type lifetime struct {
	Size       uint64
	Start, End int32
}

// placement is where the assignment put one allocation: a page and an offset
// inside it.
type placement struct {
	Page   uint32
	Offset uint64
}

// assignment is an offline arena assignment: page sizes and, per allocation,
// its placement. No two allocations that overlap in time overlap in address,
// and every allocation lies inside its page.
type assignment struct {
	Pages      []uint64
	Placements []placement
}

// Reserved is the sum of the page sizes: what the assignment holds on the
// device once every page is in use.
func (a assignment) Reserved() uint64 {
	var sum uint64
	for _, p := range a.Pages {
		sum += p
	}
	return sum
}

// lifetimesOf computes the lifetimes of a trace's allocations, sizes rounded
// up to alignment.
func lifetimesOf(t *trace.Trace, alignment uint64) []lifetime {
	out := make([]lifetime, t.Allocations)
	allocs := int32(0)
	for _, e := range t.Events {
		if e.Op == trace.OpAlloc {
			out[e.Index] = lifetime{Size: alignUp(e.Size, alignment), Start: allocs, End: -1}
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

// peakOverlap is the most bytes of the lifetimes live at once: the floor
// under any assignment's Reserved.
func peakOverlap(lifetimes []lifetime) uint64 {
	return peakLive(lifetimes, len(lifetimes)+1)
}

// peakLive is peakOverlap of lifetimes whose ends are below times.
func peakLive(lifetimes []lifetime, times int) uint64 {
	delta := make([]int64, times)
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

// assignOrder is the order in which the greedy assignment places allocations.
type assignOrder int

const (
	// bySize places the largest allocations first.
	bySize assignOrder = iota
	// byStart places allocations in the order they were made, like an
	// allocator that knows when each will be freed: a chain of slightly
	// growing buffers (a KV cache rebuilt each token) walks through the
	// holes its predecessors leave.
	byStart
	// byLifetime places the longest-lived allocations first, so weights and
	// optimizer state pack at the bottom of the pages and the short-lived
	// activations of each step share what lies above.
	byLifetime
	// bySizeThenStart places the largest allocations first and allocations
	// of equal size in the order they were made: for equal sizes that is an
	// optimal interval colouring, as few slots as are ever live at once.
	bySizeThenStart
	// longThenStart places the allocations living longer than a sixteenth
	// of the stream first, largest first, then the others in the order they
	// were made.
	longThenStart
	// longThenSize places the allocations living longer than a quarter of
	// the stream first, then the others; largest first in both groups.
	longThenSize
)

// assignArena places every allocation at the lowest (or tightest) hole of
// the first page where it collides with no already placed allocation that
// overlaps it in time, taking allocations in the strategy's order. Pages hold
// at most pageLimit bytes; an allocation larger than that opens a page of its
// own size (which later allocations may share). Page sizes are the highest
// end placed in them.
//
// Cost: for each allocation, the placed allocations live at its start plus
// those starting during its lifetime — no quadratic scan over the stream.
func assignArena(lifetimes []lifetime, pageLimit uint64, s strategy) (assignment, error) {
	if err := checkLifetimes(lifetimes, pageLimit); err != nil {
		return assignment{}, err
	}
	a := assign(lifetimes, pageLimit, s, nil)
	if s.Search {
		a, _ = refineAssignment(lifetimes, a, DefaultSearchSteps, nil)
	}
	return a, nil
}

// placementOrder sorts the allocation indices the way order says.
func placementOrder(lifetimes []lifetime, ids []int32, order assignOrder) []int32 {
	if order == longThenStart || order == longThenSize {
		minLife, restOrder := int32(len(lifetimes)/longThenStartShare), byStart
		if order == longThenSize {
			minLife, restOrder = int32(len(lifetimes)/longThenSizeShare), bySize
		}
		long, rest := []int32{}, []int32{}
		for _, id := range ids {
			if l := lifetimes[id]; l.End-l.Start >= minLife {
				long = append(long, id)
			} else {
				rest = append(rest, id)
			}
		}
		return append(placementOrder(lifetimes, long, bySize), placementOrder(lifetimes, rest, restOrder)...)
	}
	slices.SortFunc(ids, func(a, b int32) int {
		la, lb := lifetimes[a], lifetimes[b]
		switch order {
		case byStart:
			return cmp.Compare(a, b)
		case byLifetime:
			if c := cmp.Compare(lb.End-lb.Start, la.End-la.Start); c != 0 {
				return c
			}
		}
		if c := cmp.Compare(lb.Size, la.Size); c != 0 {
			return c
		}
		if order == bySizeThenStart {
			return cmp.Compare(a, b)
		}
		if c := cmp.Compare(lb.End-lb.Start, la.End-la.Start); c != 0 {
			return c
		}
		return cmp.Compare(a, b)
	})
	return ids
}

// The long-lived-first orders take first the allocations living longer
// than a share of the stream. Measured greedy alone (no search) against the
// peak, on the shipped traces and 12 generated streams of each shape:
//   - long-lived first then by size, living over 1/2, 1/4, 1/8, 1/16 of the
//     stream: gpt2_train 1.0606×, 1.0000×, 1.0731×, 1.0730×; generated mean
//     1.0224×, 1.0249×, 1.0278×, 1.0296×. A quarter is what takes gpt2_train
//     (weights, then optimizer state made on the first step, then the
//     activations of each step) to its peak, which no other order reaches.
//   - long-lived first then by start, looking 16 ahead, over 1/4, 1/8, 1/16,
//     1/32: generated mean 1.0328×, 1.0307×, 1.0268×, 1.0356×, worst
//     1.3640×, 1.2401×, 1.2849×, 1.3559×; gpt2_train 1.0677×, 1.0550×,
//     1.0556×, 1.0556×, resnet50_train 1.0351×, 1.0095×, 1.0094×, 1.0238×.
const (
	longThenSizeShare  = 4
	longThenStartShare = 16
)

func allIDs(n int) []int32 {
	ids := make([]int32, n)
	for i := range ids {
		ids[i] = int32(i)
	}
	return ids
}

const unplaced = ^uint32(0)

// arenaBuilder places allocations one at a time.
type arenaBuilder struct {
	lifetimes []lifetime
	pageLimit uint64
	out       assignment
	capacity  []uint64 // per page: pageLimit, or the size of the oversized allocation that opened it
	tree      *stabTree
	byPage    []pageSpans // scratch: placed spans overlapping the allocation being placed, per page
	// Allocations living at least longLife ordinals are not in the tree but
	// in long, per page, sorted by offset.
	longLife             int32
	long                 [][]int32
	longStarts, longEnds []uint64 // scratch
	merged               []uint64 // scratch
	trial                *arenaTrial
	spareTrial           *arenaTrial
}

func newArenaBuilder(lifetimes []lifetime, pageLimit uint64) *arenaBuilder {
	b := &arenaBuilder{lifetimes: lifetimes, pageLimit: pageLimit, tree: newStabTree(len(lifetimes)),
		longLife: longLifeOf(len(lifetimes))}
	b.out.Placements = make([]placement, len(lifetimes))
	for i := range b.out.Placements {
		b.out.Placements[i].Page = unplaced
	}
	return b
}

// longLifeOf is the lifetime from which the builder keeps an allocation
// apart, per page in offset order, rather than in the stab tree: an eighth
// of a stream of n allocations. Where an allocation is kept changes how fast
// the builder gathers, never where it places: the gathered spans are the
// same either way.
func longLifeOf(n int) int32 { return max(2, int32(n/8)) }

func (b *arenaBuilder) isLong(j int32) bool {
	l := b.lifetimes[j]
	return l.End-l.Start >= b.longLife
}

func (b *arenaBuilder) collect(j int32) {
	pl := b.out.Placements[j]
	if pl.Page == unplaced || b.isLong(j) {
		return
	}
	ps := &b.byPage[pl.Page]
	ps.starts = append(ps.starts, pl.Offset)
	ps.ends = append(ps.ends, pl.Offset+b.lifetimes[j].Size)
}

// place puts allocation id at the lowest (or, with bestFit, the tightest)
// hole of the first page that holds it, among the placed allocations that
// overlap it in time.
func (b *arenaBuilder) place(id int32, bestFit bool) {
	size := b.lifetimes[id].Size
	b.gather(id)
	page, offset := uint32(len(b.byPage)), uint64(0)
	for p := range b.byPage {
		at := b.byPage[p].lowestGap(size)
		if bestFit {
			at = b.byPage[p].bestGap(size)
		}
		if at+size <= b.capacity[p] {
			page, offset = uint32(p), at
			break
		}
	}
	b.placeAt(id, page, offset)
}

// gather fills byPage with the spans of the placed allocations that overlap
// allocation id in time, their starts and their ends each sorted.
func (b *arenaBuilder) gather(id int32) {
	l := b.lifetimes[id]
	for p := range b.byPage {
		b.byPage[p].starts, b.byPage[p].ends = b.byPage[p].starts[:0], b.byPage[p].ends[:0]
	}
	// Placed allocations live at l.Start, then those starting inside l.
	b.tree.stab(l.Start, b.collect)
	for j := l.Start + 1; j < l.End; j++ {
		b.collect(j)
	}
	for p := range b.byPage {
		ps := &b.byPage[p]
		slices.Sort(ps.starts)
		slices.Sort(ps.ends)
		// The long-lived spans of the page, kept sorted by offset, that
		// overlap l; their ends are nearly sorted.
		starts, ends := b.longStarts[:0], b.longEnds[:0]
		for _, j := range b.long[p] {
			if o := b.lifetimes[j]; o.Start < l.End && o.End > l.Start {
				off := b.out.Placements[j].Offset
				starts, ends = append(starts, off), append(ends, off+o.Size)
			}
		}
		slices.Sort(ends)
		b.longStarts, b.longEnds = starts, ends
		if len(starts) > 0 {
			b.merged = mergeSorted(b.merged[:0], ps.starts, starts)
			ps.starts, b.merged = b.merged, ps.starts
			b.merged = mergeSorted(b.merged[:0], ps.ends, ends)
			ps.ends, b.merged = b.merged, ps.ends
		}
	}
}

// mergeSorted appends the merge of two sorted lists to dst.
func mergeSorted(dst, a, b []uint64) []uint64 {
	i, j := 0, 0
	for i < len(a) && j < len(b) {
		if a[i] <= b[j] {
			dst = append(dst, a[i])
			i++
		} else {
			dst = append(dst, b[j])
			j++
		}
	}
	dst = append(dst, a[i:]...)
	return append(dst, b[j:]...)
}

// insertLong files a placed long-lived allocation under its page.
func (b *arenaBuilder) insertLong(page uint32, id int32) {
	off := b.out.Placements[id].Offset
	list := b.long[page]
	i, _ := slices.BinarySearchFunc(list, off, func(j int32, o uint64) int { return cmp.Compare(b.out.Placements[j].Offset, o) })
	b.long[page] = slices.Insert(list, i, id)
}

// removeLong takes a long-lived allocation off its page's list.
func (b *arenaBuilder) removeLong(page uint32, id int32) {
	b.long[page] = slices.DeleteFunc(b.long[page], func(j int32) bool { return j == id })
}

// placeAt puts allocation id at offset of page; page may be one past the
// last, which opens a page.
func (b *arenaBuilder) placeAt(id int32, page uint32, offset uint64) {
	l := b.lifetimes[id]
	if int(page) == len(b.byPage) {
		b.out.Pages = append(b.out.Pages, 0)
		b.capacity = append(b.capacity, max(b.pageLimit, l.Size))
		b.byPage = append(b.byPage, pageSpans{})
		b.long = append(b.long, nil)
	}
	b.out.Placements[id] = placement{Page: page, Offset: offset}
	b.out.Pages[page] = max(b.out.Pages[page], offset+l.Size)
	if b.isLong(id) {
		// Long-lived allocations overlap most others: they are kept per
		// page in offset order rather than gathered and sorted every time.
		b.insertLong(page, id)
		if b.trial != nil {
			b.trial.longs = append(b.trial.longs, id)
		}
		return
	}
	if b.trial != nil {
		b.trial.ids = append(b.trial.ids, id)
		b.tree.insert(l.Start, l.End, id, &b.trial.nodes)
	} else {
		b.tree.insert(l.Start, l.End, id, nil)
	}
}

// strategy is one way to order and fit the allocations of a stream.
type strategy struct {
	Order assignOrder
	// BestFit puts an allocation in the tightest hole that holds it instead
	// of the lowest.
	BestFit bool
	// Lookahead, when non-zero, has an allocation of at least a hundredth of
	// the peak try both ends of its holes, lay the next Lookahead
	// allocations greedily after each, and keep the place after which they
	// reach least high: a chain of layers can then alternate where their
	// large buffers go instead of stacking the buffers that outlive a layer.
	Lookahead int
	// Search lowers the greedy placement's pages by the window search
	// (refineAssignment), with DefaultSearchSteps.
	Search bool
}

func (s strategy) String() string {
	fit := "lowest fit"
	if s.BestFit {
		fit = "best fit"
	}
	if s.Lookahead > 0 {
		fit = fmt.Sprintf("looking %d ahead", s.Lookahead)
	}
	if s.Search {
		fit += ", lowered by search"
	}
	return s.Order.String() + ", " + fit
}

func (o assignOrder) String() string {
	switch o {
	case bySize:
		return "by size"
	case byStart:
		return "by start"
	case byLifetime:
		return "by lifetime"
	case bySizeThenStart:
		return "by size then start"
	case longThenStart:
		return "long-lived first, then by start"
	case longThenSize:
		return "long-lived first, then by size"
	}
	return fmt.Sprintf("assignOrder(%d)", int(o))
}

// lookaheadHorizon is how many placements a lookahead lays after each
// candidate place. Measured as above, horizons of 4, 8, 16 and 32:
// bert_dynamic 1.1730×, 1.1730×, 1.1155×, 1.1152×, generated mean 1.0259×,
// 1.0240×, 1.0268×, 1.0389×: 16 is the shortest that sees a layer's
// feed-forward step from its input, and longer ones only blur the choice.
const lookaheadHorizon = 16

// planStrategies are the placements planArena compares, most useful first.
// Size first is the classic for layer graphs; start order follows a chain of
// growing buffers (a KV cache rebuilt every token) through the same holes;
// long-lived first with lookahead lets a chain of layers alternate where
// their large buffers go; lifetime first packs weights and optimizer state
// under the activations.
var planStrategies = []strategy{
	{Order: bySize},
	{Order: byStart},
	{Order: byStart, BestFit: true},
	{Order: longThenStart, Lookahead: lookaheadHorizon},
	{Order: bySizeThenStart},
	{Order: longThenSize},
	{Order: byLifetime},
}

// The greedy placements other than the sweeps in start order gather, for
// each allocation, the placed ones that overlap it in time: their cost
// grows with gatherVisits, not with the stream's length, and an arena of a
// million allocations live at once would take hours. Timed one by one on
// the shipped traces on the 2-core CI machine, such a placement costs 2 to
// 50 ns a visit, 10 on average: llama_generate has 81M visits and takes
// 0.8 to 1.5 s per placement, gpt2_train 11M and 0.04 to 0.3 s. So a stream
// gets every placement up to allVisits (the seven of them then stay under
// about 2 s), the first four (both sweeps among them) up to generalVisits
// (134M, which keeps llama_generate's four; about 3 s at worst), and past
// that only the sweeps, which cost O(log n) an allocation however many are
// live: 10,000 allocations live at once (188M visits) plan in 0.02 s
// instead of 2.6 s (BenchmarkPlanManyLive).
const (
	allVisits     = 1 << 25
	generalVisits = 1 << 27
)

// gatherVisits bounds how many placed allocations a greedy placement visits
// over a stream: each allocation meets those live when it starts and those
// starting while it lives, and the long-lived ones, kept apart, are
// scanned by every allocation.
func gatherVisits(lifetimes []lifetime) uint64 {
	var pairs, long uint64
	longLife := longLifeOf(len(lifetimes))
	for _, l := range lifetimes {
		pairs += uint64(l.End - l.Start)
		if l.End-l.Start >= longLife {
			long++
		}
	}
	return 2*pairs + uint64(len(lifetimes))*long
}

// strategiesFor are the placements planArena compares on a stream.
func strategiesFor(lifetimes []lifetime) []strategy {
	switch visits := gatherVisits(lifetimes); {
	case visits <= allVisits:
		return slices.Clone(planStrategies)
	case visits <= generalVisits:
		return slices.Clone(planStrategies[:4])
	}
	var sweeps []strategy
	for _, s := range planStrategies {
		if s.Order == byStart && s.Lookahead == 0 {
			sweeps = append(sweeps, s)
		}
	}
	return sweeps
}

// planArena is the offline arena assignment vkrt's strong plans use: the
// least reserved of several greedy placements of the whole stream (see
// strategiesFor) under each of its page limits (pageLimits), each lowered by
// the window search (refineAssignment) with an equal share of searchSteps
// (none when searchSteps is 0 or less), computed in parallel. It is
// deterministic: the search counts steps, not time, and ties go to the
// earlier strategy and the device's page limit.
func planArena(lifetimes []lifetime, pageLimit uint64, searchSteps int, report func(done, total int)) (assignment, strategy, error) {
	if err := checkLifetimes(lifetimes, pageLimit); err != nil {
		return assignment{}, strategy{}, err
	}
	strategies := strategiesFor(lifetimes)
	limits := pageLimits(lifetimes, pageLimit)
	share := max(searchSteps, 0) / len(strategies)
	prog := &progress{report: report, total: len(limits) * len(strategies) * (len(lifetimes) + share)}
	var best assignment
	var bestStrategy strategy
	for i, limit := range limits {
		a, s := placeAndSearch(lifetimes, limit, slices.Clone(strategies), share, prog)
		if i == 0 || a.Reserved() < best.Reserved() {
			best, bestStrategy = a, s
		}
	}
	return best, bestStrategy, nil
}

// pageLimits are the page limits a stream is placed under: the device's,
// and for a stream whose peak needs several pages, seven eighths of it as
// well. Allocations cannot straddle pages, and which of them share a page
// decides how far apart in time the pages peak; a lower limit splits them
// differently. dynamic_inference seed 196 (5.88 GB at its peak, buffers
// of up to 1.79 GB) is placed at 1.0400× under 4 GiB − 16 and at 1.0000×
// under seven eighths of it; of the 66 generated streams of 200 seeds per
// shape that need several pages, it is the one the device's limit alone
// left above 1.03×.
func pageLimits(lifetimes []lifetime, pageLimit uint64) []uint64 {
	if peakOverlap(lifetimes) <= pageLimit || pageLimit < 8 {
		return []uint64{pageLimit}
	}
	return []uint64{pageLimit, pageLimit / 8 * 7}
}

// placeAndSearch is the least reserved of the strategies' greedy placements
// under one page limit, each lowered by the window search with share steps,
// computed in parallel; ties go to the earlier strategy.
func placeAndSearch(lifetimes []lifetime, pageLimit uint64, strategies []strategy, share int, prog *progress) (assignment, strategy) {
	results := make([]assignment, len(strategies))
	inParallel(len(strategies), func(i int) { results[i] = assign(lifetimes, pageLimit, strategies[i], prog) })
	if share > 0 {
		inParallel(len(strategies), func(i int) {
			if refined, _ := refineAssignment(lifetimes, results[i], share, prog); refined.Reserved() < results[i].Reserved() {
				results[i], strategies[i].Search = refined, true
			}
		})
	}
	best := 0
	for i, r := range results {
		if r.Reserved() < results[best].Reserved() {
			best = i
		}
	}
	return results[best], strategies[best]
}

// inParallel runs do(0) ... do(n-1) on as many goroutines as GOMAXPROCS.
func inParallel(n int, do func(i int)) {
	var wg sync.WaitGroup
	workers := make(chan struct{}, goruntime.GOMAXPROCS(0))
	for i := range n {
		wg.Add(1)
		workers <- struct{}{}
		go func() {
			defer wg.Done()
			do(i)
			<-workers
		}()
	}
	wg.Wait()
}

// assign places the stream by s, counting the allocations placed into p
// (which may be nil).
func assign(lifetimes []lifetime, pageLimit uint64, s strategy, p *progress) assignment {
	if s.Order == byStart && s.Lookahead == 0 {
		return assignByStart(lifetimes, pageLimit, s.BestFit, p)
	}
	if s.Lookahead > 0 {
		return assignLookahead(lifetimes, pageLimit, placementOrder(lifetimes, allIDs(len(lifetimes)), s.Order), s.Lookahead, peakOverlap(lifetimes)/lookaheadShare, p)
	}
	b := newArenaBuilder(lifetimes, pageLimit)
	for i, id := range placementOrder(lifetimes, allIDs(len(lifetimes)), s.Order) {
		b.place(id, s.BestFit)
		p.placed(i)
	}
	p.add(len(lifetimes) % progressEvery)
	return b.out
}

// progressEvery is how many placements pass between progress reports.
const progressEvery = 1 << 14

// progress counts a plan's work for Options.Progress: each allocation
// placed by each greedy placement, then each search step, across the
// placements computed in parallel. A nil progress counts nothing.
type progress struct {
	mu          sync.Mutex
	done, total int
	report      func(done, total int)
}

func (p *progress) add(n int) {
	if p == nil || p.report == nil || n == 0 {
		return
	}
	p.mu.Lock()
	defer p.mu.Unlock()
	p.done += n
	p.report(p.done, p.total)
}

// placed counts the i-th placement (from 0) once every progressEvery.
func (p *progress) placed(i int) {
	if (i+1)%progressEvery == 0 {
		p.add(progressEvery)
	}
}

func checkLifetimes(lifetimes []lifetime, pageLimit uint64) error {
	n := len(lifetimes)
	if pageLimit == 0 {
		return fmt.Errorf("plan: arena page limit is 0")
	}
	for k, l := range lifetimes {
		if l.Size == 0 || l.Start != int32(k) || l.End <= l.Start || int(l.End) > n {
			return fmt.Errorf("plan: lifetime %d is %+v, want a non-zero size and %d <= start < end <= %d", k, l, k, n)
		}
	}
	return nil
}

// pageSpans are the byte ranges of one page taken during some allocation's
// lifetime: their starts and their ends, each sorted. Ranges may overlap one
// another (they need not be live at the same time as each other), so holes
// are found by sweeping both lists; sorting plain integers twice is several
// times cheaper than sorting pairs.
type pageSpans struct{ starts, ends []uint64 }

// holes calls visit with each free range [lo, hi) between the spans, lowest
// first, ending with the open range above them all (hi = MaxUint64), until
// visit returns false.
func (ps *pageSpans) holes(visit func(lo, hi uint64) bool) {
	starts, ends := ps.starts, ps.ends
	lo, depth, j := uint64(0), 0, 0
	for _, s := range starts {
		for j < len(ends) && ends[j] <= s {
			if depth--; depth == 0 {
				lo = ends[j]
			}
			j++
		}
		if depth == 0 && s > lo && !visit(lo, s) {
			return
		}
		depth++
	}
	if len(ends) > 0 {
		lo = max(lo, ends[len(ends)-1])
	}
	visit(lo, ^uint64(0))
}

// lowestGap is the lowest offset where size bytes collide with no span.
func (ps *pageSpans) lowestGap(size uint64) uint64 {
	var at uint64
	ps.holes(func(lo, hi uint64) bool {
		at = lo
		return hi-lo < size
	})
	return at
}

// bestGap is the start of the smallest hole between spans that holds size
// bytes, or the top of the spans when no hole does.
func (ps *pageSpans) bestGap(size uint64) uint64 {
	best, bestWidth := uint64(0), ^uint64(0)
	ps.holes(func(lo, hi uint64) bool {
		if w := hi - lo; w >= size && w < bestWidth {
			best, bestWidth = lo, w
		}
		return true
	})
	return best
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

// insert stores id over [lo, hi); with a log, it records the nodes it
// appends to, so a trial can take the insertion back.
func (t *stabTree) insert(lo, hi, id int32, log *[]int) {
	l, r := int(lo)+t.size, int(hi)+t.size
	for l < r {
		if l&1 == 1 {
			t.nodes[l] = append(t.nodes[l], id)
			if log != nil {
				*log = append(*log, l)
			}
			l++
		}
		if r&1 == 1 {
			r--
			t.nodes[r] = append(t.nodes[r], id)
			if log != nil {
				*log = append(*log, r)
			}
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

// An arena page is one device allocation, held while any of its slots is
// live: a run that leaves the plan early can keep the whole page for one
// small reservation that lives on, and a run on another stream under the
// same plan, or of another workload, holds it beside the fallback pools'
// pages for everything else. A strong arena plan's pages are therefore
// cut (cutPages) where no slot crosses, into pieces of at least
// pieceShare of the page and minPieceBytes (a page's last piece may be
// less): the plan reserves as much as before, in more device allocations,
// and a run that leaves it holds only the pieces its live slots lie in.
// A virtual plan keeps whole pages: it lays them out in the address range,
// where memory is bound granule by granule. Measured by replaying
// generated runs of seeds 31–100 (other runs, other workloads and streams
// of several workloads) under strong arena plans on devices without
// sparse residency of 1.25–4× the largest peak, while an arena lent its
// room only where the device had no memory for the fallback pools: 357
// replays that the default layout ran failed under whole pages, 201 under
// pieces of an eighth (111 once it lent first). Of the 297 of seeds
// 41–100, pieces of a fourth left 180, of a 16th 165 as an eighth does,
// with more allocations, and pieces of an eighth with no floor 159; the
// floor keeps small arenas whole (the transformer example's 602 KB one
// would be up to eight allocations). The 84 strong plans of seeds 41–60 and of
// the shipped streams, each run under its own, reserve as before in 410
// device allocations instead of 96; the 240 runs of seeds 1–30 under the
// other run's plan reserved 3.00× their peak instead of 3.41× (SubSlices,
// no plan: 2.03×) in 7,070 device allocations instead of 6,452
// (SubSlices: 8,234).
const (
	pieceShare    = 8
	minPieceBytes = 16 << 20
)

// cutPages is plan with a cut at every offset of a page that no slot
// crosses, once the piece since the last cut holds its share: the pieces
// are laid out as the page was, each slot in its piece at the same place.
// A plan past memory.MaxArenaPages pages keeps its pages whole.
func cutPages(plan memory.ArenaPlan) memory.ArenaPlan {
	byPage := make([][]int32, len(plan.Pages))
	for k, s := range plan.Slots {
		byPage[s.Page] = append(byPage[s.Page], int32(k))
	}
	out := memory.ArenaPlan{Slots: make([]memory.ArenaSlot, len(plan.Slots)), Fallback: plan.Fallback}
	for page, ks := range byPage {
		slices.SortFunc(ks, func(x, y int32) int { return cmp.Compare(plan.Slots[x].Offset, plan.Slots[y].Offset) })
		piece := max(plan.Pages[page]/pieceShare, minPieceBytes)
		start, reach := uint64(0), uint64(0) // reach: the highest end placed so far
		for _, k := range ks {
			s := plan.Slots[k]
			if s.Offset >= reach && s.Offset-start >= piece {
				out.Pages = append(out.Pages, s.Offset-start)
				start = s.Offset
			}
			out.Slots[k] = memory.ArenaSlot{Size: s.Size, Page: uint32(len(out.Pages)), Offset: s.Offset - start}
			reach = max(reach, s.Offset+s.Size)
		}
		out.Pages = append(out.Pages, plan.Pages[page]-start)
	}
	if len(out.Pages) > memory.MaxArenaPages {
		return plan
	}
	return out
}
