package memory

import (
	"fmt"
	"math"

	vkruntime "github.com/vkrt/vkrt/runtime"
)

// directPool makes one device allocation per reservation, sized to the
// aligned request, and reuses a free one only for the same aligned size (the
// most recently freed first). The dynamic direct pool hands cached free
// allocations back, oldest first, when a new one would take its reserved
// bytes past the reclaim watermark: twice the bytes live after the
// reservation, and at most three quarters of the device memory when that is
// known. The persistent pool is the same without a watermark: its cache
// goes only on an explicit cleanup.
type directPool struct {
	poolBase
	persistent bool
	ceiling    uint64 // the largest reservation accepted
	heap       uint64 // the device memory size, 0 when unknown
	entries    []directEntry
	spare      []int32
	bySize     map[uint64]int32 // newest cached free entry of each size
	oldest     int32            // cache order: oldest freed first
	newest     int32
	live       uint64 // bytes occupied by live reservations
}

type directEntry struct {
	devicePage
	held, inUse            bool
	sameOlder              int32 // the next cached entry of the same size, older
	sameNewer              int32
	cacheOlder, cacheNewer int32
}

func newDirectPool(storage vkruntime.Storage, total *Usage, ceiling, heap uint64, persistent bool) *directPool {
	return &directPool{poolBase: poolBase{storage: storage, total: total}, persistent: persistent,
		ceiling: ceiling, heap: heap, bySize: map[uint64]int32{}, oldest: none, newest: none}
}

func (p *directPool) accepts(size uint64) bool { return size <= p.ceiling }

func (p *directPool) report() PoolReport {
	if p.persistent {
		return p.reportWith(PersistentKind{})
	}
	return p.reportWith(DirectKind{})
}

func (p *directPool) capacity() (uint64, uint64, bool) { return 0, 0, false }

func (p *directPool) reserve(size, requested uint64, lazy bool) (int32, error) {
	ref, cached := p.bySize[size]
	if cached {
		if !lazy {
			if err := p.mapPage(&p.entries[ref].devicePage); err != nil {
				return 0, err
			}
		}
		p.uncache(ref)
	} else {
		var (
			n       int
			freeing uint64
		)
		if !p.persistent {
			n, freeing = p.reclaimable(size)
		}
		if err := p.roomForFreeing(size, freeing); err != nil {
			return 0, err
		}
		// What the watermark hands back loses its memory first, to make
		// room on the device, but stays cached until the new allocation
		// is granted: a refused reservation maps it again and changes
		// nothing.
		done := false
		defer p.forgetUnmappedOnPanic(&done)
		for r, i := p.oldest, 0; i < n; r, i = p.entries[r].cacheNewer, i+1 {
			if pg := &p.entries[r].devicePage; p.unmapPage(pg) {
				p.unmapped = append(p.unmapped, pg)
			}
		}
		if len(p.unmapped) > 0 {
			p.storage.Flush()
		}
		dp, err := p.allocPage(size, lazy, freeing)
		p.remapIfRefused(err)
		done = true
		if err != nil {
			return 0, err
		}
		for range n {
			p.release(p.oldest)
		}
		p.countPage(dp)
		ref = takeSlot(&p.entries, &p.spare)
		p.entries[ref] = directEntry{devicePage: dp, held: true}
	}
	p.entries[ref].inUse = true
	p.live += size
	p.countAlloc(requested, size)
	return ref, nil
}

// watermark is the most bytes the dynamic pool keeps reserved with a new
// allocation of size bytes live.
func (p *directPool) watermark(size uint64) uint64 {
	// Saturating: past 2^64 the watermark wrapped to a few bytes and a
	// huge request handed back the whole cache.
	watermark := uint64(math.MaxUint64)
	if live := p.live + size; live >= size && live <= math.MaxUint64/2 {
		watermark = 2 * live
	}
	if p.heap != 0 {
		watermark = min(watermark, p.heap/4*3)
	}
	return watermark
}

// pastWatermark reports whether reserved bytes and size more pass the
// watermark, without wrapping: their sum wrapped past 2^64 and kept the
// whole cache.
func pastWatermark(reserved, size, watermark uint64) bool {
	return size > watermark || reserved > watermark-size
}

// reclaimable is how many cached allocations, and how many bytes,
// reclaim(size) would hand back.
func (p *directPool) reclaimable(size uint64) (n int, freeing uint64) {
	watermark := p.watermark(size)
	for r := p.oldest; r != none && pastWatermark(p.usage.BytesReserved-freeing, size, watermark); r = p.entries[r].cacheNewer {
		n++
		freeing += p.entries[r].size
	}
	return n, freeing
}

// reclaim hands cached allocations back, oldest first, until a new one of
// size bytes stays under the watermark.
func (p *directPool) reclaim(size uint64) {
	watermark := p.watermark(size)
	released := false
	for p.oldest != none && pastWatermark(p.usage.BytesReserved, size, watermark) {
		p.release(p.oldest)
		released = true
	}
	if released {
		p.storage.Flush()
	}
}

func (p *directPool) release(ref int32) {
	// The memory first: where the device's Dealloc panics, the entry
	// stays cached as it was.
	p.unmapPage(&p.entries[ref].devicePage)
	p.uncache(ref)
	p.closePage(&p.entries[ref].devicePage)
	p.entries[ref] = directEntry{}
	p.spare = append(p.spare, ref)
}

func (p *directPool) uncache(ref int32) {
	e := &p.entries[ref]
	if e.sameNewer != none {
		p.entries[e.sameNewer].sameOlder = e.sameOlder
	} else if e.sameOlder != none {
		p.bySize[e.size] = e.sameOlder
	} else {
		delete(p.bySize, e.size)
	}
	if e.sameOlder != none {
		p.entries[e.sameOlder].sameNewer = e.sameNewer
	}
	if e.cacheNewer != none {
		p.entries[e.cacheNewer].cacheOlder = e.cacheOlder
	} else {
		p.newest = e.cacheOlder
	}
	if e.cacheOlder != none {
		p.entries[e.cacheOlder].cacheNewer = e.cacheNewer
	} else {
		p.oldest = e.cacheNewer
	}
	e.sameOlder, e.sameNewer, e.cacheOlder, e.cacheNewer = none, none, none, none
}

func (p *directPool) free(ref int32, requested uint64) {
	e := &p.entries[ref]
	e.inUse = false
	p.live -= e.size
	p.uncountAlloc(requested, e.size)
	e.sameNewer, e.cacheNewer = none, none
	e.sameOlder = none
	if head, ok := p.bySize[e.size]; ok {
		e.sameOlder = head
		p.entries[head].sameNewer = ref
	}
	p.bySize[e.size] = ref
	e.cacheOlder = p.newest
	if p.newest != none {
		p.entries[p.newest].cacheNewer = ref
	} else {
		p.oldest = ref
	}
	p.newest = ref
}

// cleanup hands back every cached allocation when explicit; otherwise the
// dynamic pool trims its cache to the watermark.
func (p *directPool) cleanup(explicit bool) {
	switch {
	case explicit:
		released := p.oldest != none
		for p.oldest != none {
			p.release(p.oldest)
		}
		if released {
			p.storage.Flush()
		}
	case !p.persistent:
		p.reclaim(0)
	}
}

func (p *directPool) resolve(ref int32) (vkruntime.StorageHandle, error) {
	e := &p.entries[ref]
	if err := p.mapPage(&e.devicePage); err != nil {
		return vkruntime.StorageHandle{}, err
	}
	return vkruntime.StorageHandle{ID: e.handle.ID, Offset: 0, Size: e.size}, nil
}

func (p *directPool) locate(ref int32) (int, uint64, uint64) { return int(ref), 0, p.entries[ref].size }

func (p *directPool) checkInvariants() error {
	var t pageTally
	var live uint64
	for i := range p.entries {
		if e := &p.entries[i]; e.held {
			t.add(&e.devicePage, e.inUse)
			if e.inUse {
				live += e.size
			}
		}
	}
	inUse, cached := t.inUse, int(t.idle)
	n := 0
	for r := p.oldest; r != none; r = p.entries[r].cacheNewer {
		if p.entries[r].inUse || !p.entries[r].held {
			return fmt.Errorf("direct pool: entry %d in the cache is not a free allocation", r)
		}
		n++
	}
	m := 0
	for size, head := range p.bySize {
		for r := head; r != none; r = p.entries[r].sameOlder {
			if p.entries[r].size != size || p.entries[r].inUse {
				return fmt.Errorf("direct pool: entry %d of %d B cached under %d B", r, p.entries[r].size, size)
			}
			m++
		}
	}
	if err := p.checkCounts("direct pool", t.held, t.unmapped, t.reserved, inUse); err != nil {
		return err
	}
	switch {
	case live != p.live:
		return fmt.Errorf("direct pool: %d allocations of %d B in use, recorded %d of %d B", inUse, live, p.usage.NumberAllocs, p.live)
	case n != cached || m != cached:
		return fmt.Errorf("direct pool: %d cached allocations, cache lists hold %d and %d", cached, n, m)
	}
	return nil
}
