// Package tlsfref is the yardstick vkrt's pools are timed against: the
// placement of AMD's Vulkan Memory Allocator (VMA) in a virtual block,
// written again in Go so that both run in one process on one machine.
//
// VMA's virtual blocks place by two-level segregated fit (TLSF, Masmano et
// al. 2004) as its block metadata does:
//   - sizes up to 256 B form memory class 0, split into 32 lists of 8 B;
//     a larger size's class is its highest set bit less 7, split by the
//     next 5 bits into 32 lists;
//   - a bitmap of classes with a free block and, per class, a bitmap of its
//     lists with one, so the first list at or above a size is a few
//     instructions away;
//   - the free space at the end of the block (the "null block") is on no
//     list: it is tried after the lists that surely fit;
//   - the default strategy of a virtual allocation: the first block of the
//     first list one step above the size (every block there fits), then the
//     null block, then the size's own list block by block, then every later
//     list;
//   - offsets aligned up, the gap given to a free neighbour below or kept
//     as a free block of its own;
//   - a freed block merges with its free neighbours by address at once.
//
// [Measure] replays a [trace.Trace] through one [Block] as VMA was measured
// on the shipped streams (one 32 GiB block, alignment 32) and times it as
// [replay.Measure] times vkrt's pools: nanoseconds per allocate-or-free
// event.
package tlsfref

import (
	"errors"
	"fmt"
	"math/bits"
)

const (
	// secondLevelBits: each memory class splits into 1<<secondLevelBits
	// lists.
	secondLevelBits = 5
	// smallSize is the largest size of memory class 0.
	smallSize = 256
	// smallStep is the width of one list of memory class 0.
	smallStep = smallSize >> secondLevelBits
	// classShift: memory class c >= 1 holds sizes whose highest set bit is
	// c + classShift.
	classShift = 7
	// maxClasses bounds the memory classes of a 64-bit size.
	maxClasses = 65 - classShift
)

// none marks a missing block link.
const none = int32(-1)

// ErrOutOfSpace: the block has no free range that fits the size and its
// alignment. The typed form is *OutOfSpaceError.
var ErrOutOfSpace = errors.New("tlsfref: out of space")

// ErrBadHandle: a Free of a handle that names no live allocation.
var ErrBadHandle = errors.New("tlsfref: not a live allocation")

// ErrBadArgument: a block of size 0, an alignment that is not a power of
// two, or an allocation of 0 bytes.
var ErrBadArgument = errors.New("tlsfref: bad argument")

// OutOfSpaceError is an allocation the block could not place.
type OutOfSpaceError struct {
	Size      uint64 // asked
	FreeBytes uint64 // free in the block, in every range together
}

func (e *OutOfSpaceError) Error() string {
	return fmt.Sprintf("tlsfref: no free range fits %d B (%d B free in all)", e.Size, e.FreeBytes)
}

// Is makes an *OutOfSpaceError match ErrOutOfSpace.
func (e *OutOfSpaceError) Is(target error) bool { return target == ErrOutOfSpace }

// Handle names a live allocation until it is freed; a freed handle's slot
// is used again.
type Handle int32

// Allocation is a placed range.
type Allocation struct {
	Handle Handle
	Offset uint64
}

// node is one range of the block, free or taken, in address order.
type node struct {
	offset, size       uint64
	prevPhys, nextPhys int32
	// prevFree, nextFree link the list a free block is on; nextFree also
	// chains unused node slots.
	prevFree, nextFree int32
	free               bool
}

// Block is one address range placed by VMA's TLSF. It is not safe for
// concurrent use.
type Block struct {
	size, alignment uint64
	nodes           []node
	spare           int32 // head of the chain of unused node slots
	null            int32 // the free range at the end, on no list
	lists           []int32
	classBitmap     uint64
	listBitmaps     [maxClasses]uint32
	freeCount       int    // free blocks on lists
	freeBytes       uint64 // their bytes
	allocs          int
	highWater       uint64 // the highest end ever allocated
}

// New is a block of size bytes whose allocations start at multiples of
// alignment.
func New(size, alignment uint64) (*Block, error) {
	if size == 0 || alignment == 0 || alignment&(alignment-1) != 0 {
		return nil, fmt.Errorf("%w: block of %d B, alignment %d", ErrBadArgument, size, alignment)
	}
	class := memoryClass(size)
	lists := 1 + 1<<secondLevelBits
	if class != 0 {
		lists += (int(class)-1)<<secondLevelBits + int(secondIndex(size, class))
	}
	b := &Block{size: size, alignment: alignment, spare: none, lists: make([]int32, lists)}
	for i := range b.lists {
		b.lists[i] = none
	}
	b.null = b.newNode(node{offset: 0, size: size, prevPhys: none, nextPhys: none, free: true})
	return b, nil
}

func memoryClass(size uint64) uint8 {
	if size > smallSize {
		return uint8(bits.Len64(size) - 1 - classShift)
	}
	return 0
}

func secondIndex(size uint64, class uint8) uint32 {
	if class == 0 {
		return uint32((size - 1) / smallStep)
	}
	return uint32(size>>(class+classShift-secondLevelBits)) ^ 1<<secondLevelBits
}

func listIndex(class uint8, second uint32) int {
	if class == 0 {
		return int(second)
	}
	return (int(class)-1)<<secondLevelBits + int(second) + 1<<secondLevelBits
}

func listOf(size uint64) int {
	c := memoryClass(size)
	return listIndex(c, secondIndex(size, c))
}

func (b *Block) newNode(n node) int32 {
	if b.spare != none {
		i := b.spare
		b.spare = b.nodes[i].nextFree
		b.nodes[i] = n
		return i
	}
	b.nodes = append(b.nodes, n)
	return int32(len(b.nodes) - 1)
}

func (b *Block) releaseNode(i int32) {
	// An unused slot links to nothing by address, which no live
	// allocation does (the null block follows every one).
	b.nodes[i] = node{prevPhys: none, nextPhys: none, nextFree: b.spare}
	b.spare = i
}

func (b *Block) insertFree(i int32) {
	n := &b.nodes[i]
	c := memoryClass(n.size)
	s := secondIndex(n.size, c)
	l := listIndex(c, s)
	n.free, n.prevFree, n.nextFree = true, none, b.lists[l]
	b.lists[l] = i
	if n.nextFree != none {
		b.nodes[n.nextFree].prevFree = i
	} else {
		b.listBitmaps[c] |= 1 << s
		b.classBitmap |= 1 << c
	}
	b.freeCount++
	b.freeBytes += n.size
}

func (b *Block) removeFree(i int32) {
	n := &b.nodes[i]
	if n.nextFree != none {
		b.nodes[n.nextFree].prevFree = n.prevFree
	}
	if n.prevFree != none {
		b.nodes[n.prevFree].nextFree = n.nextFree
	} else {
		c := memoryClass(n.size)
		s := secondIndex(n.size, c)
		b.lists[listIndex(c, s)] = n.nextFree
		if n.nextFree == none {
			b.listBitmaps[c] &^= 1 << s
			if b.listBitmaps[c] == 0 {
				b.classBitmap &^= 1 << c
			}
		}
	}
	n.free = false
	b.freeCount--
	b.freeBytes -= n.size
}

// firstFree is the first non-empty list at or above size's own, and its
// head; list is len(b.lists) when there is none.
func (b *Block) firstFree(size uint64) (list int, head int32) {
	c := memoryClass(size)
	m := b.listBitmaps[c] & (^uint32(0) << secondIndex(size, c))
	if m == 0 {
		classes := b.classBitmap & (^uint64(0) << (c + 1))
		if classes == 0 {
			return len(b.lists), none
		}
		c = uint8(bits.TrailingZeros64(classes))
		m = b.listBitmaps[c]
	}
	list = listIndex(c, uint32(bits.TrailingZeros32(m)))
	return list, b.lists[list]
}

// fits is the aligned offset of size in free block i, if it fits there.
func (b *Block) fits(i int32, size uint64) (uint64, bool) {
	n := &b.nodes[i]
	aligned := (n.offset + b.alignment - 1) &^ (b.alignment - 1)
	return aligned, n.size >= size+(aligned-n.offset)
}

// Allocate places size bytes.
func (b *Block) Allocate(size uint64) (Allocation, error) {
	if size == 0 {
		return Allocation{}, fmt.Errorf("%w: an allocation of 0 B", ErrBadArgument)
	}
	if size > b.freeBytes+b.nodes[b.null].size {
		return Allocation{}, &OutOfSpaceError{Size: size, FreeBytes: b.freeBytes + b.nodes[b.null].size}
	}
	if b.freeCount == 0 {
		if at, ok := b.fits(b.null, size); ok {
			return b.take(b.null, at, size), nil
		}
		return Allocation{}, &OutOfSpaceError{Size: size, FreeBytes: b.nodes[b.null].size}
	}
	// One list step above the size: every block there is large enough
	// unless alignment eats into it.
	above := size
	switch {
	case size > smallSize:
		above += 1 << (bits.Len64(size) - 1 - secondLevelBits)
	case size > smallSize-smallStep:
		above = smallSize + 1
	default:
		above += smallStep
	}
	list, i := b.firstFree(above)
	for ; i != none; i = b.nodes[i].nextFree {
		if at, ok := b.fits(i, size); ok {
			return b.take(i, at, size), nil
		}
	}
	if at, ok := b.fits(b.null, size); ok {
		return b.take(b.null, at, size), nil
	}
	_, i = b.firstFree(size)
	for ; i != none; i = b.nodes[i].nextFree {
		if at, ok := b.fits(i, size); ok {
			return b.take(i, at, size), nil
		}
	}
	for list++; list < len(b.lists); list++ {
		for i = b.lists[list]; i != none; i = b.nodes[i].nextFree {
			if at, ok := b.fits(i, size); ok {
				return b.take(i, at, size), nil
			}
		}
	}
	return Allocation{}, &OutOfSpaceError{Size: size, FreeBytes: b.freeBytes + b.nodes[b.null].size}
}

// take allocates size bytes at offset at of free block i.
func (b *Block) take(i int32, at, size uint64) Allocation {
	if i != b.null {
		b.removeFree(i)
	}
	if gap := at - b.nodes[i].offset; gap != 0 {
		// The gap below the aligned offset goes to the free block below,
		// or becomes one.
		p := b.nodes[i].prevPhys
		if b.nodes[p].free {
			if listOf(b.nodes[p].size) != listOf(b.nodes[p].size+gap) {
				b.removeFree(p)
				b.nodes[p].size += gap
				b.insertFree(p)
			} else {
				b.nodes[p].size += gap
				b.freeBytes += gap
			}
		} else {
			g := b.newNode(node{offset: b.nodes[i].offset, size: gap, prevPhys: p, nextPhys: i})
			b.nodes[p].nextPhys = g
			b.nodes[i].prevPhys = g
			b.insertFree(g)
		}
		b.nodes[i].size -= gap
		b.nodes[i].offset = at
	}
	n := &b.nodes[i]
	if n.size > size {
		rest := b.newNode(node{offset: at + size, size: b.nodes[i].size - size, prevPhys: i, nextPhys: b.nodes[i].nextPhys})
		n = &b.nodes[i] // newNode may have moved the slice
		n.nextPhys, n.size = rest, size
		if i == b.null {
			b.null = rest
			b.nodes[rest].free = true
		} else {
			b.nodes[b.nodes[rest].nextPhys].prevPhys = rest
			b.insertFree(rest)
		}
	} else if i == b.null {
		// The end is used up to the last byte: an empty null block follows.
		b.null = b.newNode(node{offset: at + size, prevPhys: i, nextPhys: none, free: true})
		n = &b.nodes[i]
		n.nextPhys = b.null
	}
	n.free = false
	b.allocs++
	b.highWater = max(b.highWater, at+size)
	return Allocation{Handle: Handle(i), Offset: at}
}

// Free releases an allocation, merging it with its free neighbours.
func (b *Block) Free(h Handle) error {
	i := int32(h)
	if i < 0 || int(i) >= len(b.nodes) || b.nodes[i].free || b.nodes[i].nextPhys == none {
		return fmt.Errorf("%w: handle %d", ErrBadHandle, h)
	}
	b.allocs--
	if p := b.nodes[i].prevPhys; p != none && b.nodes[p].free {
		b.removeFree(p)
		b.absorbBelow(i, p)
	}
	next := b.nodes[i].nextPhys
	switch {
	case !b.nodes[next].free:
		b.insertFree(i)
	case next == b.null:
		b.absorbBelow(next, i)
	default:
		b.removeFree(next)
		b.absorbBelow(next, i)
		b.insertFree(next)
	}
	return nil
}

// absorbBelow merges block p into its neighbour above, i, and drops p.
func (b *Block) absorbBelow(i, p int32) {
	n := &b.nodes[i]
	n.offset = b.nodes[p].offset
	n.size += b.nodes[p].size
	n.prevPhys = b.nodes[p].prevPhys
	if n.prevPhys != none {
		b.nodes[n.prevPhys].nextPhys = i
	}
	b.releaseNode(p)
}

// HighWater is the highest end of any allocation since the block was made:
// the size a growable block would have reached.
func (b *Block) HighWater() uint64 { return b.highWater }

// Allocations is how many allocations are live.
func (b *Block) Allocations() int { return b.allocs }

// FreeBytes is the bytes no live allocation covers.
func (b *Block) FreeBytes() uint64 { return b.freeBytes + b.nodes[b.null].size }

// Empty reports whether the block is one free range again, as it was made.
func (b *Block) Empty() bool {
	n := b.nodes[b.null]
	return n.offset == 0 && n.size == b.size && b.freeCount == 0
}
