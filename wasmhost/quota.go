package wasmhost

import (
	"math"
	"math/bits"

	"github.com/vkrt/vkrt/memory"
	vkruntime "github.com/vkrt/vkrt/runtime"
)

// reservedBound is the most bytes the pools of a guest with a quota of
// quota bytes may reserve on the device (memory_usage's bytes reserved,
// persistent pool included), whatever layout is in force: twice the quota,
// plus defaultSlack. That is what the default layout reserves for a guest
// within its quota, with room for padding and pages kept for reuse; an
// allocation pattern that fragments the pools, or a layout the guest
// chose, may cost the device no more. It saturates at 2^64 - 1.
func reservedBound(p vkruntime.DeviceProperties, sparse bool, quota uint64) uint64 {
	hi, twice := bits.Mul64(quota, 2)
	sum, carry := bits.Add64(twice, defaultSlack(p, sparse, quota), 0)
	if hi != 0 || carry != 0 {
		return math.MaxUint64
	}
	return sum
}

// defaultSlack is the bound's part beyond twice the quota: one page of
// each default pool a buffer within the quota reaches. That is the sliced
// ladder's pages (ladderSlack), or, on a device with sparse residency,
// where the default layout is one virtual pool, its first chunk
// (memory.VirtualChunkUnit) if that is more: a guest may install either.
func defaultSlack(p vkruntime.DeviceProperties, sparse bool, quota uint64) uint64 {
	slack := ladderSlack(p, quota)
	if sparse {
		slack = max(slack, memory.VirtualChunkUnit)
	}
	return slack
}

// ladderSlack is one page of each pool of the default ladder on a device
// with properties p that a buffer of at most quota bytes goes to: the
// first pool always, each later one when the quota passes the slices of
// the pool before it. On a device whose pages reach 256 MiB: 2 MiB, then
// 8 MiB past 512 KiB, 32 MiB past 2 MiB, 128 MiB past 8 MiB and 256 MiB
// past 32 MiB.
func ladderSlack(p vkruntime.DeviceProperties, quota uint64) uint64 {
	var slack, prevSlice uint64
	for i, pool := range memory.SubSlicesPages(p) {
		if i == 0 || quota > prevSlice {
			slack += pool.PageSize
		}
		prevSlice = pool.MaxSliceSize
	}
	return slack
}

// arenaBytes is the arena's pages together (saturating), 0 for a layout
// without an arena.
func arenaBytes(l memory.Layout) uint64 {
	a, ok := l.Arena()
	if !ok {
		return 0
	}
	var n uint64
	for _, page := range a.Pages {
		s, carry := bits.Add64(n, page, 0)
		if carry != 0 {
			return math.MaxUint64
		}
		n = s
	}
	return n
}

// largestPage is the largest page a dynamic reservation of size bytes may
// open under layout l on a device with properties p, and the index of the
// pool that has it: among the explicit sliced pools (a Sliced layout's, an
// arena's fallback), the first that accepts the size and every later one
// that does while the ones before may spill (capped, not growing). ok is
// false where the layout names no pages of its own for the size: a preset,
// whose page for a size within the quota is at most the ladder's (or the
// size), or an arena, whose pages memory_install bounded.
func largestPage(l memory.Layout, p vkruntime.DeviceProperties, size uint64) (page uint64, pool int, ok bool) {
	var pools []memory.SlicedPool
	if s, isSliced := l.Sliced(); isSliced {
		pools = s
	} else if a, isArena := l.Arena(); isArena {
		pools = a.Fallback
	}
	align := max(p.Alignment, 1)
	heap := p.MemorySize &^ (align - 1)
	aligned, fits := alignUp(max(size, 1), align)
	if !fits {
		return 0, 0, false
	}
	for i, sp := range pools {
		pg, fits := alignUp(sp.PageSize, align)
		if !fits {
			pg = math.MaxUint64
		}
		if heap != 0 {
			pg = min(pg, heap) // a page past the device memory shrinks to it
		}
		slice := pg
		if sp.MaxSlice != nil {
			if s, fits := alignUp(*sp.MaxSlice, align); fits {
				slice = min(s, pg)
			}
		}
		accepts := aligned <= slice
		if sp.Pages == nil && !accepts {
			// An uncapped pool also takes single reservations within a fifth
			// of its page.
			accepts = aligned >= pg-pg/5 && aligned <= pg
		}
		if !accepts {
			continue
		}
		if !ok || pg > page {
			page, pool, ok = pg, i, true
		}
		if sp.Pages == nil || sp.Grow {
			break // it never refuses, so no later pool sees the size
		}
	}
	return page, pool, ok
}

func alignUp(n, align uint64) (uint64, bool) {
	r := (n + align - 1) &^ (align - 1)
	return r, r >= n
}
