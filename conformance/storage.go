package conformance

import (
	"bytes"
	"context"
	"encoding/binary"
	"errors"
	"fmt"
	"maps"
	"slices"

	"github.com/vkrt/vkrt/memory"
	vkruntime "github.com/vkrt/vkrt/runtime"
)

// Memory is host access to a storage's bytes: what a device's transfers
// offer. A storage whose allocations hold no bytes (one that only counts)
// has none, and the checks of data report not supported.
type Memory interface {
	// Upload copies data into dst (len(data) == dst.Size).
	Upload(dst vkruntime.StorageHandle, data []byte) error
	// Download copies src into dst (len(dst) == src.Size).
	Download(src vkruntime.StorageHandle, dst []byte) error
}

// StorageConfig is what a check asks of a fresh storage.
type StorageConfig struct {
	// MemoryLimit, when non-zero, is the most bytes the storage may hold at
	// once: past it Alloc must fail with runtime.ErrOutOfDeviceMemory. A
	// storage that cannot be limited returns an error matching
	// ErrNotSupported, and the checks that need a limit are not supported.
	MemoryLimit uint64
}

// StorageTarget is a storage under test and what the suite knows of it.
type StorageTarget struct {
	Storage vkruntime.Storage
	// Properties are the device facts the pools size themselves by: every
	// slice they carve is aligned to Properties.Alignment.
	Properties vkruntime.DeviceProperties
	// Memory reaches the storage's bytes; nil when it holds none.
	Memory Memory
	// Held is the number of bytes the storage holds now, deallocated ones
	// not yet flushed included. When nil, a Storage with a method
	// Allocated() uint64 is asked; without either the accounting checks
	// are not supported.
	Held func() uint64
	// Close, when set, releases the storage at the end of the check.
	Close func() error
}

// NewStorage makes a fresh storage configured as asked.
type NewStorage func(StorageConfig) (StorageTarget, error)

// RunStorage runs the storage checks outside go test.
func RunStorage(ctx context.Context, newStorage NewStorage, o Options) Report {
	return runChecks(ctx, "storage", storageChecks(newStorage), o)
}

// StorageChecks lists the checks RunStorage and TestStorage run, in order,
// with their names and rules.
func StorageChecks() []Check { return storageChecks(nil) }

// storageLimit is the memory limit the checks that need one ask for.
const storageLimit = 8 << 20

// openStorage asks the factory for a storage and closes it when the check
// ends. A factory refusing the configuration stops the check as not
// supported; refusing the zero configuration fails it.
func openStorage(c *checkState, newStorage NewStorage, cfg StorageConfig) StorageTarget {
	t, err := newStorage(cfg)
	what := "a fresh storage"
	if cfg.MemoryLimit != 0 {
		what = fmt.Sprintf("a storage limited to %d B", cfg.MemoryLimit)
	}
	if cfg == (StorageConfig{}) {
		c.needPlain(err, what, "storage")
	}
	c.need(err, what)
	if t.Storage == nil {
		c.Fatalf("%s: the factory returned no storage", what)
	}
	if t.Close != nil {
		c.Cleanup(func() {
			if err := t.Close(); err != nil {
				c.Errorf("closing the storage: %v", err)
			}
		})
	}
	if err := t.Properties.Validate(); err != nil {
		c.Fatalf("the storage's properties %+v: %v", t.Properties, err)
	}
	return t
}

// held is the target's holdings reading, if it has one.
func (t StorageTarget) held() (func() uint64, bool) {
	if t.Held != nil {
		return t.Held, true
	}
	if a, ok := t.Storage.(interface{ Allocated() uint64 }); ok {
		return a.Allocated, true
	}
	return nil, false
}

func needHeld(c *checkState, t StorageTarget) func() uint64 {
	held, ok := t.held()
	if !ok {
		c.NotSupportedf("the storage reports no holdings (no StorageTarget.Held, no Allocated() uint64)")
	}
	return held
}

func needMemory(c *checkState, t StorageTarget) Memory {
	if t.Memory == nil {
		c.NotSupportedf("the storage gives the host no access to its bytes (StorageTarget.Memory is nil)")
	}
	return t.Memory
}

// oddSizes are allocation sizes around the alignment and page boundaries.
func oddSizes(align uint64) []uint64 {
	return []uint64{1, 3, align - 1, align, align + 1, 4093, 4096, 65536 + 12, 1<<20 - 5}
}

func storageChecks(newStorage NewStorage) []Check {
	return []Check{
		{
			Name: "storage/alloc-fresh-handle",
			Rule: "Alloc(size) is one new device allocation: Offset 0, Size the size asked, an id no live allocation has",
			run: func(c *checkState) {
				t := openStorage(c, newStorage, StorageConfig{})
				seen := map[vkruntime.StorageID]uint64{}
				for _, size := range oddSizes(t.Properties.Alignment) {
					h, err := t.Storage.Alloc(size)
					if err != nil {
						c.Errorf("Alloc(%d): %v", size, err)
						continue
					}
					if h.Offset != 0 || h.Size != size {
						c.Errorf("Alloc(%d) = %v: want offset 0 and size %d", size, h, size)
					}
					if prev, dup := seen[h.ID]; dup {
						c.Errorf("Alloc(%d) returned id %d, which the live allocation of %d B has", size, h.ID, prev)
					}
					seen[h.ID] = size
				}
				release(t, slices.Collect(maps.Keys(seen)))
			},
		},
		{
			Name: "storage/ids-distinct-through-reuse",
			Rule: "Live allocations never share an id, however many were released before",
			run: func(c *checkState) {
				t := openStorage(c, newStorage, StorageConfig{})
				live := map[vkruntime.StorageID]int{}
				var order []vkruntime.StorageID
				alloc := func(n int) {
					h, err := t.Storage.Alloc(t.Properties.Alignment * uint64(1+n%7))
					if err != nil {
						c.Fatalf("allocation %d: %v", n, err)
					}
					if prev, dup := live[h.ID]; dup {
						c.Errorf("allocation %d got id %d, still held by allocation %d", n, h.ID, prev)
					}
					live[h.ID] = n
					order = append(order, h.ID)
				}
				for n := range 48 {
					alloc(n)
				}
				for i, id := range order {
					if i%2 == 0 {
						t.Storage.Dealloc(id)
						delete(live, id)
					}
					if i%8 == 7 {
						t.Storage.Flush()
					}
				}
				for n := 48; n < 96; n++ {
					alloc(n)
				}
				release(t, slices.Collect(maps.Keys(live)))
			},
		},
		{
			Name: "storage/dealloc-unknown-changes-nothing",
			Rule: "Dealloc of an id the storage never issued, or already released, changes nothing: live allocations keep their bytes and the holdings stay",
			run: func(c *checkState) {
				t := openStorage(c, newStorage, StorageConfig{})
				held, hasHeld := t.held()
				keep := mustAlloc(c, t, 4096)
				gone := mustAlloc(c, t, 4096)
				written := writePattern(c, t, keep, 1)
				t.Storage.Dealloc(gone.ID)
				t.Storage.Dealloc(gone.ID) // twice before Flush, where a release may still be deferred
				t.Storage.Flush()
				var before uint64
				if hasHeld {
					before = held()
				}
				t.Storage.Dealloc(gone.ID)                  // again after
				t.Storage.Dealloc(keep.ID + gone.ID + 1000) // never issued
				t.Storage.Dealloc(0)
				t.Storage.Flush()
				if hasHeld {
					if after := held(); after != before {
						c.Errorf("holdings went from %d B to %d B on releasing unknown ids", before, after)
					}
				}
				if written {
					checkPattern(c, t, keep, 1, "the live allocation after unknown ids were released")
				}
				// Still allocates, and the released allocation's memory went
				// back once: two new ones of its size share no byte (a
				// storage that queued it twice gave it to both).
				a, b := mustAlloc(c, t, 4096), mustAlloc(c, t, 4096)
				if written && writePattern(c, t, a, 7) && writePattern(c, t, b, 8) {
					checkPattern(c, t, a, 7, "a new allocation after an id was released twice")
					checkPattern(c, t, b, 8, "another new allocation after an id was released twice")
				}
				t.Storage.Dealloc(a.ID)
				t.Storage.Dealloc(b.ID)
				t.Storage.Dealloc(keep.ID)
				t.Storage.Flush()
			},
		},
		{
			Name: "storage/flush-idempotent",
			Rule: "Flush with nothing deferred, or twice in a row, changes nothing live",
			run: func(c *checkState) {
				t := openStorage(c, newStorage, StorageConfig{})
				t.Storage.Flush()
				held, hasHeld := t.held()
				h := mustAlloc(c, t, 12345)
				written := writePattern(c, t, h, 2)
				var before uint64
				if hasHeld {
					before = held()
				}
				for range 3 {
					t.Storage.Flush()
				}
				if hasHeld {
					if after := held(); after != before {
						c.Errorf("holdings went from %d B to %d B over three flushes with nothing released", before, after)
					}
				}
				if written {
					checkPattern(c, t, h, 2, "a live allocation after three flushes")
				}
				t.Storage.Dealloc(h.ID)
				t.Storage.Flush()
				t.Storage.Flush()
			},
		},
		{
			Name: "storage/size-accounting",
			Rule: "The bytes a storage holds grow by at least the size of each allocation, fall by what it added once it is released and flushed, and return to where they started once every allocation is",
			run: func(c *checkState) {
				t := openStorage(c, newStorage, StorageConfig{})
				held := needHeld(c, t)
				start := held()
				var ids []vkruntime.StorageID
				var sizes, added []uint64
				var total uint64
				for _, size := range oddSizes(t.Properties.Alignment) {
					before := held()
					h := mustAlloc(c, t, size)
					ids = append(ids, h.ID)
					total += size
					after := held()
					if after < before+size {
						c.Errorf("Alloc(%d): holdings went from %d B to %d B, less than the size", size, before, after)
					}
					sizes, added = append(sizes, size), append(added, after-before)
				}
				if now := held(); now < start+total {
					c.Errorf("%d allocations of %d B in all: holdings %d B, started at %d B", len(ids), total, now, start)
				}
				// Released in the order made, the largest last, each flushed
				// on its own: every one gives back what it took.
				for i, id := range ids {
					before := held()
					t.Storage.Dealloc(id)
					t.Storage.Flush()
					if after := held(); before-after != added[i] {
						c.Errorf("releasing and flushing the allocation of %d B, which raised the holdings by %d B, moved them from %d B to %d B", sizes[i], added[i], before, after)
					}
				}
				if end := held(); end != start {
					c.Errorf("every allocation released and flushed: holdings %d B, started at %d B (%d B leaked)", end, start, int64(end)-int64(start))
				}
			},
		},
		{
			Name: "storage/release-returns-memory",
			Rule: "Memory released by Dealloc and Flush can be allocated again: under a memory limit, allocating and releasing half the limit over and over never runs out",
			run: func(c *checkState) {
				t := openStorage(c, newStorage, StorageConfig{MemoryLimit: storageLimit})
				for round := range 12 {
					var ids []vkruntime.StorageID
					for i := range 4 {
						h, err := t.Storage.Alloc(storageLimit / 8)
						if err != nil {
							c.Fatalf("round %d, allocation %d of %d B under a limit of %d B: %v", round, i, storageLimit/8, storageLimit, err)
						}
						ids = append(ids, h.ID)
					}
					for _, id := range ids {
						t.Storage.Dealloc(id)
					}
					t.Storage.Flush()
				}
			},
		},
		{
			Name: "storage/zero-size-refused",
			Rule: "Alloc(0), and where the storage offers sparse binding ReserveVirtual(0), fail with an error matching runtime.ErrZeroSize and change nothing: Vulkan has no allocation of 0 B",
			run: func(c *checkState) {
				t := openStorage(c, newStorage, StorageConfig{})
				held, hasHeld := t.held()
				var before uint64
				if hasHeld {
					before = held()
				}
				refused := func(what string, h vkruntime.StorageHandle, err error, undo func(vkruntime.StorageID)) {
					switch {
					case err == nil:
						c.Errorf("%s = %v: want an error matching runtime.ErrZeroSize", what, h)
						undo(h.ID)
					case !errors.Is(err, vkruntime.ErrZeroSize):
						c.Errorf("%s: %v (%T), which does not match runtime.ErrZeroSize", what, err, err)
					}
				}
				h, err := t.Storage.Alloc(0)
				refused("Alloc(0)", h, err, t.Storage.Dealloc)
				if s, ok := t.Storage.(vkruntime.SparseStorage); ok && s.SparseGranule() != 0 {
					h, err = s.ReserveVirtual(0)
					refused("ReserveVirtual(0)", h, err, s.ReleaseVirtual)
				}
				t.Storage.Flush()
				if hasHeld {
					if after := held(); after != before {
						c.Errorf("the storage held %d B before the refusals and %d B after", before, after)
					}
				}
			},
		},
		{
			Name: "storage/oom-classified",
			Rule: "Past its memory limit Alloc fails with an error matching runtime.ErrOutOfDeviceMemory, both when the limit is filled and when one allocation alone exceeds it",
			run: func(c *checkState) {
				t := openStorage(c, newStorage, StorageConfig{MemoryLimit: storageLimit})
				if _, err := t.Storage.Alloc(2 * storageLimit); err == nil {
					c.Errorf("Alloc(%d) under a limit of %d B succeeded", 2*storageLimit, storageLimit)
				} else if !errors.Is(err, vkruntime.ErrOutOfDeviceMemory) {
					c.Errorf("Alloc(%d) under a limit of %d B: %v (%T), which is not ErrOutOfDeviceMemory", 2*storageLimit, storageLimit, err, err)
				}
				ids, err := fillLimit(c, t)
				if err == nil {
					c.Errorf("%d allocations of %d B under a limit of %d B all succeeded", len(ids), storageLimit/4, storageLimit)
				} else if !errors.Is(err, vkruntime.ErrOutOfDeviceMemory) {
					c.Errorf("allocation %d of %d B under a limit of %d B: %v (%T), which is not ErrOutOfDeviceMemory", len(ids), storageLimit/4, storageLimit, err, err)
				}
				if held := uint64(len(ids)) * (storageLimit / 4); held > storageLimit {
					c.Errorf("%d allocations of %d B (%d B) succeeded under a limit of %d B before one was refused", len(ids), storageLimit/4, held, storageLimit)
				}
				release(t, ids)
			},
		},
		{
			Name: "storage/oom-typed",
			Rule: "An out-of-memory error is a *runtime.OutOfMemoryError whose Size is the size asked, not rounded to the alignment, both when one allocation alone exceeds the limit and when the limit is filled",
			run: func(c *checkState) {
				t := openStorage(c, newStorage, StorageConfig{MemoryLimit: storageLimit})
				// An odd size: a storage reporting what it would have
				// taken (the size aligned up) passed a check of 2 MiB.
				const alone = 2*storageLimit + 1
				h, err := t.Storage.Alloc(alone)
				var oom *vkruntime.OutOfMemoryError
				switch {
				case err == nil:
					c.Errorf("Alloc(%d) under a limit of %d B succeeded", alone, storageLimit)
					release(t, []vkruntime.StorageID{h.ID}) // so the fill below tells of itself
				case !errors.As(err, &oom):
					c.Errorf("Alloc(%d) under a limit of %d B: %v (%T) is not a *runtime.OutOfMemoryError", alone, storageLimit, err, err)
				case oom.Size != alone:
					c.Errorf("Alloc(%d) under a limit of %d B: the error says %d B were asked: %v", alone, storageLimit, oom.Size, err)
				}
				ids, err := fillLimit(c, t)
				defer release(t, ids)
				if err == nil {
					c.Fatalf("%d allocations of %d B under a limit of %d B all succeeded", len(ids), storageLimit/4, storageLimit)
				}
				switch {
				case !errors.As(err, &oom):
					c.Errorf("allocation %d of %d B: %v (%T) is not a *runtime.OutOfMemoryError", len(ids), storageLimit/4, err, err)
				case oom.Size != storageLimit/4:
					c.Errorf("allocation of %d B: the error says %d B were asked: %v", storageLimit/4, oom.Size, err)
				}
			},
		},
		{
			Name: "storage/usable-after-oom",
			Rule: "After an out-of-memory failure the storage holds what it held before (a refusal of one allocation past the limit alone too), its live allocations keep their bytes, and it allocates again once memory is released",
			run: func(c *checkState) {
				t := openStorage(c, newStorage, StorageConfig{MemoryLimit: storageLimit})
				held, hasHeld := t.held()
				// Refused while there is room: memory the refusal kept
				// (a page taken on the way, not given back) shows here,
				// where past a filled limit it could not fit either.
				if hasHeld {
					before := held()
					if h, err := t.Storage.Alloc(2 * storageLimit); err == nil {
						c.Errorf("Alloc(%d) under a limit of %d B succeeded", 2*storageLimit, storageLimit)
						release(t, []vkruntime.StorageID{h.ID})
					} else if after := held(); after != before {
						c.Errorf("a refused Alloc(%d) moved the holdings from %d B to %d B", 2*storageLimit, before, after)
					}
				}
				ids, err := fillLimit(c, t)
				if err == nil {
					release(t, ids)
					c.Fatalf("%d allocations of %d B under a limit of %d B all succeeded", len(ids), storageLimit/4, storageLimit)
				}
				if len(ids) == 0 {
					c.Fatalf("the first allocation of %d B under a limit of %d B failed: %v", storageLimit/4, storageLimit, err)
				}
				var before uint64
				if hasHeld {
					before = held()
				}
				first := vkruntime.StorageHandle{ID: ids[0], Size: storageLimit / 4}
				written := writePattern(c, t, first, 3)
				if _, err := t.Storage.Alloc(storageLimit / 4); err == nil {
					c.Errorf("a second allocation past the limit succeeded")
				}
				if hasHeld {
					if after := held(); after != before {
						c.Errorf("a refused allocation moved the holdings from %d B to %d B", before, after)
					}
				}
				if written {
					checkPattern(c, t, first, 3, "a live allocation after out of memory")
				}
				last := ids[len(ids)-1]
				t.Storage.Dealloc(last)
				t.Storage.Flush()
				ids = ids[:len(ids)-1]
				h, err := t.Storage.Alloc(storageLimit / 4)
				if err != nil {
					c.Errorf("after releasing %d B the same allocation failed again: %v", storageLimit/4, err)
				} else {
					ids = append(ids, h.ID)
				}
				release(t, ids)
			},
		},
		{
			Name: "storage/pages-disjoint",
			Rule: "Live allocations never share a byte: a distinct pattern written to each reads back intact from all of them",
			run: func(c *checkState) {
				t := openStorage(c, newStorage, StorageConfig{})
				needMemory(c, t)
				var hs []vkruntime.StorageHandle
				// Large allocations too, where a storage may take another
				// path (its own pages, a shared block): several of them
				// live at once.
				sizes := append(oddSizes(t.Properties.Alignment), oddSizes(t.Properties.Alignment)...)
				for _, size := range []uint64{2<<20 + 7, 3 << 20, 4 << 20, 4<<20 + 1} {
					if fitsOneAllocation(t, size) {
						sizes = append(sizes, size)
					}
				}
				for i, size := range sizes {
					h := mustAlloc(c, t, size)
					hs = append(hs, h)
					writePattern(c, t, h, uint64(100+i))
				}
				for i, h := range hs {
					checkPattern(c, t, h, uint64(100+i), fmt.Sprintf("allocation %d of %d", i, len(hs)))
				}
				for _, h := range hs {
					t.Storage.Dealloc(h.ID)
				}
				t.Storage.Flush()
			},
		},
		{
			Name: "storage/transfer-odd-ranges",
			Rule: "Writes and reads at odd offsets and sizes move exactly the bytes asked and leave every other byte as it was",
			run:  func(c *checkState) { checkOddTransfers(c, openStorage(c, newStorage, StorageConfig{})) },
		},
		{
			Name: "storage/transfer-bounds",
			Rule: "A transfer reaching past the end of an allocation is an error and changes nothing",
			run: func(c *checkState) {
				t := openStorage(c, newStorage, StorageConfig{})
				m := needMemory(c, t)
				h := mustAlloc(c, t, 1000)
				defer release(t, []vkruntime.StorageID{h.ID})
				writePattern(c, t, h, 4)
				for _, r := range []struct{ off, n uint64 }{{0, 1001}, {999, 2}, {1000, 1}, {1 << 40, 1}, {^uint64(0), 2}} {
					bad := vkruntime.StorageHandle{ID: h.ID, Offset: r.off, Size: r.n}
					if err := m.Upload(bad, make([]byte, r.n)); err == nil {
						c.Errorf("Upload(%v) into an allocation of 1000 B succeeded", bad)
					}
					if err := m.Download(bad, make([]byte, r.n)); err == nil {
						c.Errorf("Download(%v) from an allocation of 1000 B succeeded", bad)
					}
				}
				checkPattern(c, t, h, 4, "the allocation after refused transfers")
			},
		},
		{
			Name: "storage/released-not-found",
			Rule: "A transfer to or from a released allocation fails with runtime.ErrNotFound and never reaches another allocation's memory",
			run: func(c *checkState) {
				t := openStorage(c, newStorage, StorageConfig{})
				m := needMemory(c, t)
				gone := mustAlloc(c, t, 4096)
				t.Storage.Dealloc(gone.ID)
				t.Storage.Flush()
				other := mustAlloc(c, t, 4096)
				defer release(t, []vkruntime.StorageID{other.ID})
				writePattern(c, t, other, 5)
				if gone.ID == other.ID {
					// A stale id then names a live allocation: a transfer
					// through it, or a second Dealloc, reaches that one.
					c.Fatalf("the storage issued the released id %d again at once: the stale handle %v names another live allocation", gone.ID, gone)
				}
				junk := make([]byte, 4096)
				for i := range junk {
					junk[i] = 0xA5
				}
				if err := m.Upload(gone, junk); !errors.Is(err, vkruntime.ErrNotFound) {
					c.Errorf("Upload to released %v: %v, want ErrNotFound", gone, err)
				}
				if err := m.Download(gone, make([]byte, 4096)); !errors.Is(err, vkruntime.ErrNotFound) {
					c.Errorf("Download from released %v: %v, want ErrNotFound", gone, err)
				}
				checkPattern(c, t, other, 5, "a live allocation after transfers to a released one")
			},
		},
		{
			Name: "storage/alignment",
			Rule: "Every allocation and every slice the pools carve from it, under every layout and pool kind, starts and ends on a multiple of the device alignment and lies inside its allocation",
			run: func(c *checkState) {
				t := openStorage(c, newStorage, StorageConfig{})
				align := t.Properties.Alignment
				var ids []vkruntime.StorageID
				for _, size := range oddSizes(align) {
					h := mustAlloc(c, t, size)
					ids = append(ids, h.ID)
					if h.Offset%align != 0 {
						c.Errorf("Alloc(%d) = %v: the allocation starts %d B past a multiple of the alignment of %d B", size, h, h.Offset%align, align)
					}
				}
				release(t, ids)
				for _, l := range churnLayouts(t.Properties) {
					churn(c, t, l, churnOptions{alignmentOnly: true})
				}
			},
		},
		{
			Name: "storage/churn-integrity",
			Rule: "Through churn across every pool kind and layout, every live slice keeps every byte written to it: 0 corrupt bytes",
			run: func(c *checkState) {
				t := openStorage(c, newStorage, StorageConfig{})
				needMemory(c, t)
				for _, l := range churnLayouts(t.Properties) {
					churn(c, t, l, churnOptions{})
				}
			},
		},
		{
			Name: "storage/sparse-binding",
			Rule: "Where the storage offers sparse binding, a virtual range holds no memory, bound granules alias the allocation behind them, binding memory it does not hold or past its end is refused, a bind not on whole granules is refused with ErrInvalidArgument, a submission naming a granule twice is refused whole with ErrOverlappingBinds, and pools over a virtual range keep every slice aligned and every byte",
			run:  func(c *checkState) { checkSparseBinding(c, openStorage(c, newStorage, StorageConfig{})) },
		},
		{
			Name: "storage/sparse-unsupported",
			Rule: "Where the storage is a runtime.SparseStorage without sparse residency (a granule of 0), ReserveVirtual fails with an error matching runtime.ErrUnsupported and makes nothing",
			run:  func(c *checkState) { checkSparseUnsupported(c, openStorage(c, newStorage, StorageConfig{})) },
		},
		{
			Name: "storage/sparse-address-space",
			Rule: "Where the storage offers sparse binding, live virtual ranges share MaxVirtualSize: ReserveVirtual past the space they leave fails with an error matching runtime.ErrOutOfDeviceMemory and changes nothing, and ReleaseVirtual gives the space back by the next Flush",
			run:  func(c *checkState) { checkSparseAddressSpace(c, openStorage(c, newStorage, StorageConfig{})) },
		},
		{
			Name: "storage/sparse-release",
			Rule: "Where the storage offers sparse binding, a Bind refused for any of its binds changes no binding, unbinding (Memory 0) detaches the memory behind a granule, and a released virtual range is gone with its bindings: transfers through it and Bind into it fail with runtime.ErrNotFound and never reach the memory once bound",
			run:  func(c *checkState) { checkSparseRelease(c, openStorage(c, newStorage, StorageConfig{})) },
		},
		{
			Name: "storage/pool-traffic-accounting",
			Rule: "After churn through the pools, every reservation freed and the pools cleaned up, the storage holds what it held before",
			run: func(c *checkState) {
				t := openStorage(c, newStorage, StorageConfig{})
				held := needHeld(c, t)
				start := held()
				for _, l := range churnLayouts(t.Properties) {
					churn(c, t, l, churnOptions{alignmentOnly: true})
					if now := held(); now != start {
						c.Errorf("layout %v: after churn and cleanup the storage holds %d B, %d B before", l, now, start)
					}
				}
			},
		},
	}
}

func mustAlloc(c *checkState, t StorageTarget, size uint64) vkruntime.StorageHandle {
	h, err := t.Storage.Alloc(size)
	if err != nil {
		c.Fatalf("Alloc(%d): %v", size, err)
	}
	return vkruntime.StorageHandle{ID: h.ID, Offset: h.Offset, Size: size}
}

func release(t StorageTarget, ids []vkruntime.StorageID) {
	for _, id := range ids {
		t.Storage.Dealloc(id)
	}
	t.Storage.Flush()
}

// fitsOneAllocation says whether the storage makes one allocation of size
// bytes (an AllocationLimiter may make them no larger than its limit).
func fitsOneAllocation(t StorageTarget, size uint64) bool {
	l, ok := t.Storage.(vkruntime.AllocationLimiter)
	return !ok || l.MaxAllocationSize() == 0 || size <= l.MaxAllocationSize()
}

// fillLimit allocates quarters of the limit until the storage refuses one
// (or eight succeed) and returns what it holds and the refusal.
func fillLimit(c *checkState, t StorageTarget) ([]vkruntime.StorageID, error) {
	var ids []vkruntime.StorageID
	for range 8 {
		h, err := t.Storage.Alloc(storageLimit / 4)
		if err != nil {
			return ids, err
		}
		ids = append(ids, h.ID)
	}
	return ids, nil
}

// writePattern fills h with the pattern of seed where the target has
// memory; it reports whether it wrote.
func writePattern(c *checkState, t StorageTarget, h vkruntime.StorageHandle, seed uint64) bool {
	if t.Memory == nil {
		return false
	}
	if err := t.Memory.Upload(h, pattern(seed, h.Size)); err != nil {
		c.Errorf("writing %v: %v", h, err)
		return false
	}
	return true
}

// checkPattern reads h back and reports every byte that is not the
// pattern of seed.
func checkPattern(c *checkState, t StorageTarget, h vkruntime.StorageHandle, seed uint64, what string) int {
	got := make([]byte, h.Size)
	if err := t.Memory.Download(h, got); err != nil {
		c.Errorf("%s: reading %v: %v", what, h, err)
		return 0
	}
	return compareBytes(c, pattern(seed, h.Size), got, what)
}

// compareBytes reports the corrupt bytes of got: their count and the first.
func compareBytes(c *checkState, want, got []byte, what string) int {
	if bytes.Equal(want, got) {
		return 0
	}
	bad, first := 0, -1
	for i := range want {
		if i >= len(got) || got[i] != want[i] {
			if first < 0 {
				first = i
			}
			bad++
		}
	}
	if bad > 0 {
		g := "missing"
		if first < len(got) {
			g = fmt.Sprintf("%#02x", got[first])
		}
		c.Errorf("%s: %d of %d bytes corrupt, the first at byte %d (want %#02x, got %s)", what, bad, len(want), first, want[first], g)
	}
	return bad
}

// pattern is n bytes of a sequence determined by seed, with no short
// period, so a byte moved or lost is seen.
func pattern(seed, n uint64) []byte {
	b := make([]byte, (n+7)&^7)
	x := seed*0x9E3779B97F4A7C15 + 0x632BE59BD9B4E019
	for i := 0; i < len(b); i += 8 {
		x ^= x << 13
		x ^= x >> 7
		x ^= x << 17
		binary.LittleEndian.PutUint64(b[i:], x)
	}
	return b[:n]
}

// checkOddTransfers writes and reads a mirror of an allocation through
// ranges at odd offsets and sizes.
func checkOddTransfers(c *checkState, t StorageTarget) {
	m := needMemory(c, t)
	const size = 4099
	h := mustAlloc(c, t, size)
	defer release(t, []vkruntime.StorageID{h.ID})
	mirror := pattern(6, size)
	if err := m.Upload(h, mirror); err != nil {
		c.Fatalf("writing %v: %v", h, err)
	}
	ranges := []struct{ off, n uint64 }{{0, 1}, {1, 1}, {3, 5}, {7, 13}, {1, 4096}, {4095, 4}, {4098, 1}, {17, 1023}, {2048, 2051}, {5, 0}}
	for i, r := range ranges {
		data := pattern(uint64(200+i), r.n)
		sub := vkruntime.StorageHandle{ID: h.ID, Offset: r.off, Size: r.n}
		if err := m.Upload(sub, data); err != nil {
			c.Errorf("Upload(%v): %v", sub, err)
			continue
		}
		copy(mirror[r.off:], data)
		got := make([]byte, r.n)
		if err := m.Download(sub, got); err != nil {
			c.Errorf("Download(%v): %v", sub, err)
			continue
		}
		compareBytes(c, data, got, fmt.Sprintf("read back of %v", sub))
		// The same range written again reads back anew, not as it was
		// first read.
		again := pattern(uint64(300+i), r.n)
		if err := m.Upload(sub, again); err != nil {
			c.Errorf("Upload(%v) again: %v", sub, err)
			continue
		}
		copy(mirror[r.off:], again)
		if err := m.Download(sub, got); err != nil {
			c.Errorf("Download(%v) again: %v", sub, err)
			continue
		}
		compareBytes(c, again, got, fmt.Sprintf("read back of %v written a second time", sub))
	}
	got := make([]byte, size)
	if err := m.Download(h, got); err != nil {
		c.Fatalf("Download(%v): %v", h, err)
	}
	compareBytes(c, mirror, got, "the whole allocation after writes at odd ranges")
}

// churnLayouts are the layouts the churn runs under: every preset and a
// sliced ladder, covering sliced, exclusive, direct and (inside a
// persistent window) persistent pools. The ladder's pages are at most the
// device's largest: a layout whose pages no allocation can hold is refused
// at install (a device whose largest allocation is 256 KiB failed churn
// and cleanup so).
func churnLayouts(p vkruntime.DeviceProperties) []memory.Layout {
	big := upToLargestPage(p, max(1<<20, p.Alignment))
	page := min(max(64<<10, p.Alignment), big)
	slice := min(max(16<<10, p.Alignment), page)
	return []memory.Layout{
		memory.SubSlicesLayout(),
		memory.ExclusivePagesLayout(),
		memory.DirectLayout(),
		memory.SlicedLayout(memory.SlicedPool{PageSize: page, MaxSlice: &slice}, memory.SlicedPool{PageSize: big}),
	}
}
