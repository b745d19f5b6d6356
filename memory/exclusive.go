package memory

import (
	"cmp"
	"fmt"
	"math/bits"
	"slices"

	vkruntime "github.com/vkrt/vkrt/runtime"
)

// exclusivePool gives each reservation a whole page. A new page is sized to
// the request; a free page is reused by any request it fits, the smallest
// such page first (lowest index on ties). Pages that stayed free for a
// whole period of the pool's reservations go back to the driver.
type exclusivePool struct {
	poolBase
	maxAlloc  uint64
	pages     []exclusivePage
	spare     []int32    // page slots not held
	freeBySz  []freePage // free held pages, ordered by (size, index)
	served    uint64     // reservations served: the dealloc clock
	lastSweep uint64
}

// freePage is an entry of the free-page index: the size is kept beside the
// page number so the search reads one contiguous array.
type freePage struct {
	size uint64
	ref  int32
}

// before is 1 when a orders before b by (size, page), else 0: the borrow
// out of a 128-bit subtraction, so a search step takes no branch.
func (a freePage) before(b freePage) int {
	_, borrow := bits.Sub64(uint64(a.ref), uint64(b.ref), 0)
	_, borrow = bits.Sub64(a.size, b.size, borrow)
	return int(borrow)
}

// searchFree is the index of the first free page ordered at or after key.
// The search halves the range without a data-dependent branch: a branch on
// each comparison mispredicts about half the time.
func (p *exclusivePool) searchFree(key freePage) int {
	pages := p.freeBySz
	n := len(pages)
	if n == 0 {
		return 0
	}
	base := 0
	for n > 1 {
		half := n >> 1
		base += half & -pages[base+half].before(key)
		n -= half
	}
	return base + pages[base].before(key)
}

type exclusivePage struct {
	devicePage
	held, inUse bool
	lastUsed    uint64 // the clock when the page was last reserved or freed
}

func newExclusivePool(c poolConfig, storage vkruntime.Storage, total *Usage) *exclusivePool {
	return &exclusivePool{poolBase: poolBase{storage: storage, total: total}, maxAlloc: c.maxAlloc}
}

func (p *exclusivePool) accepts(size uint64) bool { return size <= p.maxAlloc }

func (p *exclusivePool) report() PoolReport {
	return p.reportWith(ExclusiveKind{MaxAllocSize: p.maxAlloc})
}

func (p *exclusivePool) capacity() (uint64, uint64, bool) { return 0, 0, false }

func (p *exclusivePool) reserve(size, requested uint64, lazy bool) (int32, error) {
	i := p.searchFree(freePage{size: size}) // refs are never negative: the first page of size or more
	var ref int32
	if i < len(p.freeBySz) {
		ref = p.freeBySz[i].ref
		if !lazy {
			if err := p.mapPage(&p.pages[ref].devicePage); err != nil {
				return 0, err
			}
		}
		p.freeBySz = slices.Delete(p.freeBySz, i, i+1)
	} else {
		dp, err := p.openPage(size, lazy)
		if err != nil {
			return 0, err
		}
		ref = takeSlot(&p.pages, &p.spare)
		p.pages[ref] = exclusivePage{devicePage: dp, held: true}
	}
	pg := &p.pages[ref]
	pg.inUse = true
	pg.lastUsed = p.served
	p.served++
	p.countAlloc(requested, pg.size)
	if p.served-p.lastSweep >= exclusiveDeallocPeriod {
		p.sweep(false)
	}
	return ref, nil
}

func (p *exclusivePool) free(ref int32, requested uint64) {
	pg := &p.pages[ref]
	pg.inUse = false
	pg.lastUsed = p.served
	p.uncountAlloc(requested, pg.size)
	e := freePage{size: pg.size, ref: ref}
	p.freeBySz = slices.Insert(p.freeBySz, p.searchFree(e), e)
}

// sweep returns free pages: all of them when explicit, otherwise those
// that stayed free for a whole period.
func (p *exclusivePool) sweep(explicit bool) {
	p.lastSweep = p.served
	released := false
	p.freeBySz = slices.DeleteFunc(p.freeBySz, func(e freePage) bool {
		pg := &p.pages[e.ref]
		if !explicit && p.served-pg.lastUsed < exclusiveDeallocPeriod {
			return false
		}
		p.closePage(&pg.devicePage)
		*pg = exclusivePage{}
		p.spare = append(p.spare, e.ref)
		released = true
		return true
	})
	if released {
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
	for i := range p.pages {
		if pg := &p.pages[i]; pg.held {
			t.add(&pg.devicePage, pg.inUse)
		}
	}
	if err := p.checkCounts("exclusive pool", t.held, t.unmapped, t.reserved, t.inUse); err != nil {
		return err
	}
	free := int(t.idle)
	if free != len(p.freeBySz) || !slices.IsSortedFunc(p.freeBySz, func(a, b freePage) int {
		return cmp.Or(cmp.Compare(a.size, b.size), cmp.Compare(a.ref, b.ref))
	}) {
		return fmt.Errorf("exclusive pool: %d free pages but the size index has %d or is unsorted", free, len(p.freeBySz))
	}
	for _, e := range p.freeBySz {
		if pg := &p.pages[e.ref]; !pg.held || pg.inUse || pg.size != e.size {
			return fmt.Errorf("exclusive pool: page %d in the free index is not a free page of %d B", e.ref, e.size)
		}
	}
	return nil
}
