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
	// left: a served reservation missed the plan. The run then takes no
	// slot again, and what it reserves goes to the free room of the pages
	// it holds (lend) before the fallback pools.
	left bool
	// rooms is that free room, made at the first reservation that looks
	// for it; freshRooms while that reservation is being made.
	rooms      *arenaRooms
	freshRooms bool
	// extras are reservations the plan did not place, put in the free
	// room of held pages; their refs follow the slots'. freeExtras are
	// the indexes of extras no longer live.
	extras     []arenaExtra
	freeExtras []int32
}

// arenaExtra is one reservation placed in the free room of page page, in
// the rooms' block block.
type arenaExtra struct {
	page         int
	offset, size uint64
	block        int32
	live         bool
}

// arenaRooms is the free room of an arena's held pages once the run has
// left the plan: a TLSF range over the pages laid end to end a byte apart,
// so that no free block spans two of them, with each page not held then,
// each planned place live then and each extra a block in use.
type arenaRooms struct {
	r    tlsfRange
	base []uint64 // where each page starts in r
	// whole is the block at each page's start: the whole page once nothing
	// lies in it, as nothing below it is ever free.
	whole []int32
	// places are the blocks of the planned places live when the rooms were
	// made, by where they start among the plan's offsets (slotIndex.at).
	places map[int32]int32
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
// when the run has left the plan or diverges from it here (past its end,
// another size, or the range still taken), when the slot's page is larger
// than the device can give (arenaConfig.largest), and when the device refused the slot's page
// memory, which refused says.
func (p *arenaPool) place(k uint64, size, requested uint64, lazy bool) (ref int32, hit bool, refused, err error) {
	if p.left || k >= uint64(len(p.cfg.slots)) {
		return 0, false, nil, nil
	}
	slot := p.cfg.slots[k]
	if slot.Size != size || p.cfg.pages[slot.Page] > p.cfg.largest {
		return 0, false, nil, nil
	}
	pg := &p.pages[slot.Page]
	if pg.live > 0 && !p.live.free(int(k)) {
		return 0, false, nil, nil
	}
	if !pg.held {
		dp, err := p.openPage(p.cfg.pages[slot.Page], lazy)
		if err != nil {
			if errors.Is(err, vkruntime.ErrOutOfDeviceMemory) {
				// The device has no memory for the slot's whole page: the
				// reservation misses the plan, and the fallback pools take
				// what it needs (a 128 B reservation of another stream
				// asked its slot's 1.43 GB page and failed the run).
				return 0, false, err, nil
			}
			return 0, false, nil, err
		}
		pg.devicePage, pg.held = dp, true
	} else if !lazy {
		if err := p.mapPage(&pg.devicePage); err != nil {
			return 0, false, nil, err
		}
	}
	p.live.add(int(k), size)
	pg.live++
	p.countAlloc(requested, size)
	return int32(k), true, nil, nil
}

// lend puts a reservation of size aligned bytes that missed the plan in
// the free room of a held page, by TLSF, and leaves the plan; ok is false
// where no held page has the room, and err is the device's refusal to give
// the page memory. Either way nothing placed changes. A run that left its
// plan (another run of the workload, or another stream under it) keeps
// the plan's pages for the reservations still on them: with its other
// reservations in the fallback pools beside them, generated runs of seeds
// 1–30 under the other run's plan on a device without sparse residency
// reserved 3.00× their peak (SubSlices with no plan 2.03×) in 7,070 device
// allocations; in the pages' free room first, 1.68× in 2,796. A run
// refused past them with the room free had failed: 620 MB reserved with
// 73 MB live, on a device of 889 MB that ran it with no plan.
func (p *arenaPool) lend(size, requested uint64, lazy bool) (ref int32, ok bool, err error) {
	if p.rooms == nil {
		p.rooms, p.freshRooms = p.openRooms(), true
	}
	rm := p.rooms
	b := rm.r.find(size)
	if b == none {
		b = rm.r.findAny(size)
	}
	if b == none {
		p.forgetRooms()
		return 0, false, nil
	}
	// The block is taken only once its page has memory: a refusal leaves
	// the bins in their order.
	i := pageAt(rm.base, rm.r.blocks[b].offset)
	pg := &p.pages[i]
	if !lazy {
		if err := p.mapPage(&pg.devicePage); err != nil {
			p.forgetRooms()
			return 0, false, err
		}
	}
	b, off, _ := rm.r.take(b, size)
	e := arenaExtra{page: i, offset: off - rm.base[i], size: size, block: b, live: true}
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
	p.left = true
	return int32(len(p.cfg.slots)) + at, true, nil
}

// pageAt is the page holding offset off of pages laid out from starts.
func pageAt(starts []uint64, off uint64) int {
	return sort.Search(len(starts), func(i int) bool { return starts[i] > off }) - 1
}

// forgetRooms drops rooms made for a reservation that found no room
// before the run left the plan: the run may still take its slots, which
// the rooms would not know of.
func (p *arenaPool) forgetRooms() {
	if !p.left {
		p.rooms, p.freshRooms = nil, false
	}
}

// settle is told how the reservation that may have made the rooms ended:
// one refused leaves no rooms it made behind (they would place later
// reservations otherwise than rooms made later do), one served keeps
// them.
func (p *arenaPool) settle(refused bool) {
	if p.freshRooms && refused {
		p.rooms = nil
	}
	p.freshRooms = false
}

// openRooms makes the rooms of the pages as they are now.
func (p *arenaPool) openRooms() *arenaRooms {
	rm := &arenaRooms{base: make([]uint64, len(p.pages)), whole: make([]int32, len(p.pages)), places: make(map[int32]int32, p.live.n)}
	spans := make([]tlsfSpan, 0, 2*len(p.pages)+2*p.live.n)
	place := make([]int32, 0, cap(spans)) // per span: the live place it is, or none
	add := func(size uint64, free bool, at int32) {
		spans, place = append(spans, tlsfSpan{size: size, free: free}), append(place, at)
	}
	var pos uint64
	next := p.live.first(0)
	for i, size := range p.cfg.pages {
		if i > 0 {
			add(1, false, none) // apart: free room never spans two pages
			pos++
		}
		rm.base[i], rm.whole[i] = pos, int32(len(spans))
		pos += size
		if !p.pages[i].held {
			add(size, false, none)
			continue
		}
		start, at := p.cfg.pageStart[i], uint64(0)
		for ; next >= 0 && p.live.x.starts[next] < start+size; next = p.live.first(next + 1) {
			off, end := p.live.x.starts[next]-start, p.live.ends[next]-start
			if off > at {
				add(off-at, true, none)
			}
			add(end-off, false, int32(next))
			at = end
		}
		if at < size {
			add(size-at, true, none)
		}
	}
	var ids []int32
	rm.r, ids = newTLSFRangeOf(spans)
	for i := range rm.whole {
		rm.whole[i] = ids[rm.whole[i]]
	}
	for j, at := range place {
		if at != none {
			rm.places[at] = ids[j]
		}
	}
	return rm
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
		p.rooms.r.release(e.block)
		p.freeExtras = append(p.freeExtras, ref-int32(len(p.cfg.slots)))
		p.pages[e.page].live--
		p.uncountAlloc(requested, e.size)
		return
	}
	s := p.cfg.slots[ref]
	p.live.remove(int(ref))
	if p.rooms != nil {
		at := p.cfg.index.at[ref]
		if b, ok := p.rooms.places[at]; ok {
			delete(p.rooms.places, at)
			p.rooms.r.release(b)
		}
	}
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
			if p.rooms != nil {
				// Nothing lies in the page: its room is one free block,
				// now taken for good.
				p.rooms.r.take(p.rooms.whole[i], p.cfg.pages[i])
			}
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
	if err := p.checkRooms(); err != nil {
		return err
	}
	slices.SortFunc(ranges, func(a, b [2]uint64) int { return cmp.Compare(a[0], b[0]) })
	prevEnd := uint64(0)
	for _, r := range ranges {
		off, end := r[0], r[1]
		i := pageAt(p.cfg.pageStart, off)
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

// checkRooms checks the rooms' range: each page starts at its base with
// its whole block, each live extra and planned place is its block's (every
// live place is known, as the run took none since the rooms were made),
// and the free bytes are the held pages' less what lies in them.
func (p *arenaPool) checkRooms() error {
	rm := p.rooms
	if rm == nil {
		if len(p.extras) != len(p.freeExtras) {
			return fmt.Errorf("arena: live extras and no rooms")
		}
		return nil
	}
	last := len(p.pages) - 1
	if _, err := rm.r.check(rm.base[last] + p.cfg.pages[last]); err != nil {
		return fmt.Errorf("arena rooms: %w", err)
	}
	var held, lying uint64
	for i := range p.pages {
		if rm.r.blocks[rm.whole[i]].offset != rm.base[i] {
			return fmt.Errorf("arena rooms: page %d's first block is not at its start", i)
		}
		if p.pages[i].held {
			held += p.cfg.pages[i]
		}
	}
	for _, e := range p.extras {
		if !e.live {
			continue
		}
		if b := &rm.r.blocks[e.block]; b.free || b.offset != rm.base[e.page]+e.offset || b.size != e.size {
			return fmt.Errorf("arena rooms: extra at %d of page %d is not its block's", e.offset, e.page)
		}
		lying += e.size
	}
	known := 0
	for at, blk := range rm.places {
		start, end := p.live.x.starts[at], p.live.ends[at]
		i := pageAt(p.cfg.pageStart, start)
		if b := &rm.r.blocks[blk]; b.free || b.size != end-start || b.offset != rm.base[i]+start-p.cfg.pageStart[i] || !p.live.has(int(at)) {
			return fmt.Errorf("arena rooms: the place at %d is not its block's", start)
		}
		lying += end - start
		known++
	}
	if known != p.live.n {
		return fmt.Errorf("arena rooms: %d of %d live places known", known, p.live.n)
	}
	for b := rm.r.first; b != none; b = rm.r.blocks[b].nextPhys {
		if rm.r.blocks[b].free {
			lying += rm.r.blocks[b].size
		}
	}
	if lying != held {
		return fmt.Errorf("arena rooms: %d B free and in use in held pages of %d B", lying, held)
	}
	return nil
}
