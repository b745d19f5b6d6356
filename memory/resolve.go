package memory

import (
	"fmt"
	"math"
	"math/bits"
	"slices"

	"github.com/vkrt/vkrt/internal/printable"
	vkruntime "github.com/vkrt/vkrt/runtime"
)

const (
	// maxPoolPages bounds a pool's page cap and an arena's page count
	// (MaxArenaPages).
	maxPoolPages = 65535
	// subSlicesBasePage is the page of the first SubSlices pool.
	subSlicesBasePage = 2 << 20
	// subSlicesTopPage bounds the largest SubSlices page whatever the
	// device allows: on the shipped model traces, pages past it leave more
	// memory stranded in half-used pages than they save in driver calls.
	subSlicesTopPage = 256 << 20
	// subSlicesPageGrowth is the ratio of one SubSlices page to the previous.
	subSlicesPageGrowth = 4
	// subSlicesSliceDivisor: a SubSlices pool serves slices up to page/4, so
	// a page holds at least four of its largest slices.
	subSlicesSliceDivisor = 4
	// exclusiveFirstBucket and exclusiveBucketGrowth space the
	// ExclusivePages buckets: 4 KiB, 16 KiB, 64 KiB, …
	exclusiveFirstBucket  = 4 << 10
	exclusiveBucketGrowth = 4
	// exclusiveDeallocPeriod: an exclusive pool returns pages that stayed
	// free for this many of its reservations.
	exclusiveDeallocPeriod = 1000
)

type poolShape uint8

const (
	shapeSliced poolShape = iota
	shapeExclusive
	shapeDirect
	shapeVirtual
)

// poolConfig is one dynamic pool after rounding and validation.
type poolConfig struct {
	shape     poolShape
	pageSize  uint64        // sliced
	maxSlice  uint64        // sliced
	capPages  uint64        // sliced and exclusive; 0 is uncapped
	grow      bool          // sliced and exclusive: the cap is a forecast; uncapped sliced, a plan's way out
	wayOut    bool          // exclusive: a plan's last pool, past its sliced pools
	maxAlloc  uint64        // exclusive, virtual: the largest reservation it accepts
	planned   uint64        // virtual: the device memory a plan expects
	heap      uint64        // virtual and exclusive: the device memory
	granule   uint64        // virtual: set by the manager from its storage
	space     uint64        // virtual: the largest address range
	addrSpace uint64        // virtual: the device's sparse address space
	maxChunk  uint64        // virtual: the largest device allocation
	slots     []VirtualSlot // virtual: planned places, sizes aligned
	slotIdx   *slotIndex    // virtual: the slots by offset
	slotsEnd  uint64        // virtual: the end of the slots, set with the granule
	profile   []VirtualMark // virtual: how the planned run's need grew
	settled   VirtualMark   // virtual: the planned run's settled start
	// note is what a virtual plan asked past the device, warned only if
	// the pool is built: on a device without sparse residency the
	// SubSlices pools that replace it plan nothing.
	note string
}

// arenaConfig is an arena plan after rounding and validation.
type arenaConfig struct {
	pages []uint64
	// largest is the largest page the device can give, its memory
	// (heapLimit) or the backend's largest allocation if that is less: a
	// page past it is never asked of the device, so its slots miss the
	// plan (see resolveArena).
	largest uint64
	slots   []ArenaSlot
	// index places the slots by where they lie with the pages laid end to
	// end (pageStart), where slots of different pages never overlap.
	index     *slotIndex
	pageStart []uint64
}

type resolvedLayout struct {
	arena *arenaConfig
	pools []poolConfig
	// notes are what the layout asked for and did not get (a page shrunk
	// to the device memory); the manager warns about each.
	notes []string
}

// alignUp rounds n up to a multiple of the power-of-two align; ok is false
// on overflow.
func alignUp(n, align uint64) (uint64, bool) {
	r := (n + align - 1) &^ (align - 1)
	return r, r >= n
}

// heapLimit is the most bytes one pool can ever hold on the device:
// the memory size (aligned down), or unbounded when unknown.
func heapLimit(p vkruntime.DeviceProperties) uint64 {
	if p.MemorySize == 0 {
		return math.MaxUint64 &^ (p.Alignment - 1)
	}
	return p.MemorySize &^ (p.Alignment - 1)
}

// resolve validates the layout against the device and the backend's largest
// allocation (0: no limit) and returns the pools to build.
func (l Layout) resolve(p vkruntime.DeviceProperties, backendLimit uint64) (resolvedLayout, *InstallError) {
	if backendLimit == 0 {
		backendLimit = math.MaxUint64
	}
	switch l.kind {
	case LayoutSubSlices:
		return resolvedLayout{pools: subSlicesPools(p, backendLimit)}, nil
	case LayoutExclusivePages:
		return resolvedLayout{pools: exclusivePagesPools(p, backendLimit)}, nil
	case LayoutDirect:
		return resolvedLayout{pools: []poolConfig{{shape: shapeDirect}}}, nil
	case LayoutSliced:
		var notes []string
		pools, err := resolveSliced(l.sliced, p, backendLimit, "", &notes)
		return resolvedLayout{pools: pools, notes: notes}, err
	case LayoutArena:
		return resolveArena(l.arena, p, backendLimit)
	case LayoutVirtual:
		return resolveVirtual(l.virtual, p, backendLimit)
	}
	return resolvedLayout{}, invalidLayout("layout kind %d is not one this runtime has", l.kind)
}

func resolveSliced(list []SlicedPool, p vkruntime.DeviceProperties, backendLimit uint64, prefix string, notes *[]string) ([]poolConfig, *InstallError) {
	if len(list) == 0 {
		return nil, invalidLayout("%sthe pool list is empty", prefix)
	}
	if len(list) > MaxLayoutPools {
		return nil, invalidLayout("%s%d pools, more than the %d a layout may hold", prefix, len(list), MaxLayoutPools)
	}
	heap := heapLimit(p)
	pools := make([]poolConfig, 0, len(list))
	// capBytes sums the capped pools' bytes: a full pool's capacity, and
	// the capacity a reservation that fills them all is told, must fit in
	// 64 bits, as the arena's pages laid end to end must.
	var capBytes uint64
	for i, sp := range list {
		if sp.PageSize == 0 {
			return nil, invalidLayout("%spool %d: page_size is 0", prefix, i)
		}
		page, ok := alignUp(sp.PageSize, p.Alignment)
		if !ok {
			return nil, invalidLayout("%spool %d: page_size %d B overflows when rounded up to the alignment of %d B", prefix, i, sp.PageSize, p.Alignment)
		}
		maxSlice := page
		if sp.Exclusive && sp.MaxSlice != nil {
			return nil, invalidLayout("%spool %d: an exclusive pool gives each reservation a page of its own; max_slice must be null", prefix, i)
		}
		if sp.MaxSlice != nil {
			if *sp.MaxSlice == 0 {
				return nil, invalidLayout("%spool %d: max_slice is 0", prefix, i)
			}
			if maxSlice, ok = alignUp(*sp.MaxSlice, p.Alignment); !ok || maxSlice > page {
				return nil, invalidLayout("%spool %d: max_slice of %d B is larger than its page of %d B", prefix, i, *sp.MaxSlice, page)
			}
		}
		var capPages uint64
		if sp.Pages != nil {
			if *sp.Pages < 1 || *sp.Pages > maxPoolPages {
				return nil, invalidLayout("%spool %d: pages %d is outside 1..=%d", prefix, i, *sp.Pages, maxPoolPages)
			}
			capPages = *sp.Pages
		}
		// A pool can never hold more than the heap: a page past it shrinks
		// to what the heap can give, and the manager says so. Only then
		// must it fit the backend's largest allocation: a plan from a
		// larger dry run installs on a device whose largest allocation is
		// its memory.
		if page > heap {
			if heap == 0 {
				return nil, invalidLayout("%spool %d: the device memory of %d B is smaller than the alignment of %d B", prefix, i, p.MemorySize, p.Alignment)
			}
			*notes = append(*notes, fmt.Sprintf("%spool %d: page_size %d B is larger than the device memory; the page shrinks to %d B", prefix, i, sp.PageSize, heap))
			page = heap
			maxSlice = min(maxSlice, page)
		}
		if page > backendLimit {
			return nil, invalidLayout("%spool %d: a page of %d B is larger than the backend's largest allocation of %d B", prefix, i, page, backendLimit)
		}
		if capPages != 0 {
			hi, bytes := bits.Mul64(capPages, page)
			sum, carry := bits.Add64(capBytes, bytes, 0)
			if hi != 0 || carry != 0 {
				return nil, invalidLayout("%spool %d: %d pages of %d B take the capped pools past %d B", prefix, i, capPages, page, uint64(math.MaxUint64))
			}
			capBytes = sum
		}
		if sp.Exclusive {
			pools = append(pools, poolConfig{shape: shapeExclusive, maxAlloc: page, heap: heap, capPages: capPages, grow: sp.Grow})
			continue
		}
		pools = append(pools, poolConfig{shape: shapeSliced, pageSize: page, maxSlice: maxSlice, capPages: capPages, grow: sp.Grow})
	}
	// A plan (a list with a growing pool) ends as the SubSlices preset
	// does, in an exclusive pool: what is larger than every page, or what
	// a page the device has no memory for would have held, takes a device
	// allocation of its own size. Without it a run larger than its dry
	// run failed with "buffer too big" past the plan's largest page, or
	// when a way-out page four times a reservation did not fit.
	if slices.ContainsFunc(list, func(sp SlicedPool) bool { return sp.Grow }) {
		pools = append(pools, poolConfig{shape: shapeExclusive, maxAlloc: exclusiveCeiling(p, backendLimit), heap: heap, wayOut: true})
	}
	return pools, nil
}

func resolveArena(plan ArenaPlan, p vkruntime.DeviceProperties, backendLimit uint64) (resolvedLayout, *InstallError) {
	switch {
	case len(plan.Pages) == 0:
		return resolvedLayout{}, invalidLayout("the arena has no pages")
	case len(plan.Pages) > MaxArenaPages:
		return resolvedLayout{}, invalidLayout("the arena has %d pages, more than %d", len(plan.Pages), MaxArenaPages)
	case len(plan.Slots) > MaxArenaSlots:
		return resolvedLayout{}, invalidLayout("the arena has %d slots, more than %d", len(plan.Slots), MaxArenaSlots)
	}
	cfg := &arenaConfig{pages: make([]uint64, len(plan.Pages)), largest: min(heapLimit(p), backendLimit), slots: make([]ArenaSlot, len(plan.Slots))}
	var notes []string
	for i, size := range plan.Pages {
		if size == 0 {
			return resolvedLayout{}, invalidLayout("arena page %d has size 0", i)
		}
		page, ok := alignUp(size, p.Alignment)
		if !ok {
			return resolvedLayout{}, invalidLayout("arena page %d: %d B overflows when rounded up to the alignment of %d B", i, size, p.Alignment)
		}
		if page > cfg.largest {
			// A dry run needs no device memory, so its plan may be larger
			// than the device that runs a smaller run of the workload, or
			// made for another device. The page cannot shrink (its slots
			// lie in it), but it need not fail the run: its reservations
			// go to the fallback pools.
			what := fmt.Sprintf("the device memory of %d B", p.MemorySize)
			if backendLimit < heapLimit(p) {
				what = fmt.Sprintf("the backend's largest allocation of %d B", backendLimit)
			}
			notes = append(notes, fmt.Sprintf("arena page %d: %d B is larger than %s; its slots go to the fallback pools", i, page, what))
		}
		cfg.pages[i] = page
	}
	for k, s := range plan.Slots {
		if s.Size == 0 {
			return resolvedLayout{}, invalidLayout("arena slot %d has size 0", k)
		}
		if int(s.Page) >= len(cfg.pages) {
			return resolvedLayout{}, invalidLayout("arena slot %d names page %d, but the arena has %s", k, s.Page, printable.Count(len(cfg.pages), "page"))
		}
		if s.Offset%p.Alignment != 0 {
			return resolvedLayout{}, invalidLayout("arena slot %d: offset %d is not a multiple of the alignment of %d B", k, s.Offset, p.Alignment)
		}
		size, ok := alignUp(s.Size, p.Alignment)
		page := cfg.pages[s.Page]
		if !ok || s.Offset > page || size > page-s.Offset {
			return resolvedLayout{}, invalidLayout("arena slot %d: %d B at offset %d passes the end of page %d (%d B)", k, s.Size, s.Offset, s.Page, page)
		}
		cfg.slots[k] = ArenaSlot{Size: size, Page: s.Page, Offset: s.Offset}
	}
	// The pages laid end to end must fit in 64 bits, or slots of different
	// pages would wrap onto each other; so must they a byte apart, as the
	// rooms of a run that left the plan lay them (arenaRooms).
	cfg.pageStart = make([]uint64, len(cfg.pages))
	for i := 1; i < len(cfg.pages); i++ {
		start, carry := bits.Add64(cfg.pageStart[i-1], cfg.pages[i-1], 0)
		end, last := bits.Add64(start, cfg.pages[i], 0)
		if _, apart := bits.Add64(end, uint64(i), 0); carry != 0 || last != 0 || apart != 0 {
			return resolvedLayout{}, invalidLayout("the arena's pages, with a byte between each two, add up to more than %d B", uint64(math.MaxUint64))
		}
		cfg.pageStart[i] = start
	}
	laidOut := make([]VirtualSlot, len(cfg.slots))
	for k, s := range cfg.slots {
		laidOut[k] = VirtualSlot{Size: s.Size, Offset: cfg.pageStart[s.Page] + s.Offset}
	}
	cfg.index = newSlotIndex(laidOut)
	var pools []poolConfig
	if len(plan.Fallback) == 0 {
		pools = subSlicesPools(p, backendLimit)
	} else {
		var err *InstallError
		if pools, err = resolveSliced(plan.Fallback, p, backendLimit, "arena fallback ", &notes); err != nil {
			return resolvedLayout{}, err
		}
	}
	return resolvedLayout{arena: cfg, pools: pools, notes: notes}, nil
}

// subSlicesPools is the SubSlices preset: sliced pools with pages growing ×4
// from 2 MiB up to MaxPageSize or 256 MiB, whichever is less (each serving
// up to a quarter of its page), then an exclusive pool for the rest.
func subSlicesPools(p vkruntime.DeviceProperties, backendLimit uint64) []poolConfig {
	top := min(p.MaxPageSize, backendLimit&^(p.Alignment-1), heapLimit(p), subSlicesTopPage)
	top = max(top, p.Alignment)
	var pools []poolConfig
	// The first page is 2 MiB or one alignment unit, whichever is more, so
	// every page is a multiple of the alignment and holds its largest slice.
	page := min(max(uint64(subSlicesBasePage), p.Alignment), top)
	for {
		maxSlice := min(max((page/subSlicesSliceDivisor)&^(p.Alignment-1), p.Alignment), page)
		pools = append(pools, poolConfig{shape: shapeSliced, pageSize: page, maxSlice: maxSlice})
		if page >= top {
			break
		}
		if page > top/subSlicesPageGrowth {
			page = top
		} else {
			page *= subSlicesPageGrowth
		}
	}
	pools = append(pools, poolConfig{shape: shapeExclusive, maxAlloc: exclusiveCeiling(p, backendLimit), heap: heapLimit(p)})
	return pools
}

// exclusivePagesPools is the ExclusivePages preset: buckets ending at 4 KiB,
// 16 KiB, 64 KiB, … until one covers MaxPageSize, then a last bucket up to
// the device memory.
func exclusivePagesPools(p vkruntime.DeviceProperties, backendLimit uint64) []poolConfig {
	ceiling := exclusiveCeiling(p, backendLimit)
	var pools []poolConfig
	bucket := max(uint64(exclusiveFirstBucket), p.Alignment)
	for bucket < p.MaxPageSize && bucket < ceiling {
		pools = append(pools, poolConfig{shape: shapeExclusive, maxAlloc: bucket, heap: heapLimit(p)})
		if bucket > math.MaxUint64/exclusiveBucketGrowth {
			break // the next bucket would wrap to 0 and the loop never end
		}
		bucket *= exclusiveBucketGrowth
	}
	return append(pools, poolConfig{shape: shapeExclusive, maxAlloc: ceiling, heap: heapLimit(p)})
}

// exclusiveCeiling is the largest reservation a preset's last pool accepts.
func exclusiveCeiling(p vkruntime.DeviceProperties, backendLimit uint64) uint64 {
	return max(min(heapLimit(p), backendLimit&^(p.Alignment-1)), p.Alignment)
}

// SubSlicesPages are the sliced pools the SubSlices preset builds on a
// device with properties p, smallest first: each one's page and largest
// slice (what passes the last slice goes to an exclusive pool). A host
// that bounds what its guests' pools may hold reads the ladder here rather
// than copying it. Properties no manager takes (DeviceProperties.Validate
// refuses them) have no ladder: nil.
func SubSlicesPages(p vkruntime.DeviceProperties) []SlicedKind {
	if p.Validate() != nil {
		// An alignment of 0 or 3 made pages of 0 B, or of 9 B in slices
		// of 3 B, that no manager could build.
		return nil
	}
	var pages []SlicedKind
	for _, c := range subSlicesPools(p, math.MaxUint64) {
		if c.shape == shapeSliced {
			pages = append(pages, SlicedKind{PageSize: c.pageSize, MaxSliceSize: c.maxSlice})
		}
	}
	return pages
}
