package memory

import (
	"cmp"
	"errors"
	"fmt"
	"slices"
	"sort"

	vkruntime "github.com/vkrt/vkrt/runtime"
)

// arenaPool places reservations where an offline plan says. Slots may share
// addresses (their planned lifetimes are disjoint), so a slot is taken only
// when its range is free right now: the live places, by where they lie
// with the pages laid end to end, are asked (liveSlots). A reservation's
// ref is its slot's index: the k-th reservation since the pool was made
// is the only one to take slot k.
type arenaPool struct {
	poolBase
	cfg   *arenaConfig
	pages []arenaPage
	live  liveSlots
	// extras are reservations the plan did not place, put in the free
	// room of held pages when the device had no memory for the fallback
	// pools (placeExtra); their refs follow the slots'. freeExtras are
	// the indexes of extras no longer live.
	extras     []arenaExtra
	freeExtras []int32
}

// arenaExtra is one reservation placed in the free room of page page.
type arenaExtra struct {
	page         int
	offset, size uint64
	live         bool
}

type arenaPage struct {
	devicePage
	held bool
	live int // live ranges in the page
}

func newArenaPool(cfg *arenaConfig, storage vkruntime.Storage, total *Usage) *arenaPool {
	return &arenaPool{poolBase: poolBase{storage: storage, total: total}, cfg: cfg, pages: make([]arenaPage, len(cfg.pages)),
		live: newLiveSlots(cfg.index)}
}

// The arena is never routed to by size: the manager asks it by ordinal
// through place.
func (p *arenaPool) accepts(uint64) bool { return false }

func (p *arenaPool) reserve(uint64, uint64, bool) (int32, error) {
	return 0, errors.New("memory: the arena places reservations by plan, not by size")
}

func (p *arenaPool) capacity() (uint64, uint64, bool) { return 0, 0, false }

func (p *arenaPool) report() PoolReport {
	var bytes uint64
	for _, s := range p.cfg.pages {
		bytes += s
	}
	return p.reportWith(ArenaKind{PageBytes: bytes, Slots: uint64(len(p.cfg.slots))})
}

// place reserves the k-th planned slot for size aligned bytes; hit is false
// when the stream diverged from the plan (past its end, another size, or the
// range still taken).
func (p *arenaPool) place(k uint64, size, requested uint64, lazy bool) (ref int32, hit bool, err error) {
	if k >= uint64(len(p.cfg.slots)) {
		return 0, false, nil
	}
	slot := p.cfg.slots[k]
	if slot.Size != size {
		return 0, false, nil
	}
	pg := &p.pages[slot.Page]
	if pg.live > 0 && (!p.live.free(int(k)) || p.extraOverlaps(int(slot.Page), slot.Offset, slot.Size)) {
		return 0, false, nil
	}
	if !pg.held {
		dp, err := p.openPage(p.cfg.pages[slot.Page], lazy)
		if err != nil {
			if errors.Is(err, vkruntime.ErrOutOfDeviceMemory) {
				// The device has no memory for the slot's whole page: the
				// reservation misses the plan, and the fallback pools take
				// what it needs (a 128 B reservation of another stream
				// asked its slot's 1.43 GB page and failed the run).
				return 0, false, nil
			}
			return 0, false, err
		}
		pg.devicePage, pg.held = dp, true
	} else if !lazy {
		if err := p.mapPage(&pg.devicePage); err != nil {
			return 0, false, err
		}
	}
	p.live.add(int(k), size)
	pg.live++
	p.countAlloc(requested, size)
	return int32(k), true, nil
}

// extraOverlaps reports whether a live extra lies on [off, off+size) of
// page pg. Extras come only when the device is out of memory: few.
func (p *arenaPool) extraOverlaps(pg int, off, size uint64) bool {
	if len(p.extras) == len(p.freeExtras) {
		return false // none live: the planned run's every hit
	}
	for _, e := range p.extras {
		if e.live && e.page == pg && e.offset < off+size && off < e.offset+e.size {
			return true
		}
	}
	return false
}

// placeExtra puts a reservation of size aligned bytes the plan did not
// place in the lowest free room of a held page that fits it, when the
// device refused the fallback pools memory: a run that left its plan
// (another run of the workload) kept the plan's pages for the few
// reservations still on it, and was refused past them with the room
// free (620 MB reserved with 73 MB live, on a device of 889 MB that ran
// it with no plan). ok is false where no held page has the room.
func (p *arenaPool) placeExtra(size, requested uint64, lazy bool) (ref int32, ok bool, err error) {
	for i := range p.pages {
		pg := &p.pages[i]
		if !pg.held || p.cfg.pages[i] < size {
			continue
		}
		off, found := p.roomIn(i, size)
		if !found {
			continue
		}
		if !lazy {
			if err := p.mapPage(&pg.devicePage); err != nil {
				return 0, false, err
			}
		}
		e := arenaExtra{page: i, offset: off, size: size, live: true}
		var at int32
		if n := len(p.freeExtras); n > 0 {
			at = p.freeExtras[n-1]
			p.freeExtras = p.freeExtras[:n-1]
			p.extras[at] = e
		} else {
			at = int32(len(p.extras))
			p.extras = append(p.extras, e)
		}
		pg.live++
		p.countAlloc(requested, size)
		return int32(len(p.cfg.slots)) + at, true, nil
	}
	return 0, false, nil
}

// roomIn is the lowest offset of page i where size bytes lie clear of
// every live place and extra in it.
func (p *arenaPool) roomIn(i int, size uint64) (uint64, bool) {
	start, end := p.cfg.pageStart[i], p.cfg.pageStart[i]+p.cfg.pages[i]
	var taken [][2]uint64
	p.live.each(func(off, stop uint64) {
		if off < end && stop > start {
			taken = append(taken, [2]uint64{off - start, stop - start})
		}
	})
	for _, e := range p.extras {
		if e.live && e.page == i {
			taken = append(taken, [2]uint64{e.offset, e.offset + e.size})
		}
	}
	slices.SortFunc(taken, func(a, b [2]uint64) int { return cmp.Compare(a[0], b[0]) })
	var at uint64
	for _, r := range taken {
		if r[0] >= at && r[0]-at >= size {
			return at, true
		}
		at = max(at, r[1])
	}
	return at, p.cfg.pages[i]-min(at, p.cfg.pages[i]) >= size
}

// extra is the extra of ref, if ref is one.
func (p *arenaPool) extra(ref int32) (*arenaExtra, bool) {
	if i := int(ref) - len(p.cfg.slots); i >= 0 {
		return &p.extras[i], true
	}
	return nil, false
}

// where is ref's page, offset and size.
func (p *arenaPool) where(ref int32) (int, uint64, uint64) {
	if e, ok := p.extra(ref); ok {
		return e.page, e.offset, e.size
	}
	s := p.cfg.slots[ref]
	return int(s.Page), s.Offset, s.Size
}

func (p *arenaPool) free(ref int32, requested uint64) {
	if e, ok := p.extra(ref); ok {
		e.live = false
		p.freeExtras = append(p.freeExtras, ref-int32(len(p.cfg.slots)))
		p.pages[e.page].live--
		p.uncountAlloc(requested, e.size)
		return
	}
	s := p.cfg.slots[ref]
	p.live.remove(int(ref))
	p.pages[s.Page].live--
	p.uncountAlloc(requested, s.Size)
}

func (p *arenaPool) resolve(ref int32) (vkruntime.StorageHandle, error) {
	page, off, size := p.where(ref)
	pg := &p.pages[page]
	if err := p.mapPage(&pg.devicePage); err != nil {
		return vkruntime.StorageHandle{}, err
	}
	return vkruntime.StorageHandle{ID: pg.handle.ID, Offset: off, Size: size}, nil
}

func (p *arenaPool) locate(ref int32) (int, uint64, uint64) { return p.where(ref) }

// cleanup returns empty arena pages on an explicit cleanup only.
func (p *arenaPool) cleanup(explicit bool) {
	if !explicit {
		return
	}
	for i := range p.pages {
		pg := &p.pages[i]
		if pg.held && pg.live == 0 {
			p.closePage(&pg.devicePage)
			pg.held = false
		}
	}
}

func (p *arenaPool) checkInvariants() error {
	// The live places and extras, page by page: inside their page, never
	// overlapping.
	inPage := make([]int, len(p.pages))
	var ranges [][2]uint64
	p.live.each(func(off, end uint64) { ranges = append(ranges, [2]uint64{off, end}) })
	extras := 0
	for _, e := range p.extras {
		if e.live {
			start := p.cfg.pageStart[e.page]
			ranges = append(ranges, [2]uint64{start + e.offset, start + e.offset + e.size})
			extras++
		}
	}
	if len(p.extras)-extras != len(p.freeExtras) {
		return fmt.Errorf("arena: %d extras, %d live and %d free", len(p.extras), extras, len(p.freeExtras))
	}
	slices.SortFunc(ranges, func(a, b [2]uint64) int { return cmp.Compare(a[0], b[0]) })
	prevEnd := uint64(0)
	for _, r := range ranges {
		off, end := r[0], r[1]
		i := sort.Search(len(p.cfg.pageStart), func(i int) bool { return p.cfg.pageStart[i] > off }) - 1
		if off < prevEnd || end > p.cfg.pageStart[i]+p.cfg.pages[i] {
			return fmt.Errorf("arena: page %d ranges overlap or pass the page at %d", i, off-p.cfg.pageStart[i])
		}
		prevEnd = end
		inPage[i]++
	}
	var held, unmapped, live, reserved uint64
	for i := range p.pages {
		pg := &p.pages[i]
		if !pg.held {
			if pg.live != 0 {
				return fmt.Errorf("arena: released page %d has live ranges", i)
			}
			continue
		}
		held++
		reserved += pg.size
		if !pg.mapped {
			unmapped++
		}
		n := inPage[i]
		if n != pg.live {
			return fmt.Errorf("arena: page %d has %d live ranges, recorded %d", i, n, pg.live)
		}
		live += uint64(n)
	}
	return p.checkCounts("arena", held, unmapped, reserved, live)
}
