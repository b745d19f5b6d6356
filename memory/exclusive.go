package memory

import (
	"errors"
	"fmt"
	"slices"

	"github.com/vkrt/vkrt/internal/saturate"
	vkruntime "github.com/vkrt/vkrt/runtime"
)

// exclusivePool gives each reservation a whole page. A new page is sized to
// the request; a free page is reused by a request it fits, the smallest
// such page first (lowest index on ties), unless the request would leave
// most of it unused (see oversize) and the device memory holds a page of
// its own, and the device grants it. A page is never split, so a small buffer on a large free page
// held the rest of it for as long as it lived (a 100 MiB buffer took a
// free 90 GiB page, and a 60 GiB one after it was refused with 100 MiB
// live). Pages that stayed free for a whole period of the pool's
// reservations go back to the driver.
//
// A pool of a plan (SlicedPool.Exclusive) may be capped at a number of
// pages held at once. A forecast (grow) places as an uncapped pool does and
// counts each page past it as a spill; a limit gives back free pages too
// small for a request first, then is full (errPoolFull), and serves a
// request it would have given a page of its own from a larger free page.
//
// Pages are grouped by size, and a map finds a size's group, so the common
// reuse of a page of exactly the requested size is a lookup and a pop; only
// a request that no free page matches exactly searches the groups above.
type exclusivePool struct {
	poolBase
	maxAlloc  uint64
	heap      uint64 // the device memory
	pages     []exclusivePage
	spare     []int32          // page slots not held
	groups    []pageGroup      // one per size of the pages held, by size
	groupOf   map[uint64]int32 // a page size's index in groups
	served    uint64           // reservations served: the dealloc clock
	lastSweep uint64
	pageCap
}

// pageGroup is the held pages of one size. Its free ones are listed
// highest index first, so the lowest, taken first, is popped off the end.
type pageGroup struct {
	size uint64
	held int32
	free []int32
}

type exclusivePage struct {
	devicePage
	held, inUse bool
	lastUsed    uint64 // the clock when the page was last reserved or freed
}

func newExclusivePool(c poolConfig, storage vkruntime.Storage, total *Usage) *exclusivePool {
	return &exclusivePool{poolBase: poolBase{storage: storage, total: total}, maxAlloc: c.maxAlloc, heap: c.heap,
		groupOf: map[uint64]int32{}, pageCap: pageCap{capPages: c.capPages, grow: c.grow}}
}

func (p *exclusivePool) accepts(size uint64) bool { return size <= p.maxAlloc }

func (p *exclusivePool) report() PoolReport {
	k := ExclusiveKind{MaxAllocSize: p.maxAlloc}
	if c, _, capped := p.capacity(); capped {
		k.MaxPoolSize = &c
	}
	return p.reportWith(k)
}

// capacity is what a capped pool's pages would hold were each of the
// largest size it takes: its cap in bytes, at the most.
func (p *exclusivePool) capacity() (uint64, uint64, bool) {
	return saturate.Mul(p.capPages, p.maxAlloc), p.usage.BytesInUse + p.usage.BytesPadding, p.capPages != 0
}

func (p *exclusivePool) reserve(size, requested uint64, lazy bool) (int32, error) {
	g := p.fitGroup(size)
	if g < 0 {
		return p.newPage(size, requested, lazy)
	}
	// A forecast places as an uncapped pool does, only counting the pages
	// past it, so a plan measured with its pools uncapped replays its own
	// run as measured; a limit it has reached keeps the free page.
	if oversize(p.groups[g].size, size) && p.heapHolds(size) && !p.limitHolds(p.pageCount) {
		// A page of its own where the device memory holds it, as the
		// pools count it (so a dry run's lazy reservation decides as its
		// real run does), unless the device refuses it all the same: then
		// the free page serves, as it always did.
		ref, err := p.newPage(size, requested, lazy)
		if err == nil || !errors.Is(err, vkruntime.ErrOutOfDeviceMemory) {
			return ref, err
		}
	}
	free := p.groups[g].free
	ref := free[len(free)-1]
	if !lazy {
		if err := p.mapPage(&p.pages[ref].devicePage); err != nil {
			return 0, err
		}
	}
	p.groups[g].free = free[:len(free)-1]
	return p.serve(ref, requested), nil
}

// exclusiveWasteBound is how much of a free page a reservation may leave
// unused beyond half of it: PyTorch's caching allocator does not serve a
// request from a cached block more than 20 MiB larger either.
const exclusiveWasteBound = 20 << 20

// oversize says whether a reservation of size would leave most of a page
// of page bytes, and more than exclusiveWasteBound, unused.
func oversize(page, size uint64) bool {
	return page/2 > size && page-size > exclusiveWasteBound
}

// heapHolds says whether the device memory holds size bytes more than the
// pools hold (all of it where the device did not say).
func (p *exclusivePool) heapHolds(size uint64) bool {
	return p.heap == 0 || (p.total.BytesReserved <= p.heap && size <= p.heap-p.total.BytesReserved)
}

// newPage serves a reservation no free page holds, or one it would waste
// most of, from a new page.
func (p *exclusivePool) newPage(size, requested uint64, lazy bool) (int32, error) {
	below, idle, drop := p.tooSmall(size)
	// At a limit it has reached, the pool gives back the free pages too
	// small for the request before it is refused: kept, they only hold
	// memory.
	drop = drop || (p.limitHolds(p.pageCount) && idle > 0)
	var freeing, dropped uint64
	if drop {
		freeing = idle
		if p.capPages != 0 {
			for g := range below {
				dropped += uint64(len(p.groups[g].free))
			}
		}
	}
	past, err := p.admit(p.pageCount - dropped)
	if err != nil {
		return 0, err
	}
	if err := p.roomForFreeing(size, freeing); err != nil {
		return 0, err
	}
	// The pages too small lose their memory first, to make room on
	// the device, but are kept until the new page is granted: a
	// refused reservation maps them again and changes nothing.
	done := false
	defer p.forgetUnmappedOnPanic(&done)
	if drop {
		for g := range below {
			free := p.groups[g].free
			for i := len(free) - 1; i >= 0; i-- { // the order release hands them back in
				if pg := &p.pages[free[i]].devicePage; p.unmapPage(pg) {
					p.unmapped = append(p.unmapped, pg)
				}
			}
		}
		if len(p.unmapped) > 0 {
			p.storage.Flush()
		}
	}
	dp, err := p.allocPage(size, lazy, freeing)
	p.remapIfRefused(err)
	done = true
	if err != nil {
		return 0, err
	}
	if drop {
		p.release(below, func(*exclusivePage) bool { return true })
	}
	p.granted(past, p.pageCount+1)
	p.countPage(dp)
	ref := takeSlot(&p.pages, &p.spare)
	p.pages[ref] = exclusivePage{devicePage: dp, held: true}
	p.groups[p.groupFor(size)].held++
	return p.serve(ref, requested), nil
}

// serve marks page ref, just taken, in use by a reservation, and sweeps
// the pool when a period has passed. Where the device's Dealloc or Flush
// panics in that sweep, the page goes back to the free pages, held, and
// the reservation uncounted, the largest reservation served too: the
// manager gives out no handle for it, and kept in use the page leaked
// with the reservation counted live.
func (p *exclusivePool) serve(ref int32, requested uint64) int32 {
	pg := &p.pages[ref]
	pg.inUse = true
	pg.lastUsed = p.served
	p.served++
	largest := p.largest
	p.countAlloc(requested, pg.size)
	if p.served-p.lastSweep >= exclusiveDeallocPeriod {
		swept := false
		defer func() {
			if !swept {
				p.free(ref, requested)
				p.largest = largest
			}
		}()
		p.sweep(false)
		swept = true
	}
	return ref
}

// fitGroup is the group of the smallest free pages that hold size, or -1.
func (p *exclusivePool) fitGroup(size uint64) int {
	g, ok := p.groupOf[size]
	if ok && len(p.groups[g].free) > 0 {
		return int(g)
	}
	from := int(g) + 1
	if !ok {
		from = p.searchGroups(size)
	}
	for i := from; i < len(p.groups); i++ {
		if len(p.groups[i].free) > 0 {
			return i
		}
	}
	return -1
}

// searchGroups is the index of the first group of size or more.
func (p *exclusivePool) searchGroups(size uint64) int {
	lo, hi := 0, len(p.groups)
	for lo < hi {
		mid := int(uint(lo+hi) >> 1)
		if p.groups[mid].size < size {
			lo = mid + 1
		} else {
			hi = mid
		}
	}
	return lo
}

// groupFor is the group of pages of size, added when there is none.
func (p *exclusivePool) groupFor(size uint64) int {
	if g, ok := p.groupOf[size]; ok {
		return int(g)
	}
	g := p.searchGroups(size)
	p.groups = slices.Insert(p.groups, g, pageGroup{size: size})
	p.indexGroups(g)
	return g
}

// indexGroups renumbers the groups from index from on.
func (p *exclusivePool) indexGroups(from int) {
	for i := from; i < len(p.groups); i++ {
		p.groupOf[p.groups[i].size] = int32(i)
	}
}

func (p *exclusivePool) free(ref int32, requested uint64) {
	pg := &p.pages[ref]
	pg.inUse = false
	pg.lastUsed = p.served
	p.uncountAlloc(requested, pg.size)
	grp := &p.groups[p.groupOf[pg.size]]
	// Highest index first: the place is found from the lowest end, where
	// a page freed soon after its reservation usually goes.
	i := len(grp.free)
	for i > 0 && grp.free[i-1] < ref {
		i--
	}
	grp.free = slices.Insert(grp.free, i, ref)
}

// sweep returns free pages: all of them when explicit, otherwise those
// that stayed free for a whole period. Pages go in order of size, then
// index.
func (p *exclusivePool) sweep(explicit bool) {
	p.lastSweep = p.served
	p.release(len(p.groups), func(pg *exclusivePage) bool {
		return explicit || p.served-pg.lastUsed >= exclusiveDeallocPeriod
	})
}

// tooSmall says whether a request of size that no free page fits returns
// the free pages too small for it (those of the first below groups, idle
// bytes): it does when together they hold half of it or more, since a pool
// whose requests keep growing (a KV cache reallocated larger) would
// otherwise hoard every earlier page for a whole dealloc period.
func (p *exclusivePool) tooSmall(size uint64) (below int, idle uint64, drop bool) {
	below = p.searchGroups(size)
	for g := range below {
		idle += uint64(len(p.groups[g].free)) * p.groups[g].size
	}
	return below, idle, idle >= size-size/2 // 2*idle >= size, without wrapping
}

// release returns the free pages of the first groups that drop selects,
// in order of size, then index.
func (p *exclusivePool) release(groups int, drop func(*exclusivePage) bool) {
	flush, emptied := false, false // flush: a page with memory went
	g := 0
	// Where the device's Dealloc panics, the pages released so far are
	// taken out of their group's free list, and emptied groups out of the
	// pool, as a release that ends does.
	tidy := func(grp *pageGroup) {
		grp.free = slices.DeleteFunc(grp.free, func(ref int32) bool { return ref == none })
		emptied = emptied || grp.held == 0
	}
	dropEmptied := func() {
		if emptied {
			p.groups = slices.DeleteFunc(p.groups, func(grp pageGroup) bool {
				if grp.held == 0 {
					delete(p.groupOf, grp.size)
				}
				return grp.held == 0
			})
			p.indexGroups(0)
		}
	}
	done := false
	defer func() {
		if !done {
			tidy(&p.groups[g])
			dropEmptied()
		}
	}()
	for ; g < groups; g++ {
		grp := &p.groups[g]
		kept := len(grp.free)
		for i := len(grp.free) - 1; i >= 0; i-- {
			ref := grp.free[i]
			pg := &p.pages[ref]
			if !drop(pg) {
				continue
			}
			flush = flush || pg.mapped
			p.closePage(&pg.devicePage)
			*pg = exclusivePage{}
			p.spare = append(p.spare, ref)
			grp.free[i] = none
			kept--
			grp.held--
		}
		if kept != len(grp.free) {
			tidy(grp)
		}
		emptied = emptied || grp.held == 0
	}
	done = true
	dropEmptied()
	if flush {
		p.storage.Flush()
	}
}

func (p *exclusivePool) cleanup(explicit bool) { p.sweep(explicit) }

func (p *exclusivePool) resolve(ref int32) (vkruntime.StorageHandle, error) {
	pg := &p.pages[ref]
	if err := p.mapPage(&pg.devicePage); err != nil {
		return vkruntime.StorageHandle{}, err
	}
	return vkruntime.StorageHandle{ID: pg.handle.ID, Offset: 0, Size: pg.size}, nil
}

func (p *exclusivePool) locate(ref int32) (int, uint64, uint64) {
	return int(ref), 0, p.pages[ref].size
}

func (p *exclusivePool) checkInvariants() error {
	var t pageTally
	heldOfSize := map[uint64]int32{}
	for i := range p.pages {
		if pg := &p.pages[i]; pg.held {
			t.add(&pg.devicePage, pg.inUse)
			heldOfSize[pg.size]++
		}
	}
	if err := p.checkCounts("exclusive pool", t.held, t.unmapped, t.reserved, t.inUse); err != nil {
		return err
	}
	if err := p.checkCap("exclusive pool", t.held); err != nil {
		return err
	}
	if len(p.groups) != len(heldOfSize) || len(p.groupOf) != len(p.groups) {
		return fmt.Errorf("exclusive pool: %d page sizes held, %d groups, %d indexed", len(heldOfSize), len(p.groups), len(p.groupOf))
	}
	var free uint64
	for g, grp := range p.groups {
		switch {
		case g > 0 && p.groups[g-1].size >= grp.size:
			return fmt.Errorf("exclusive pool: group %d of %d B after one of %d B", g, grp.size, p.groups[g-1].size)
		case p.groupOf[grp.size] != int32(g):
			return fmt.Errorf("exclusive pool: group %d of %d B indexed as %d", g, grp.size, p.groupOf[grp.size])
		case heldOfSize[grp.size] != grp.held:
			return fmt.Errorf("exclusive pool: %d pages of %d B held, group says %d", heldOfSize[grp.size], grp.size, grp.held)
		}
		for i, ref := range grp.free {
			if pg := &p.pages[ref]; !pg.held || pg.inUse || pg.size != grp.size {
				return fmt.Errorf("exclusive pool: page %d in the free list of %d B is not a free page of that size", ref, grp.size)
			}
			if i > 0 && grp.free[i-1] <= ref {
				return fmt.Errorf("exclusive pool: free pages of %d B out of order at %d", grp.size, ref)
			}
		}
		free += uint64(len(grp.free))
	}
	if free != t.idle {
		return fmt.Errorf("exclusive pool: %d free pages but the groups list %d", t.idle, free)
	}
	return nil
}
