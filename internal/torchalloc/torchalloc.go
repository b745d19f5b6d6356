// Package torchalloc models PyTorch's CUDA caching allocator
// (c10/cuda/CUDACachingAllocator.cpp) closely enough to replay an allocation
// stream through it and read what PyTorch would have reserved: its reserved
// peak, peak live bytes and device allocations, with cudaMalloc segments
// (the default) or with expandable segments. It is the reference the
// planner's results are judged against on streams nobody ran under PyTorch.
//
// The rules modelled, as PyTorch states them:
//   - every request is rounded up to a multiple of 512 B; requests up to
//     1 MiB are small, the rest large, each kind with its own pool per stream;
//   - a request takes the smallest free block of its pool and stream that
//     fits (ties to the lower address), split when what remains is at least
//     512 B (small pool, or any pool with expandable segments) or more than
//     1 MiB (large pool); a freed block merges with free neighbours;
//   - default: with no block fitting, cudaMalloc a segment of 2 MiB for a
//     small request, 20 MiB for a large one under 10 MiB, else the request
//     rounded up to 2 MiB; each cudaMalloc is a device allocation;
//   - expandable segments: one virtual segment per stream and pool, mapped
//     in pages of 2 MiB (small pool) or 20 MiB (large pool) at the lowest
//     address that makes room (usually its end, merged with a free block
//     there); best fit counts a free block before the unmapped tail as
//     able to grow, so it is taken only when no other block fits; each
//     mapping call is a device allocation;
//   - when the device refuses memory, every cached block that can go goes
//     (whole free segments; fully free pages of expandable segments) and the
//     request is retried once, then fails with ErrOutOfMemory.
//
// Left out: max_split_size, roundup_power2_divisions and the garbage
// collection threshold (all at their defaults, which disable them),
// cross-stream uses (record_stream events), CUDA graph private pools, and
// the CUDA context and other memory outside the allocator that makes a
// real device refuse earlier than its nominal size. Where cudaMalloc puts a
// segment is not recorded either: the model lays segments out in the order
// they are made, and best fit breaks ties between equal free blocks by
// address, so a stream where such a tie decides can differ from a real run.
// Of the recorded streams only llama_generate does (default mode: 1.127×
// with 110 segments modelled, 1.129× with 111 recorded, as
// TestModelReproducesPyTorchsRecordedFigures prints; other orders of the
// segments move it, and leave every other stream as it is).
package torchalloc

import (
	"errors"
	"fmt"

	"github.com/vkrt/vkrt/dryrun/trace"
)

// Mode is how the modelled allocator gets device memory.
type Mode int

const (
	// Default: one cudaMalloc per segment.
	Default Mode = iota
	// Expandable: expandable_segments:True, segments that grow by mapping
	// physical pages into one virtual range per stream and pool.
	Expandable
)

func (m Mode) String() string {
	switch m {
	case Default:
		return "default"
	case Expandable:
		return "expandable segments"
	}
	return fmt.Sprintf("Mode(%d)", int(m))
}

// The allocator's constants, as CUDACachingAllocator.cpp names them.
const (
	minBlockSize  = 512      // kMinBlockSize: every size is a multiple
	smallSize     = 1 << 20  // kSmallSize: the largest small request
	smallBuffer   = 2 << 20  // kSmallBuffer: a small segment, a small page
	largeBuffer   = 20 << 20 // kLargeBuffer: a segment for 1-10 MiB, a large page
	minLargeAlloc = 10 << 20 // kMinLargeAlloc: from here a request gets its own size
	roundLarge    = 2 << 20  // kRoundLarge: what such a segment is rounded to
)

// H200Bytes is the memory of the device the shipped streams were recorded
// on, as the model's default device size: what an H200 leaves free to
// allocate, 143,156 MiB (150.11 GB) of its 143,771 MiB as CUDA reports it
// (nvidia-smi -q -d MEMORY, driver 580.159.04), rounded down to the
// 150 GB the replays assume for it (replay.H200), whose Vulkan heap holds
// the same 150,754,820,096 B with a budget of 150.09 GB.
const H200Bytes = 150_000_000_000

// ErrOutOfMemory: the device refused a segment or page even after the cache
// was emptied. The typed form is *OutOfMemoryError.
var ErrOutOfMemory = errors.New("torchalloc: out of device memory")

// ErrNotLive: a free names an allocation that is not live.
var ErrNotLive = errors.New("torchalloc: free of an allocation that is not live")

// OutOfMemoryError is ErrOutOfMemory with its numbers.
type OutOfMemoryError struct {
	Requested   uint64 // bytes the request needed from the device
	Reserved    uint64 // bytes the allocator held when it gave up
	DeviceBytes uint64
}

func (e *OutOfMemoryError) Error() string {
	return fmt.Sprintf("torchalloc: out of device memory: %d B more needed with %d B of %d B reserved",
		e.Requested, e.Reserved, e.DeviceBytes)
}

func (e *OutOfMemoryError) Is(target error) bool { return target == ErrOutOfMemory }

// Result is what the modelled allocator did on a stream.
type Result struct {
	// ReservedPeakBytes is the most device memory held at once: segments, or
	// mapped pages with expandable segments (torch.cuda.max_memory_reserved).
	ReservedPeakBytes uint64
	// PeakLiveBytes is the most requested bytes live at once.
	PeakLiveBytes uint64
	// DeviceAllocs counts the device allocations: cudaMalloc calls, or with
	// expandable segments the mapping calls (num_device_alloc).
	DeviceAllocs uint64
	// Pages counts the physical pages mapped with expandable segments (each
	// a cuMemCreate of 2 or 20 MiB); 0 in the default mode.
	Pages uint64
}

// Ratio is ReservedPeakBytes over PeakLiveBytes.
func (r Result) Ratio() float64 {
	if r.PeakLiveBytes == 0 {
		return 0
	}
	return float64(r.ReservedPeakBytes) / float64(r.PeakLiveBytes)
}

func (r Result) String() string {
	return fmt.Sprintf("%.3f× (%d)", r.Ratio(), r.DeviceAllocs)
}

// Replay runs the stream through the modelled allocator on an H200-sized
// device. A free of an allocation that is not live is ErrNotLive; a stream
// the device cannot hold is ErrOutOfMemory.
func Replay(t *trace.Trace, mode Mode) (Result, error) {
	return ReplayOn(t, mode, H200Bytes)
}

// ReplayOn is Replay on a device of deviceBytes.
func ReplayOn(t *trace.Trace, mode Mode, deviceBytes uint64) (Result, error) {
	a := New(mode, deviceBytes)
	handles := make([]Handle, t.Allocations)
	for i, e := range t.Events {
		var err error
		switch e.Op {
		case trace.OpAlloc:
			handles[e.Index], err = a.Malloc(e.Size, e.Stream)
		case trace.OpFree:
			err = a.Free(handles[e.Index])
			handles[e.Index] = Handle{}
		}
		if err != nil {
			return a.Result(), fmt.Errorf("%s event %d: %w", t.Name, i+1, err)
		}
	}
	return a.Result(), nil
}

// Handle names a live allocation of an Allocator; the zero Handle none.
type Handle struct{ block int32 }

// block is one range of a segment: allocated, free (in its pool's set of
// free blocks) or, in an expandable segment, unmapped.
type block struct {
	addr, size uint64
	requested  uint64
	prev, next int32 // neighbours in the segment, -1 at its ends
	pool       *pool
	allocated  bool
	mapped     bool
	segment    int32 // the expandable segment; -1 for cudaMalloc'd ones
}

func (b *block) expandable() bool { return b.segment >= 0 }

// pool is the free blocks of one stream and size class.
type pool struct {
	small    bool
	free     blockSet // mapped free blocks by (size, address)
	unmapped blockSet // unmapped blocks by address
}

// segment is the virtual range of an expandable segment.
type segment struct {
	base, page uint64
}

type poolKey struct {
	stream uint32
	small  bool
}

// Allocator is the modelled caching allocator of one device.
type Allocator struct {
	mode        Mode
	deviceBytes uint64
	blocks      []block
	spare       []int32
	pools       map[poolKey]*pool
	order       []*pool // pools in creation order, for emptying the cache
	segments    []segment
	nextAddr    uint64

	reserved, reservedPeak uint64
	live, livePeak         uint64
	deviceAllocs, pages    uint64
}

// New makes an empty allocator in mode on a device of deviceBytes.
func New(mode Mode, deviceBytes uint64) *Allocator {
	return &Allocator{mode: mode, deviceBytes: deviceBytes, pools: map[poolKey]*pool{},
		blocks: []block{{}}, nextAddr: 1 << 32} // block 0 is the zero Handle's
}

// Result is what the allocator has done so far.
func (a *Allocator) Result() Result {
	return Result{ReservedPeakBytes: a.reservedPeak, PeakLiveBytes: a.livePeak,
		DeviceAllocs: a.deviceAllocs, Pages: a.pages}
}

// ReservedBytes is the device memory the allocator holds now.
func (a *Allocator) ReservedBytes() uint64 { return a.reserved }

func roundSize(size uint64) uint64 {
	if size < minBlockSize {
		return minBlockSize
	}
	return (size + minBlockSize - 1) / minBlockSize * minBlockSize
}

func allocationSize(size uint64) uint64 {
	switch {
	case size <= smallSize:
		return smallBuffer
	case size < minLargeAlloc:
		return largeBuffer
	}
	return (size + roundLarge - 1) / roundLarge * roundLarge
}

func (a *Allocator) pool(stream uint32, small bool) *pool {
	k := poolKey{stream, small}
	p := a.pools[k]
	if p == nil {
		p = &pool{small: small, free: newBlockSet(), unmapped: newBlockSet()}
		a.pools[k] = p
		a.order = append(a.order, p)
	}
	return p
}

func (a *Allocator) newBlock(b block) int32 {
	if n := len(a.spare); n > 0 {
		i := a.spare[n-1]
		a.spare = a.spare[:n-1]
		a.blocks[i] = b
		return i
	}
	a.blocks = append(a.blocks, b)
	return int32(len(a.blocks) - 1)
}

func (a *Allocator) dropBlock(i int32) {
	a.blocks[i] = block{}
	a.spare = append(a.spare, i)
}

func freeKey(b *block) key     { return key{b.size, b.addr} }
func unmappedKey(b *block) key { return key{b.addr, 0} }

func (a *Allocator) reserve(bytes uint64) {
	a.reserved += bytes
	a.reservedPeak = max(a.reservedPeak, a.reserved)
}

// Malloc serves a request of size bytes on stream.
func (a *Allocator) Malloc(size uint64, stream uint32) (Handle, error) {
	rounded := roundSize(size)
	p := a.pool(stream, rounded <= smallSize)
	b, ok := a.freeBlock(p, rounded)
	if !ok {
		var err error
		if b, err = a.newSegmentBlock(p, rounded); err != nil {
			return Handle{}, err
		}
	}
	if a.shouldSplit(b, rounded) {
		rest := a.splitOff(b, rounded, true)
		p.free.insert(freeKey(&a.blocks[rest]), rest)
	}
	bb := &a.blocks[b]
	bb.allocated = true
	bb.requested = size
	a.live += size
	a.livePeak = max(a.livePeak, a.live)
	return Handle{b}, nil
}

func (a *Allocator) shouldSplit(b int32, size uint64) bool {
	remaining := a.blocks[b].size - size
	if a.blocks[b].pool.small || a.mode == Expandable {
		return remaining >= minBlockSize
	}
	return remaining > smallSize
}

// freeBlock takes the best-fitting free block of p, if any.
func (a *Allocator) freeBlock(p *pool, size uint64) (int32, bool) {
	k, b, ok := p.free.atLeast(key{size, 0})
	if !ok {
		return -1, false
	}
	if a.blocks[b].expandable() {
		// A block before the unmapped tail can grow as far as the segment
		// goes, so best fit ranks it by that size: larger blocks that
		// cannot grow come first.
		for {
			nk, n, ok := p.free.after(k)
			if !ok || a.growableSize(n) >= a.growableSize(b) {
				break
			}
			k, b = nk, n
		}
	}
	p.free.remove(k)
	return b, true
}

func (a *Allocator) growableSize(b int32) uint64 {
	bb := &a.blocks[b]
	if bb.next >= 0 && !a.blocks[bb.next].mapped {
		return bb.size + a.blocks[bb.next].size
	}
	return bb.size
}

// newSegmentBlock gets device memory for a request no free block serves,
// emptying the cache and retrying once when the device refuses.
func (a *Allocator) newSegmentBlock(p *pool, size uint64) (int32, error) {
	grow := a.cudaMalloc
	if a.mode == Expandable {
		grow = a.expand
	}
	if b, ok := grow(p, size); ok {
		return b, nil
	}
	a.emptyCache()
	if b, ok := grow(p, size); ok {
		return b, nil
	}
	need := allocationSize(size)
	if a.mode == Expandable {
		need = size
	}
	return -1, &OutOfMemoryError{Requested: need, Reserved: a.reserved, DeviceBytes: a.deviceBytes}
}

func (a *Allocator) fits(bytes uint64) bool { return a.reserved+bytes <= a.deviceBytes }

// cudaMalloc makes a segment for a request of size; the whole segment is
// one block, not in the free set.
func (a *Allocator) cudaMalloc(p *pool, size uint64) (int32, bool) {
	bytes := allocationSize(size)
	if !a.fits(bytes) {
		return -1, false
	}
	b := a.newBlock(block{addr: a.nextAddr, size: bytes, prev: -1, next: -1, pool: p, mapped: true, segment: -1})
	a.nextAddr += bytes
	a.reserve(bytes)
	a.deviceAllocs++
	return b, true
}

// expand maps pages of p's expandable segment for a request of size at the
// lowest address with room, returning the free block (not in the free set)
// that now holds at least size bytes.
func (a *Allocator) expand(p *pool, size uint64) (int32, bool) {
	c := a.roomFor(p, size)
	if !a.blocks[c].mapped {
		var ok bool
		if c, ok = a.mapBlock(c, min(a.blocks[c].size, size)); !ok {
			return -1, false
		}
	}
	for a.blocks[c].size < size {
		next := a.blocks[c].next
		var ok bool
		if c, ok = a.mapBlock(next, min(size-a.blocks[c].size, a.blocks[next].size)); !ok {
			return -1, false
		}
	}
	p.free.remove(freeKey(&a.blocks[c]))
	return c, true
}

// roomFor is the first block of the lowest run of free and unmapped blocks
// holding size bytes, in a new segment when no segment of p has one.
func (a *Allocator) roomFor(p *pool, size uint64) int32 {
	found := int32(-1)
	p.unmapped.each(func(_ key, u int32) bool {
		c := u
		if prev := a.blocks[c].prev; prev >= 0 && !a.blocks[prev].allocated {
			c = prev
		}
		var bytes uint64
		for b := c; bytes < size && b >= 0 && !a.blocks[b].allocated; b = a.blocks[b].next {
			bytes += a.blocks[b].size
		}
		if bytes >= size {
			found = c
			return false
		}
		return true
	})
	if found >= 0 {
		return found
	}
	page := uint64(largeBuffer)
	if p.small {
		page = smallBuffer
	}
	// PyTorch reserves address space for 9/8 of the device per segment.
	span := a.deviceBytes + a.deviceBytes/8
	span = (span + page - 1) / page * page
	s := segment{base: (a.nextAddr + page - 1) / page * page, page: page}
	a.nextAddr = s.base + span
	a.segments = append(a.segments, s)
	u := a.newBlock(block{addr: s.base, size: span, prev: -1, next: -1, pool: p, segment: int32(len(a.segments) - 1)})
	p.unmapped.insert(unmappedKey(&a.blocks[u]), u)
	return u
}

// mapBlock maps the pages under the first size bytes of the unmapped block
// u, merges them with free neighbours and puts the result in the free set.
func (a *Allocator) mapBlock(u int32, size uint64) (int32, bool) {
	ub := &a.blocks[u]
	s := a.segments[ub.segment]
	end := (ub.addr - s.base + size + s.page - 1) / s.page * s.page
	bytes := s.base + end - ub.addr
	if !a.fits(bytes) {
		return -1, false
	}
	p := ub.pool
	p.unmapped.remove(unmappedKey(ub))
	ub.mapped = true
	if bytes < ub.size {
		rest := a.splitOff(u, bytes, false)
		p.unmapped.insert(unmappedKey(&a.blocks[rest]), rest)
	}
	u = a.merge(u, a.blocks[u].prev)
	u = a.merge(u, a.blocks[u].next)
	p.free.insert(freeKey(&a.blocks[u]), u)
	a.reserve(bytes)
	a.deviceAllocs++
	a.pages += bytes / s.page
	return u, true
}

// merge folds the neighbour n of b into b when n is free in the same state
// of mapping, taking n out of its set; it returns b.
func (a *Allocator) merge(b, n int32) int32 {
	if n < 0 {
		return b
	}
	bb, nb := &a.blocks[b], &a.blocks[n]
	if nb.allocated || nb.mapped != bb.mapped {
		return b
	}
	if nb.mapped {
		nb.pool.free.remove(freeKey(nb))
	} else {
		nb.pool.unmapped.remove(unmappedKey(nb))
	}
	if bb.prev == n {
		bb.addr = nb.addr
		bb.prev = nb.prev
		if bb.prev >= 0 {
			a.blocks[bb.prev].next = b
		}
	} else {
		bb.next = nb.next
		if bb.next >= 0 {
			a.blocks[bb.next].prev = b
		}
	}
	bb.size += nb.size
	a.dropBlock(n)
	return b
}

// Free returns a live allocation to its pool.
func (a *Allocator) Free(h Handle) error {
	b := h.block
	if b <= 0 || int(b) >= len(a.blocks) || !a.blocks[b].allocated {
		return ErrNotLive
	}
	bb := &a.blocks[b]
	bb.allocated = false
	a.live -= bb.requested
	bb.requested = 0
	b = a.merge(b, bb.prev)
	b = a.merge(b, a.blocks[b].next)
	a.blocks[b].pool.free.insert(freeKey(&a.blocks[b]), b)
	return nil
}

// emptyCache gives back what the cache can: free blocks that are whole
// cudaMalloc segments, and the fully free pages of expandable segments
// (dropping a segment left with nothing mapped).
func (a *Allocator) emptyCache() {
	for _, p := range a.order {
		var whole, expandable []int32
		p.free.each(func(_ key, b int32) bool {
			bb := &a.blocks[b]
			switch {
			case bb.expandable():
				expandable = append(expandable, b)
			case bb.prev < 0 && bb.next < 0:
				whole = append(whole, b)
			}
			return true
		})
		for _, b := range whole {
			p.free.remove(freeKey(&a.blocks[b]))
			a.reserved -= a.blocks[b].size
			a.dropBlock(b)
		}
		for _, b := range expandable {
			a.unmapBlock(b)
		}
	}
}

// unmapBlock unmaps the whole pages inside the free block b, leaving the
// parts of pages at its ends as free blocks of their own.
func (a *Allocator) unmapBlock(b int32) {
	bb := &a.blocks[b]
	s := a.segments[bb.segment]
	first := s.base + (bb.addr-s.base+s.page-1)/s.page*s.page
	last := s.base + (bb.addr+bb.size-s.base)/s.page*s.page
	if first >= last {
		return
	}
	p := bb.pool
	p.free.remove(freeKey(bb))
	if first > bb.addr {
		rest := a.splitOff(b, first-bb.addr, true)
		p.free.insert(freeKey(&a.blocks[b]), b)
		b = rest
	}
	if bb := &a.blocks[b]; last < bb.addr+bb.size {
		after := a.splitOff(b, last-bb.addr, true)
		p.free.insert(freeKey(&a.blocks[after]), after)
	}
	a.blocks[b].mapped = false
	a.reserved -= last - first
	b = a.merge(b, a.blocks[b].prev)
	b = a.merge(b, a.blocks[b].next)
	if bb := &a.blocks[b]; bb.prev < 0 && bb.next < 0 {
		// Nothing of the segment is mapped: PyTorch releases its range.
		a.dropBlock(b)
		return
	}
	p.unmapped.insert(unmappedKey(&a.blocks[b]), b)
}

// splitOff keeps the first size bytes of block b in it and makes the rest a
// block of its own right after it, mapped or not, in no set yet.
func (a *Allocator) splitOff(b int32, size uint64, mapped bool) int32 {
	bb := a.blocks[b]
	rest := a.newBlock(block{addr: bb.addr + size, size: bb.size - size, prev: b, next: bb.next, pool: bb.pool,
		mapped: mapped, segment: bb.segment})
	if bb.next >= 0 {
		a.blocks[bb.next].prev = rest
	}
	a.blocks[b].next = rest
	a.blocks[b].size = size
	return rest
}
