package memory

import (
	"errors"
	"fmt"

	"github.com/google/btree"

	vkruntime "github.com/vkrt/vkrt/runtime"
)

// arenaPool places reservations where an offline plan says. Slots may share
// addresses (their planned lifetimes are disjoint), so each page keeps its
// live ranges in a B-tree by offset and a slot is taken only when its range
// is free right now: the live range starting last before the slot's end is
// the only one that can overlap it.
type arenaPool struct {
	poolBase
	cfg   *arenaConfig
	pages []arenaPage
	refs  []arenaRef
	spare []int32
	// probe is the B-tree visitor of the overlap check, bound once so the
	// hot path allocates nothing.
	probe      func(arenaRange) bool
	probeFrom  uint64
	probeFound bool
}

type arenaPage struct {
	devicePage
	held   bool
	ranges *btree.BTreeG[arenaRange] // live ranges by offset
	live   int
}

const arenaTreeDegree = 16

func arenaRangeLess(a, b arenaRange) bool { return a.offset < b.offset }

type arenaRange struct{ offset, end uint64 }

type arenaRef struct {
	page   uint32
	offset uint64
	size   uint64
}

func newArenaPool(cfg *arenaConfig, storage vkruntime.Storage, total *Usage) *arenaPool {
	p := &arenaPool{poolBase: poolBase{storage: storage, total: total}, cfg: cfg, pages: make([]arenaPage, len(cfg.pages))}
	p.probe = func(r arenaRange) bool {
		p.probeFound = r.end > p.probeFrom
		return false
	}
	return p
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
	end := slot.Offset + size
	if pg.live > 0 {
		p.probeFrom, p.probeFound = slot.Offset, false
		pg.ranges.DescendLessOrEqual(arenaRange{offset: end - 1}, p.probe)
		if p.probeFound {
			return 0, false, nil
		}
	}
	if pg.ranges == nil {
		pg.ranges = btree.NewG(arenaTreeDegree, arenaRangeLess)
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
	pg.ranges.ReplaceOrInsert(arenaRange{offset: slot.Offset, end: end})
	pg.live++
	ref = takeSlot(&p.refs, &p.spare)
	p.refs[ref] = arenaRef{page: slot.Page, offset: slot.Offset, size: size}
	p.countAlloc(requested, size)
	return ref, true, nil
}

func (p *arenaPool) free(ref int32, requested uint64) {
	r := p.refs[ref]
	pg := &p.pages[r.page]
	pg.ranges.Delete(arenaRange{offset: r.offset})
	pg.live--
	p.uncountAlloc(requested, r.size)
	p.spare = append(p.spare, ref)
}

func (p *arenaPool) resolve(ref int32) (vkruntime.StorageHandle, error) {
	r := p.refs[ref]
	pg := &p.pages[r.page]
	if err := p.mapPage(&pg.devicePage); err != nil {
		return vkruntime.StorageHandle{}, err
	}
	return vkruntime.StorageHandle{ID: pg.handle.ID, Offset: r.offset, Size: r.size}, nil
}

func (p *arenaPool) locate(ref int32) (int, uint64, uint64) {
	r := p.refs[ref]
	return int(r.page), r.offset, r.size
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
		n, prevEnd, err := 0, uint64(0), error(nil)
		if pg.ranges != nil {
			pg.ranges.Ascend(func(r arenaRange) bool {
				if r.end > pg.size || r.offset < prevEnd {
					err = fmt.Errorf("arena: page %d ranges overlap or pass the page at %d", i, r.offset)
					return false
				}
				prevEnd = r.end
				n++
				return true
			})
		}
		if err != nil {
			return err
		}
		if n != pg.live {
			return fmt.Errorf("arena: page %d has %d live ranges, recorded %d", i, n, pg.live)
		}
		live += uint64(n)
	}
	return p.checkCounts("arena", held, unmapped, reserved, live)
}
