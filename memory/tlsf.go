package memory

import (
	"fmt"
	"math/bits"
)

// tlsfRange places blocks in one address range by two-level segregated fit
// (TLSF, Masmano et al. 2004, the policy of AMD's Vulkan Memory Allocator):
// free blocks sit in bins by size class, sixteen to each power of two, and
// two levels of bitmaps find the first non-empty bin whose every block fits
// a size in a few instructions. The size's own bin is tried first, its
// first few blocks, so a block of nearly the right size is not passed over
// for a larger one. Free neighbours coalesce at once. Placement depends only
// on the sequence of calls: the same stream gets the same offsets.
type tlsfRange struct {
	blocks   []tlsfBlock
	spare    int32 // head of the chain of unused block slots, linked by nextFree
	first    int32 // the block at the lowest address: 0 until prepend
	flBitmap uint64
	slBitmap [64]uint16
	heads    [64 << tlsfSLBits]int32
}

const (
	// tlsfSLBits: each power of two splits into 1<<tlsfSLBits bins.
	tlsfSLBits = 4
	// tlsfOwnBinScan is how many blocks of a size's own bin are tried
	// before the next bin's head, which is sure to fit.
	tlsfOwnBinScan = 4
	// tlsfMinSize is the least block size: sizes below it share bin 0.
	tlsfMinSize = 1 << tlsfSLBits
)

type tlsfBlock struct {
	offset, size       uint64
	prevPhys, nextPhys int32 // neighbours by address, none at the ends
	prevFree, nextFree int32 // the bin's list while free
	bin                int16 // the bin while free
	free               bool
}

func newTLSFRange(size uint64) tlsfRange {
	r, _ := newTLSFRangeOf([]tlsfSpan{{size: size, free: true}})
	return r
}

// tlsfSpan is a block of a range newTLSFRangeOf builds.
type tlsfSpan struct {
	size uint64
	free bool
}

// newTLSFRangeOf is a range tiled by spans, in address order from 0, and
// the blocks they became, in their order. No two free spans touch.
func newTLSFRangeOf(spans []tlsfSpan) (tlsfRange, []int32) {
	r := tlsfRange{spare: none, first: none}
	for i := range r.heads {
		r.heads[i] = none
	}
	ids := make([]int32, len(spans))
	prev, at := int32(none), uint64(0)
	for i, s := range spans {
		b := r.newBlock()
		r.blocks[b] = tlsfBlock{offset: at, size: s.size, prevPhys: prev, nextPhys: none}
		if prev == none {
			r.first = b
		} else {
			r.blocks[prev].nextPhys = b
		}
		if s.free {
			r.insertFree(b)
		}
		ids[i], prev, at = b, b, at+s.size
	}
	return r, ids
}

// tlsfBin is the bin of a size: its power of two and the next four bits.
func tlsfBin(size uint64) int {
	size = max(size, tlsfMinSize)
	fl := bits.Len64(size) - 1
	sl := int(size>>(uint(fl)-tlsfSLBits)) & (1<<tlsfSLBits - 1)
	return fl<<tlsfSLBits | sl
}

func (r *tlsfRange) insertFree(b int32) {
	blk := &r.blocks[b]
	bin := tlsfBin(blk.size)
	head := r.heads[bin]
	blk.free, blk.prevFree, blk.nextFree, blk.bin = true, none, head, int16(bin)
	if head != none {
		r.blocks[head].prevFree = b
	}
	r.heads[bin] = b
	r.flBitmap |= 1 << (bin >> tlsfSLBits)
	r.slBitmap[bin>>tlsfSLBits] |= 1 << (bin & (1<<tlsfSLBits - 1))
}

func (r *tlsfRange) removeFree(b int32) {
	blk := &r.blocks[b]
	blk.free = false
	if blk.nextFree != none {
		r.blocks[blk.nextFree].prevFree = blk.prevFree
	}
	if blk.prevFree != none {
		r.blocks[blk.prevFree].nextFree = blk.nextFree
		return
	}
	bin := int(blk.bin)
	r.heads[bin] = blk.nextFree
	if blk.nextFree == none {
		fl := bin >> tlsfSLBits
		r.slBitmap[fl] &^= 1 << (bin & (1<<tlsfSLBits - 1))
		if r.slBitmap[fl] == 0 {
			r.flBitmap &^= 1 << fl
		}
	}
}

// find is a free block of at least size, or none.
func (r *tlsfRange) find(size uint64) int32 {
	bin := tlsfBin(size)
	n := 0
	for b := r.heads[bin]; b != none && n < tlsfOwnBinScan; b, n = r.blocks[b].nextFree, n+1 {
		if r.blocks[b].size >= size {
			return b
		}
	}
	// Every block of a later bin fits.
	bin++
	fl, sl := bin>>tlsfSLBits, uint(bin&(1<<tlsfSLBits-1))
	if fl < 64 {
		if m := r.slBitmap[fl] & (^uint16(0) << sl); m != 0 {
			return r.heads[fl<<tlsfSLBits|bits.TrailingZeros16(m)]
		}
	}
	if fl+1 >= 64 {
		return none
	}
	m := r.flBitmap & (^uint64(0) << uint(fl+1))
	if m == 0 {
		return none
	}
	fl = bits.TrailingZeros64(m)
	return r.heads[fl<<tlsfSLBits|bits.TrailingZeros16(r.slBitmap[fl])]
}

// binFrom is the first bin at or past bin holding a free block, or -1.
// find walks to the next bin the same way, written out: it does not
// inline, and find calling it cost llama_generate's replay, nearly all
// find, 0.4 ns an event (vkrt replay --bench, four rounds: 28.5–29.0
// against 28.4–28.5).
func (r *tlsfRange) binFrom(bin int) int {
	fl, sl := bin>>tlsfSLBits, uint(bin&(1<<tlsfSLBits-1))
	if fl >= 64 {
		return -1
	}
	if m := r.slBitmap[fl] & (^uint16(0) << sl); m != 0 {
		return fl<<tlsfSLBits | bits.TrailingZeros16(m)
	}
	if fl+1 >= 64 {
		return -1
	}
	m := r.flBitmap & (^uint64(0) << uint(fl+1))
	if m == 0 {
		return -1
	}
	fl = bits.TrailingZeros64(m)
	return fl<<tlsfSLBits | bits.TrailingZeros16(r.slBitmap[fl])
}

// largestFree appends to into, up to its capacity, free blocks from the
// largest bins down, each bin's in its list's order: the blocks find
// reaches last, as it takes the smallest bin that fits.
func (r *tlsfRange) largestFree(into []int32) []int32 {
	for fls := r.flBitmap; fls != 0 && len(into) < cap(into); {
		fl := 63 - bits.LeadingZeros64(fls)
		fls &^= 1 << uint(fl)
		for sls := r.slBitmap[fl]; sls != 0 && len(into) < cap(into); {
			sl := 15 - bits.LeadingZeros16(sls)
			sls &^= 1 << uint(sl)
			for b := r.heads[fl<<tlsfSLBits|sl]; b != none && len(into) < cap(into); b = r.blocks[b].nextFree {
				into = append(into, b)
			}
		}
	}
	return into
}

func (r *tlsfRange) newBlock() int32 {
	if r.spare != none {
		b := r.spare
		r.spare = r.blocks[b].nextFree
		return b
	}
	r.blocks = append(r.blocks, tlsfBlock{})
	return int32(len(r.blocks) - 1)
}

// findAny is find that tries every block of the size's own bin: a free
// block of at least size, if there is one. It is the last resort, where
// find's few tries may pass the only block that fits.
func (r *tlsfRange) findAny(size uint64) int32 {
	for b := r.heads[tlsfBin(size)]; b != none; b = r.blocks[b].nextFree {
		if r.blocks[b].size >= size {
			return b
		}
	}
	return r.find(size)
}

// allocAny is alloc by findAny.
func (r *tlsfRange) allocAny(size uint64) (b int32, off uint64, ok bool) {
	if b = r.findAny(size); b == none {
		return 0, 0, false
	}
	return r.take(b, size)
}

// alloc places size bytes at the low end of a fitting free block b, at
// off; ok is false when no free block holds them.
func (r *tlsfRange) alloc(size uint64) (b int32, off uint64, ok bool) {
	if b = r.find(size); b == none {
		return 0, 0, false
	}
	return r.take(b, size)
}

// take places size bytes at the low end of free block b, which holds them.
func (r *tlsfRange) take(b int32, size uint64) (int32, uint64, bool) {
	off := r.blocks[b].offset
	rest := r.blocks[b].size - size
	if rest == 0 {
		r.removeFree(b)
		return b, off, true
	}
	nb := r.newBlock() // may move the slab
	blk := &r.blocks[b]
	next := blk.nextPhys
	r.blocks[nb] = tlsfBlock{offset: off + size, size: rest, prevPhys: b, nextPhys: next}
	if next != none {
		r.blocks[next].prevPhys = nb
	}
	blk.nextPhys, blk.size = nb, size
	if blk.prevFree == none && tlsfBin(rest) == int(blk.bin) {
		// The rest would go first in b's bin, where b was.
		r.replaceFree(b, nb)
	} else {
		r.removeFree(b)
		r.insertFree(nb)
	}
	return b, off, true
}

// replaceFree puts block nb in free block b's place in its bin, b leaving
// it: what removing b and inserting nb does when b is first in nb's bin,
// without touching the bitmaps.
func (r *tlsfRange) replaceFree(b, nb int32) {
	blk, n := &r.blocks[b], &r.blocks[nb]
	n.free, n.prevFree, n.nextFree, n.bin = true, blk.prevFree, blk.nextFree, blk.bin
	blk.free = false
	if n.nextFree != none {
		r.blocks[n.nextFree].prevFree = nb
	}
	if n.prevFree != none {
		r.blocks[n.prevFree].nextFree = nb
	} else {
		r.heads[n.bin] = nb
	}
}

func (r *tlsfRange) dropBlock(b int32) {
	r.blocks[b] = tlsfBlock{nextFree: r.spare}
	r.spare = b
}

// release frees block b, merging it with free neighbours, and returns the
// free block it became part of.
func (r *tlsfRange) release(b int32) int32 {
	blk := &r.blocks[b]
	if n := blk.nextPhys; n != none && r.blocks[n].free {
		r.removeFree(n)
		nb := &r.blocks[n]
		blk.size += nb.size
		blk.nextPhys = nb.nextPhys
		if nb.nextPhys != none {
			r.blocks[nb.nextPhys].prevPhys = b
		}
		r.dropBlock(n)
	}
	if p := blk.prevPhys; p != none && r.blocks[p].free {
		r.removeFree(p)
		pb := &r.blocks[p]
		pb.size += blk.size
		pb.nextPhys = blk.nextPhys
		if blk.nextPhys != none {
			r.blocks[blk.nextPhys].prevPhys = p
		}
		r.dropBlock(b)
		b = p
	}
	r.insertFree(b)
	return b
}

// check walks the range: blocks tile [0, size) in address order, free ones
// never touch, and every free block is in its bin.
func (r *tlsfRange) check(size uint64) (used int, err error) {
	var end uint64
	prev := int32(none)
	inBins := 0
	for bin, h := range r.heads {
		for b := h; b != none; b = r.blocks[b].nextFree {
			if !r.blocks[b].free || tlsfBin(r.blocks[b].size) != bin {
				return 0, fmt.Errorf("tlsf: block %d in bin %d is not a free block of that bin", b, bin)
			}
			inBins++
		}
	}
	free := 0
	lastFree := false
	for b := r.first; b != none; b = r.blocks[b].nextPhys {
		blk := &r.blocks[b]
		switch {
		case blk.prevPhys != prev:
			return 0, fmt.Errorf("tlsf: block %d has prev %d, want %d", b, blk.prevPhys, prev)
		case blk.offset != end || blk.size == 0:
			return 0, fmt.Errorf("tlsf: block %d at %d (%d B), want it at %d", b, blk.offset, blk.size, end)
		case blk.free && lastFree:
			return 0, fmt.Errorf("tlsf: free blocks at %d not coalesced", blk.offset)
		}
		if blk.free {
			free++
		} else {
			used++
		}
		lastFree = blk.free
		end = blk.offset + blk.size
		prev = b
	}
	if end != size || free != inBins {
		return 0, fmt.Errorf("tlsf: blocks cover %d of %d B; %d free blocks, %d in bins", end, size, free, inBins)
	}
	return used, nil
}

// end is where the last block in use ends: 0 with nothing placed.
func (r *tlsfRange) end() uint64 {
	blk := &r.blocks[r.last()]
	if blk.free {
		return blk.offset
	}
	return blk.offset + blk.size
}

// last is the block at the highest address. The first block starts at
// offset 0, so it never merges into a block below it.
func (r *tlsfRange) last() int32 {
	b := r.first
	for r.blocks[b].nextPhys != none {
		b = r.blocks[b].nextPhys
	}
	return b
}

// extend adds fence bytes in use and then size free bytes past the end of
// the range, and returns the fence's block: what is placed in the new
// bytes never merges with, or spans into, the blocks below the fence.
func (r *tlsfRange) extend(fence, size uint64) int32 {
	last := r.last()
	end := r.blocks[last].offset + r.blocks[last].size
	f := r.newBlock()
	r.blocks[f] = tlsfBlock{offset: end, size: fence, prevPhys: last, nextPhys: none}
	r.blocks[last].nextPhys = f
	b := r.newBlock()
	r.blocks[b] = tlsfBlock{offset: end + fence, size: size, prevPhys: f, nextPhys: none}
	r.blocks[f].nextPhys = b
	r.insertFree(b)
	return f
}

// unprepend undoes prepend(size, …) once the blocks below size are only
// the used ones prepend laid (used of them) and free ones: those go, the
// free block across size starts at it, and every block moves size bytes
// down. It reports false, changing nothing, where that is not so.
func (r *tlsfRange) unprepend(size uint64, used int) bool {
	b := r.first
	for ; b != none && r.blocks[b].offset+r.blocks[b].size <= size; b = r.blocks[b].nextPhys {
		if !r.blocks[b].free {
			used--
		}
	}
	if b == none || used != 0 || (r.blocks[b].offset < size && !r.blocks[b].free) {
		return false
	}
	for r.first != b {
		next := r.blocks[r.first].nextPhys
		if r.blocks[r.first].free {
			r.removeFree(r.first)
		}
		r.dropBlock(r.first)
		r.first = next
	}
	blk := &r.blocks[b]
	blk.prevPhys = none
	if blk.offset < size {
		r.removeFree(b)
		blk.size -= size - blk.offset
		blk.offset = size
		r.insertFree(b)
	}
	for ; b != none; b = r.blocks[b].nextPhys {
		r.blocks[b].offset -= size
	}
	return true
}

// cut ends the range where block fence, in use, begins: fence and the
// free block above it, the last, go.
func (r *tlsfRange) cut(fence int32) {
	top, below := r.blocks[fence].nextPhys, r.blocks[fence].prevPhys
	r.removeFree(top)
	r.dropBlock(top)
	r.blocks[below].nextPhys = none
	r.dropBlock(fence)
}

// shrink makes the range size bytes long, size at least end(): the free
// block at its top gives up what lies past size.
func (r *tlsfRange) shrink(size uint64) {
	b := r.last()
	blk := &r.blocks[b]
	if !blk.free || size < blk.offset {
		panic(fmt.Sprintf("memory: a TLSF range shrinks to %d B below its last reservation", size))
	}
	r.removeFree(b)
	if size == blk.offset {
		if prev := blk.prevPhys; prev != none {
			r.blocks[prev].nextPhys = none
			r.dropBlock(b)
			return
		}
	}
	blk.size = size - blk.offset
	r.insertFree(b)
}

// prepend makes the range size bytes longer at its low end: every block
// moves size bytes up, and [0, size) becomes blocks in use where used says
// (intervals in address order, apart, inside it) and free between them. It
// returns the blocks in use, in used's order. Blocks keep their numbers.
func (r *tlsfRange) prepend(size uint64, used [][2]uint64) []int32 {
	if size == 0 {
		return nil
	}
	for b := r.first; b != none; b = r.blocks[b].nextPhys {
		r.blocks[b].offset += size
	}
	ids := make([]int32, 0, len(used))
	prev, at := int32(none), uint64(0)
	link := func(off, n uint64, free bool) int32 {
		b := r.newBlock()
		r.blocks[b] = tlsfBlock{offset: off, size: n, prevPhys: prev, nextPhys: none}
		if prev == none {
			r.first = b
		} else {
			r.blocks[prev].nextPhys = b
		}
		if free {
			r.insertFree(b)
		}
		prev = b
		return b
	}
	old := r.first
	for _, u := range used {
		if u[0] > at {
			link(at, u[0]-at, true)
		}
		ids = append(ids, link(u[0], u[1]-u[0], false))
		at = u[1]
	}
	if ob := &r.blocks[old]; at < size && ob.free {
		// The gap below the old first block is free as it is: one block.
		r.removeFree(old)
		ob.offset, ob.size, ob.prevPhys = at, ob.size+size-at, prev
		r.insertFree(old)
	} else {
		if at < size {
			link(at, size-at, true)
		}
		r.blocks[old].prevPhys = prev
	}
	if prev == none {
		r.first = old
	} else {
		r.blocks[prev].nextPhys = old
	}
	return ids
}
