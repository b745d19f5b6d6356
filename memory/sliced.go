package memory

import (
	"fmt"

	vkruntime "github.com/vkrt/vkrt/runtime"
)

// slicedPool carves fixed-size pages into slices: first fit over pages in
// index order, then over a page's free blocks in address order; freed
// neighbours coalesce. An index of each page's largest free block by size
// class finds the first page that fits without scanning, and each page keeps an
// address-ordered list of its free blocks. Blocks live in a slab indexed by
// ref, so the hot path allocates nothing once warm.
type slicedPool struct {
	poolBase
	pageSize uint64
	maxSlice uint64
	pageCap
	nearPage uint64 // an uncapped pool also takes sizes in [nearPage, pageSize]; 0: no such rule
	pages    []slicedPage
	held     uint64   // pages held now
	holes    int      // released page indices below len(pages)
	tree     fitIndex // the pages' largest-free bounds
	blocks   []sliceBlock
	spare    int32 // head of the chain of unused block slots, linked by next
}

type slicedPage struct {
	devicePage
	held     bool
	first    int32  // the block at offset 0
	freeHead int32  // lowest-address free block, -1 when none
	maxFree  uint64 // at least the largest free block (see carve)
	live     int32  // live slices
}

// sliceBlock is 32 bytes, two to a cache line: the free list is singly
// linked and a used block is marked by nextFree == inUse.
type sliceBlock struct {
	offset, size uint64
	page         int32
	prev, next   int32 // neighbours by address in the page, none at the ends
	nextFree     int32 // the next free block by address, none; inUse when used
}

const (
	none  = -1
	inUse = -2
)

func (b *sliceBlock) isFree() bool { return b.nextFree != inUse }

func newSlicedPool(c poolConfig, storage vkruntime.Storage, total *Usage) *slicedPool {
	p := &slicedPool{poolBase: poolBase{storage: storage, total: total}, pageSize: c.pageSize,
		maxSlice: c.maxSlice, pageCap: pageCap{capPages: c.capPages, grow: c.grow}, spare: none, tree: newFitIndex(c.pageSize)}
	if c.capPages == 0 {
		p.nearPage = c.pageSize - c.pageSize/5
	}
	return p
}

func (p *slicedPool) accepts(size uint64) bool {
	return size <= p.maxSlice || (p.nearPage != 0 && size >= p.nearPage && size <= p.pageSize)
}

func (p *slicedPool) kind() SlicedKind {
	k := SlicedKind{PageSize: p.pageSize, MaxSliceSize: p.maxSlice}
	if p.capPages != 0 {
		c := p.capPages * p.pageSize
		k.MaxPoolSize = &c
	}
	return k
}

func (p *slicedPool) report() PoolReport { return p.reportWith(p.kind()) }

func (p *slicedPool) capacity() (uint64, uint64, bool) {
	return p.capPages * p.pageSize, p.usage.BytesInUse + p.usage.BytesPadding, p.capPages != 0
}

func (p *slicedPool) newBlock() int32 {
	if p.spare != none {
		b := p.spare
		p.spare = p.blocks[b].next
		return b
	}
	return p.growBlocks()
}

// growBlocks appends a block slot to the slab, which may move it.
func (p *slicedPool) growBlocks() int32 {
	p.blocks = append(p.blocks, sliceBlock{})
	return int32(len(p.blocks) - 1)
}

// dropBlock chains block b of the slab blocks (p.blocks) as unused. An
// unused slot has size 0; its offset, page and prev mean nothing.
func (p *slicedPool) dropBlock(blocks []sliceBlock, b int32) {
	blk := &blocks[b]
	blk.size, blk.next, blk.nextFree = 0, p.spare, inUse
	p.spare = b
}

func (p *slicedPool) reserve(size, requested uint64, lazy bool) (int32, error) {
	return p.reserveIn(size, requested, lazy, true)
}

// reserveHeld is reserve in the pages the pool holds, adding none:
// errPoolFull where none has the room.
func (p *slicedPool) reserveHeld(size, requested uint64, lazy bool) (int32, error) {
	return p.reserveIn(size, requested, lazy, false)
}

func (p *slicedPool) reserveIn(size, requested uint64, lazy, addPages bool) (int32, error) {
	for {
		pi := p.tree.first(size)
		if pi < 0 {
			if !addPages {
				return 0, errPoolFull
			}
			var err error
			if pi, err = p.addPage(lazy); err != nil {
				return 0, err
			}
		}
		// First fit in the page: the lowest-address free block that holds
		// size. The page's bound is an upper one; a miss makes it exact.
		pg := &p.pages[pi]
		blocks := p.blocks
		prevB, b := int32(none), pg.freeHead
		for b != none && blocks[b].size < size {
			prevB, b = b, blocks[b].nextFree
		}
		if b == none {
			p.tightenBound(pg, pi)
			continue
		}
		if !lazy && !pg.mapped {
			if err := p.mapPage(&pg.devicePage); err != nil {
				return 0, err
			}
		}
		p.countAlloc(requested, size)
		if p.grow && p.capPages == 0 && p.outgrown != nil {
			p.outgrown(0, p.held) // a plan's way out: everything here is past the plan
		}
		pg.live++
		// Carve from the low end of b. Its page's bound may go stale, high:
		// it is made exact only when a search misses, so taking from the
		// largest block costs no walk of the free list.
		blk := &blocks[b]
		if blk.size == size {
			if prevB == none {
				pg.freeHead = blk.nextFree
			} else {
				blocks[prevB].nextFree = blk.nextFree
			}
			blk.nextFree = inUse
			return b, nil
		}
		ref := p.spare
		if ref == none {
			ref = p.growBlocks() // moves the slab
			blocks = p.blocks
			blk = &blocks[b]
		} else {
			p.spare = blocks[ref].next
		}
		prev := blk.prev
		// Field by field: a composite literal is built on the stack and
		// copied.
		nb := &blocks[ref]
		nb.offset, nb.size, nb.page = blk.offset, size, int32(pi)
		nb.prev, nb.next, nb.nextFree = prev, b, inUse
		if prev != none {
			blocks[prev].next = ref
		} else {
			pg.first = ref
		}
		blk.prev = ref
		blk.offset += size
		blk.size -= size
		return ref, nil
	}
}

// tightenBound makes page pi's largest-free bound exact after a search
// found nothing under it.
func (p *slicedPool) tightenBound(pg *slicedPage, pi int) {
	var largest uint64
	for b := pg.freeHead; b != none; b = p.blocks[b].nextFree {
		largest = max(largest, p.blocks[b].size)
	}
	pg.maxFree = largest
	p.tree.set(pi, largest)
}

// addPage opens a page at the lowest free index.
func (p *slicedPool) addPage(lazy bool) (int, error) {
	past, err := p.admit(p.held)
	if err != nil {
		return 0, err
	}
	dp, err := p.openPage(p.pageSize, lazy)
	if err != nil {
		return 0, err
	}
	p.granted(past, p.held+1)
	pi := len(p.pages)
	if p.holes > 0 {
		for i := range p.pages {
			if !p.pages[i].held {
				pi = i
				break
			}
		}
		p.holes--
	} else {
		p.pages = append(p.pages, slicedPage{})
	}
	b := p.newBlock()
	p.blocks[b] = sliceBlock{offset: 0, size: p.pageSize, page: int32(pi), prev: none, next: none, nextFree: none}
	p.pages[pi] = slicedPage{devicePage: dp, held: true, first: b, freeHead: b, maxFree: p.pageSize}
	p.held++
	p.tree.set(pi, p.pageSize)
	return pi, nil
}

func (p *slicedPool) free(ref int32, requested uint64) {
	// The slab is not grown here: a local copy of its header spares a
	// reload after every store.
	blocks := p.blocks
	blk := &blocks[ref]
	offset, size, prev, next := blk.offset, blk.size, blk.prev, blk.next
	pi := blk.page
	pg := &p.pages[pi]
	pg.live--
	p.uncountAlloc(requested, size)
	prevFree := prev != none && blocks[prev].isFree()
	nextFree := next != none && blocks[next].isFree()
	var merged uint64
	switch {
	case prevFree && nextFree:
		// Free neighbours by address are neighbours in the free list too.
		pb, nb := &blocks[prev], &blocks[next]
		merged = pb.size + size + nb.size
		after := nb.next
		pb.size = merged
		pb.next = after
		pb.nextFree = nb.nextFree
		if after != none {
			blocks[after].prev = prev
		}
		p.dropBlock(blocks, ref)
		p.dropBlock(blocks, next)
	case prevFree:
		pb := &blocks[prev]
		merged = pb.size + size
		pb.size = merged
		pb.next = next
		if next != none {
			blocks[next].prev = prev
		}
		p.dropBlock(blocks, ref)
	case nextFree:
		nb := &blocks[next]
		merged = nb.size + size
		nb.offset = offset
		nb.size = merged
		nb.prev = prev
		if prev != none {
			blocks[prev].next = next
		} else {
			pg.first = next
		}
		p.dropBlock(blocks, ref)
	default:
		merged = size
		if q := p.prevFreeBlock(pg, ref); q == none {
			blk.nextFree = pg.freeHead
			pg.freeHead = ref
		} else {
			blk.nextFree = blocks[q].nextFree
			blocks[q].nextFree = ref
		}
	}
	if merged > pg.maxFree {
		pg.maxFree = merged
		p.tree.set(int(pi), merged)
	}
}

// prevFreeBlock finds the free block closest below a used block that has no
// free neighbour: walking back over the used run before it, and forward
// along the free list from its head, a step of each in turn, so the cost is
// the shorter of the two walks.
func (p *slicedPool) prevFreeBlock(pg *slicedPage, ref int32) int32 {
	offset := p.blocks[ref].offset
	back := p.blocks[ref].prev
	fwd := pg.freeHead
	if fwd == none || p.blocks[fwd].offset > offset {
		return none
	}
	for {
		if back == none {
			return none
		}
		if p.blocks[back].isFree() {
			return back
		}
		back = p.blocks[back].prev
		next := p.blocks[fwd].nextFree
		if next == none || p.blocks[next].offset > offset {
			return fwd
		}
		fwd = next
	}
}

func (p *slicedPool) resolve(ref int32) (vkruntime.StorageHandle, error) {
	blk := &p.blocks[ref]
	pg := &p.pages[blk.page]
	if err := p.mapPage(&pg.devicePage); err != nil {
		return vkruntime.StorageHandle{}, err
	}
	return vkruntime.StorageHandle{ID: pg.handle.ID, Offset: blk.offset, Size: blk.size}, nil
}

func (p *slicedPool) locate(ref int32) (int, uint64, uint64) {
	blk := &p.blocks[ref]
	return int(blk.page), blk.offset, blk.size
}

// cleanup returns fully free pages when explicit; sliced pools keep their
// pages otherwise.
func (p *slicedPool) cleanup(explicit bool) {
	if !explicit {
		return
	}
	for pi := range p.pages {
		pg := &p.pages[pi]
		if !pg.held || pg.live != 0 {
			continue
		}
		// The page first: where the device's Dealloc panics, the page
		// stays as it was, its block with it.
		p.closePage(&pg.devicePage)
		p.dropBlock(p.blocks, pg.first)
		*pg = slicedPage{}
		p.held--
		p.holes++
		p.tree.set(pi, 0)
	}
	for len(p.pages) > 0 && !p.pages[len(p.pages)-1].held {
		p.pages = p.pages[:len(p.pages)-1]
		p.holes--
	}
}

func (p *slicedPool) checkInvariants() error {
	var held, unmapped, live uint64
	for pi := range p.pages {
		pg := &p.pages[pi]
		if !pg.held {
			if p.tree.get(pi) != 0 {
				return fmt.Errorf("sliced pool: released page %d has %d free in the tree", pi, p.tree.get(pi))
			}
			continue
		}
		held++
		if !pg.mapped {
			unmapped++
		}
		var end, maxFree uint64
		var liveHere int32
		prev, expectFree := int32(none), pg.freeHead
		lastWasFree := false
		for b := pg.first; b != none; b = p.blocks[b].next {
			blk := &p.blocks[b]
			switch {
			case blk.page != int32(pi):
				return fmt.Errorf("sliced pool: block %d of page %d says page %d", b, pi, blk.page)
			case blk.prev != prev:
				return fmt.Errorf("sliced pool: block %d has prev %d, want %d", b, blk.prev, prev)
			case blk.offset != end:
				return fmt.Errorf("sliced pool: page %d has a gap or overlap at %d (block at %d)", pi, end, blk.offset)
			case blk.size == 0:
				return fmt.Errorf("sliced pool: page %d has an empty block at %d", pi, blk.offset)
			}
			if blk.isFree() {
				if lastWasFree {
					return fmt.Errorf("sliced pool: page %d has uncoalesced free blocks at %d", pi, blk.offset)
				}
				if expectFree != b {
					return fmt.Errorf("sliced pool: page %d free list out of address order at %d", pi, blk.offset)
				}
				expectFree = blk.nextFree
				maxFree = max(maxFree, blk.size)
			} else {
				liveHere++
			}
			lastWasFree = blk.isFree()
			end = blk.offset + blk.size
			prev = b
		}
		if expectFree != none {
			return fmt.Errorf("sliced pool: page %d free list has blocks that are not free", pi)
		}
		switch {
		case end != p.pageSize:
			return fmt.Errorf("sliced pool: page %d blocks cover %d of %d B", pi, end, p.pageSize)
		case maxFree > pg.maxFree || p.tree.get(pi) != pg.maxFree:
			return fmt.Errorf("sliced pool: page %d largest free block %d, bound %d, tree %d", pi, maxFree, pg.maxFree, p.tree.get(pi))
		case liveHere != pg.live:
			return fmt.Errorf("sliced pool: page %d has %d live blocks, recorded %d", pi, liveHere, pg.live)
		}
		live += uint64(liveHere)
	}
	switch {
	case held != p.held || held != p.pageCount:
		return fmt.Errorf("sliced pool: %d pages held, recorded %d and %d", held, p.held, p.pageCount)
	case unmapped != p.pagesUnmapped:
		return fmt.Errorf("sliced pool: %d pages unmapped, recorded %d", unmapped, p.pagesUnmapped)
	case held*p.pageSize != p.usage.BytesReserved:
		return fmt.Errorf("sliced pool: %d pages of %d B but %d B reserved", held, p.pageSize, p.usage.BytesReserved)
	case live != p.usage.NumberAllocs:
		return fmt.Errorf("sliced pool: %d live slices, usage says %d", live, p.usage.NumberAllocs)
	}
	return p.checkCap("sliced pool", held)
}
