// Package memory is vkrt's memory core: the pools that carve device
// allocations into buffers, the per-stream [Manager] that routes reservations
// through them, the [Layout] that configures them and the [Report] a measured
// plan is derived from.
//
// # Pools
//
//   - Sliced pools carve fixed-size pages into slices by a deterministic
//     first-fit over pages in index order (lowest page, then lowest offset),
//     coalescing free neighbours.
//   - Exclusive pools give every reservation a page of its own, sized to the
//     first request that needed it, and reuse a free page for a request it
//     fits (the smallest such page), unless the request would leave most of
//     it, and more than 20 MiB, unused: that one gets a new page where the
//     device memory holds one and the device grants it. Pages unused for a
//     whole dealloc period, counted in the pool's reservations, return to
//     the driver. A Sliced layout's pool marked exclusive
//     ([SlicedPool].Exclusive, a basic plan's) is one, capped at the pages
//     it holds at once: a forecast (grow) only counts the pages past it as
//     spills; a limit gives back free pages too small for a request before
//     it refuses it.
//   - The direct pool makes one device allocation per reservation, sized to
//     the aligned request, and reuses free ones by exact size only. Cached free
//     allocations go back to the driver, oldest first, when a new one would
//     take the pool's reserved bytes past its reclaim watermark.
//   - The persistent pool serves everything reserved inside a persistent
//     window: exact-fit allocations reused by identical size, kept until an
//     explicit cleanup. Install leaves it alone.
//   - The arena pool (the [ArenaLayout]) places the k-th reservation after an
//     Install at a slot planned offline from a dry run, until one misses
//     its slot: from then on the run takes no slot, and what it reserves
//     goes to the free room of the pages it holds, by TLSF, before the
//     fallback pools.
//   - The virtual pool (the [VirtualLayout]) places every reservation in
//     ranges of address space by two-level segregated fit (TLSF: the
//     size's own bin, then the first bin all of whose blocks fit; AMD VMA's
//     policy) and binds device memory only under the granules live
//     reservations touch. Memory comes from the driver in chunks (what
//     the pool lacks rounded up to [VirtualChunkUnit], or a share of what
//     it holds: larger where one more device allocation would pass the
//     count PyTorch's expandable segments would have made by then, which
//     the pool forecasts as the run goes, smaller where it has several to
//     spare against that count); granules
//     left with nothing live stay bound until memory is needed elsewhere,
//     when the least recently idled are rebound there, a whole run of
//     them at a time. Streams' ranges share the device's sparse address
//     space: a pool starts with a range of a fourth of the heap (past a
//     plan's places, a fourth of the places if that is less, but no less
//     than a sixteenth of the heap) or half the
//     space left if that is less, or, once the ranges before it have
//     taken half the space, what it needs rounded up to a power of two
//     (a plan's places to a granule), at least 64 MiB (where the storage
//     reports the space left); it takes another, as
//     large as all before it, when its placement outgrows them, and a
//     cleanup gives back its last ranges that hold nothing; no
//     reservation spans two. So fragmentation costs address
//     space, not memory, and the pool holds the most granules ever needed
//     at once plus part of a chunk. A submission that binds a
//     reservation's memory also binds spare memory where the next
//     reservations will land (above it, or under the plan's next places),
//     so that they need none of their own.
//     It needs a [github.com/vkrt/vkrt/runtime.SparseStorage] (Vulkan sparse residency) and
//     builds the SubSlices pools on a storage without one, or whose
//     granule or sparse address space it cannot use (an address space
//     that holds no granule, among others).
//     A [VirtualPlan] names the memory a run is expected to need: the pool
//     reaches it in a few device allocations and grows past it, warning
//     once, when the run needs more.
//
// Placement is deterministic in every pool: the same stream of calls gets
// the same places. The policies differ by pool (first fit, smallest page,
// exact size, TLSF); none is promised beyond that.
//
// # Layouts and reports
//
// A [Layout] names the dynamic pools: a preset ([SubSlicesLayout], the zero
// Layout, and [ExclusivePagesLayout] size themselves from the device's
// MaxPageSize), an explicit [SlicedLayout], [DirectLayout], a
// [VirtualLayout] (the client's default, with or without a plan), or an
// [ArenaLayout] planned from a dry run. [Manager.Report] gives each pool's
// usage and high-water marks; replaying the same stream against a layout
// capped at the measured pages_peak fits, because placement is
// deterministic. Layout, Report, Record, PoolKind and Usage read and write
// the externally tagged JSON of the contract, strictly: unknown fields or
// variants, wrong types, repeated fields, trailing data and numbers that do
// not fit their field are errors; a layout's variant names alone match in
// any case. A layout holds at most [MaxLayoutPools]
// sliced pools, [MaxArenaSlots] slots and [MaxArenaPages] arena pages.
// [ParseLayout] takes the command line's preset names (sub-slices,
// exclusive-pages, direct, virtual, or their kinds' names as reports print
// them, SubSlices to Virtual; in any case) or a JSON literal, [ReadLayoutFile] a
// file of at most [MaxLayoutFileBytes]. A layout that cannot be read is
// an [InvalidLayout] as one that cannot be honoured is: errors.Is(err,
// &InstallError{Kind: InvalidLayout}) holds for both.
//
// # Reservations
//
// Sizes are padded up to the device alignment. A zero-size request is padded
// to one alignment unit like any other size: it gets a valid, bindable slice
// and counts as an allocation of 0 requested bytes. Lazy reservations carve
// pages that get no device memory until [Manager.Resolve] needs them, so a dry
// run measures a workload without holding its memory.
//
// # Concurrency
//
// A Manager is not safe for concurrent use: callers serialise access (the
// client holds one lock per stream around it). The types Layout, Report and
// Usage are plain values.
package memory
