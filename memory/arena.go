package memory

import (
	"errors"
	"fmt"
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
	if pg.live > 0 && !p.live.free(int(k)) {
		return 0, false, nil
	}
	if !pg.held {
		dp, err := p.openPage(p.cfg.pages[slot.Page], lazy)
		if err != nil {
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

func (p *arenaPool) free(ref int32, requested uint64) {
	s := p.cfg.slots[ref]
	p.live.remove(int(ref))
	p.pages[s.Page].live--
	p.uncountAlloc(requested, s.Size)
}

func (p *arenaPool) resolve(ref int32) (vkruntime.StorageHandle, error) {
	s := p.cfg.slots[ref]
	pg := &p.pages[s.Page]
	if err := p.mapPage(&pg.devicePage); err != nil {
		return vkruntime.StorageHandle{}, err
	}
	return vkruntime.StorageHandle{ID: pg.handle.ID, Offset: s.Offset, Size: s.Size}, nil
}

func (p *arenaPool) locate(ref int32) (int, uint64, uint64) {
	s := p.cfg.slots[ref]
	return int(s.Page), s.Offset, s.Size
}

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
	// The live places, page by page: inside their page, never overlapping.
	inPage := make([]int, len(p.pages))
	var err error
	prevEnd := uint64(0)
	p.live.each(func(off, end uint64) {
		i := sort.Search(len(p.cfg.pageStart), func(i int) bool { return p.cfg.pageStart[i] > off }) - 1
		if err == nil && (off < prevEnd || end > p.cfg.pageStart[i]+p.cfg.pages[i]) {
			err = fmt.Errorf("arena: page %d ranges overlap or pass the page at %d", i, off-p.cfg.pageStart[i])
		}
		prevEnd = end
		inPage[i]++
	})
	if err != nil {
		return err
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
