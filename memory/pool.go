package memory

import (
	"errors"
	"fmt"
	"math"

	vkruntime "github.com/vkrt/vkrt/runtime"
)

// errPoolFull is a capped pool's answer when it can neither carve nor add a
// page; the manager spills to the next accepting pool.
var errPoolFull = errors.New("memory: pool full at its cap")

// pageCap is a sliced or exclusive pool's cap on the pages it holds at
// once. A limit refuses the page past it (errPoolFull); a forecast (grow)
// lets the pool take it, and each page past the forecast is a spill,
// told to outgrown once the device granted it.
type pageCap struct {
	capPages uint64 // 0: uncapped
	grow     bool
	outgrown func(capPages, held uint64)
}

// admit says whether a pool holding held pages may take one more, and
// whether that page is past the forecast.
func (c *pageCap) admit(held uint64) (past bool, err error) {
	past = c.capPages != 0 && held >= c.capPages
	if past && !c.grow {
		return past, errPoolFull
	}
	return past, nil
}

// granted tells outgrown of a page past the forecast the device granted,
// the pool now holding held pages.
func (c *pageCap) granted(past bool, held uint64) {
	if past && c.outgrown != nil {
		c.outgrown(c.capPages, held)
	}
}

// limitHolds says whether the cap is a limit a pool holding held pages has
// reached.
func (c *pageCap) limitHolds(held uint64) bool {
	return c.capPages != 0 && !c.grow && held >= c.capPages
}

// checkCap is the invariant that a pool keeps to a cap that is a limit.
func (c *pageCap) checkCap(what string, held uint64) error {
	if c.capPages != 0 && !c.grow && held > c.capPages {
		return fmt.Errorf("%s: %d pages held past the cap of %d", what, held, c.capPages)
	}
	return nil
}

// pool is one dynamic or persistent pool. Refs name a reservation inside the
// pool; the manager maps handles to (pool, ref).
type pool interface {
	// accepts reports whether the pool takes reservations of an aligned size.
	accepts(size uint64) bool
	// reserve places size aligned bytes for a request of requested bytes.
	// It answers errPoolFull when a capped pool cannot serve it, or the
	// storage's error; either way nothing changed, except that free pages
	// unmapped to make room whose memory the device then refuses to give
	// back stay unmapped.
	reserve(size, requested uint64, lazy bool) (int32, error)
	// free releases a live ref that was reserved for requested bytes.
	free(ref int32, requested uint64)
	resolve(ref int32) (vkruntime.StorageHandle, error)
	// locate names where a live ref sits: a page key unique within the
	// pool, the offset in it and the aligned size.
	locate(ref int32) (page int, offset, size uint64)
	cleanup(explicit bool)
	// capacity is the byte cap of a capped pool and the bytes its live
	// reservations occupy (padding included); ok is false for uncapped pools.
	capacity() (capBytes, used uint64, ok bool)
	report() PoolReport
	base() *poolBase
	checkInvariants() error
}

// devicePage is one device allocation of a pool, or one that will be made
// when first needed (unmapped).
type devicePage struct {
	handle vkruntime.StorageHandle
	size   uint64
	mapped bool
}

// poolBase keeps a pool's counters and talks to the storage. Every change
// to the pool's usage is mirrored in the manager's total so that
// Manager.Usage is O(1).
type poolBase struct {
	storage       vkruntime.Storage
	usage         Usage
	total         *Usage
	pageCount     uint64
	pagesPeak     uint64
	pagesUnmapped uint64
	largest       uint64
	unmapped      []*devicePage // what a reservation unmapped to make room, until its page is granted
}

func (b *poolBase) base() *poolBase { return b }

func (b *poolBase) openPage(size uint64, lazy bool) (devicePage, error) {
	pg, err := b.allocPage(size, lazy, 0)
	if err != nil {
		return devicePage{}, err
	}
	b.countPage(pg)
	return pg, nil
}

// allocPage gets a page's device memory (none for a lazy one) without
// counting the page. freeing is what the pool hands back once the page is
// granted: a pool frees only then, so that a refused request changes
// nothing, and the room in the counters is checked as if it were gone.
func (b *poolBase) allocPage(size uint64, lazy bool, freeing uint64) (devicePage, error) {
	if err := b.roomForFreeing(size, freeing); err != nil {
		return devicePage{}, err
	}
	pg := devicePage{size: size}
	if !lazy {
		h, err := b.storage.Alloc(size)
		if err != nil {
			return devicePage{}, err
		}
		pg.handle, pg.mapped = h, true
	}
	return pg, nil
}

// countPage counts a page allocPage gave, after what the pool freed for it.
func (b *poolBase) countPage(pg devicePage) {
	if !pg.mapped {
		b.pagesUnmapped++
	}
	b.pageCount++
	b.pagesPeak = max(b.pagesPeak, b.pageCount)
	b.usage.BytesReserved += pg.size
	b.total.BytesReserved += pg.size
}

func (b *poolBase) mapPage(pg *devicePage) error {
	if pg.mapped {
		return nil
	}
	h, err := b.storage.Alloc(pg.size)
	if err != nil {
		return err
	}
	pg.handle, pg.mapped = h, true
	b.pagesUnmapped--
	return nil
}

// unmapPage hands a page's device memory back and keeps the page, unmapped
// like a lazy one, for mapPage to give memory again; it reports whether
// the page had memory.
func (b *poolBase) unmapPage(pg *devicePage) bool {
	if !pg.mapped {
		return false
	}
	b.storage.Dealloc(pg.handle.ID)
	pg.handle, pg.mapped = vkruntime.StorageHandle{}, false
	b.pagesUnmapped++
	return true
}

// remapIfRefused gives memory back to the pages in unmapped, which a pool
// unmapped to make room for a new page, when the device refused that page
// (err): one the device refuses now stays unmapped, a lazy page that gets
// memory when next reserved eagerly. Either way the list is emptied.
func (b *poolBase) remapIfRefused(err error) {
	if err != nil {
		for _, pg := range b.unmapped {
			_ = b.mapPage(pg)
		}
	}
	b.forgetUnmapped()
}

func (b *poolBase) forgetUnmapped() {
	clear(b.unmapped) // the pages may move with their slab
	b.unmapped = b.unmapped[:0]
}

// forgetUnmappedOnPanic is deferred by a pool that unmaps pages to make
// room for a new one, done set once remapIfRefused ran: where the device
// panicked first (in Dealloc, Flush or Alloc), the pages stay unmapped, as
// pages the device refused again do, and the list forgets them. Kept, the
// next refusal gave memory to them, released or moved by then: the count of
// unmapped pages wrapped past 2^64 and the device held an allocation of
// 0 B no page owned.
func (b *poolBase) forgetUnmappedOnPanic(done *bool) {
	if !*done {
		b.forgetUnmapped()
	}
}

// roomFor refuses a page that would take the bytes the pools hold past
// 2^64, where their counters would wrap: no device holds that much, and a
// lazy page, which no driver is asked for, must not make the figures lie.
func (b *poolBase) roomFor(size uint64) error { return b.roomForFreeing(size, 0) }

// roomForFreeing is roomFor once freeing bytes the pools hold are gone.
func (b *poolBase) roomForFreeing(size, freeing uint64) error {
	if held := b.total.BytesReserved; size > math.MaxUint64-(held-freeing) {
		return &vkruntime.OutOfMemoryError{Size: size, Usage: held,
			Detail: "the pools would hold more than 18446744073709551615 B"}
	}
	return nil
}

// closePage releases a page; an unmapped one never reaches the driver.
func (b *poolBase) closePage(pg *devicePage) {
	if pg.mapped {
		b.storage.Dealloc(pg.handle.ID)
	} else {
		b.pagesUnmapped--
	}
	b.pageCount--
	b.usage.BytesReserved -= pg.size
	b.total.BytesReserved -= pg.size
	*pg = devicePage{}
}

func (b *poolBase) countAlloc(requested, occupied uint64) {
	b.usage.NumberAllocs++
	b.usage.BytesInUse += requested
	b.usage.BytesPadding += occupied - requested
	total := b.total // loaded once: the stores above could alias it
	total.NumberAllocs++
	total.BytesInUse += requested
	total.BytesPadding += occupied - requested
	b.largest = max(b.largest, requested)
}

func (b *poolBase) uncountAlloc(requested, occupied uint64) {
	b.usage.NumberAllocs--
	b.usage.BytesInUse -= requested
	b.usage.BytesPadding -= occupied - requested
	total := b.total
	total.NumberAllocs--
	total.BytesInUse -= requested
	total.BytesPadding -= occupied - requested
}

// takeSlot reuses a spare slot of a slab, or appends one.
func takeSlot[T any](slab *[]T, spare *[]int32) int32 {
	if n := len(*spare); n > 0 {
		ref := (*spare)[n-1]
		*spare = (*spare)[:n-1]
		return ref
	}
	var zero T
	*slab = append(*slab, zero)
	return int32(len(*slab) - 1)
}

// pageTally counts a pool's pages for its invariant check.
type pageTally struct{ held, unmapped, reserved, inUse, idle uint64 }

func (t *pageTally) add(pg *devicePage, inUse bool) {
	t.held++
	t.reserved += pg.size
	if !pg.mapped {
		t.unmapped++
	}
	if inUse {
		t.inUse++
	} else {
		t.idle++
	}
}

// checkCounts compares what a pool's invariant check counted with the
// counters it keeps.
func (b *poolBase) checkCounts(what string, held, unmapped, reserved, live uint64) error {
	switch {
	case held != b.pageCount || unmapped != b.pagesUnmapped || reserved != b.usage.BytesReserved:
		return fmt.Errorf("%s: %d pages (%d unmapped, %d B) held, recorded %d (%d, %d B)",
			what, held, unmapped, reserved, b.pageCount, b.pagesUnmapped, b.usage.BytesReserved)
	case live != b.usage.NumberAllocs:
		return fmt.Errorf("%s: %d live reservations, usage says %d", what, live, b.usage.NumberAllocs)
	}
	return nil
}

func (b *poolBase) reportWith(kind PoolKind) PoolReport {
	return PoolReport{Kind: kind, Usage: b.usage, Pages: b.pageCount, PagesPeak: b.pagesPeak,
		PagesUnmapped: b.pagesUnmapped, LargestAlloc: b.largest}
}
