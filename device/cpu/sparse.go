package cpu

import (
	"context"
	"fmt"
	"math"
	"slices"

	vkruntime "github.com/vkrt/vkrt/runtime"
)

// With WithSparseGranule the storage has sparse residency: a virtual range
// is address space with no memory, whose granules Bind backs with the
// memory of the storage's pages.
var _ vkruntime.SparseStorage = (*Storage)(nil)

// maxVirtualSpace is the sparse address space every virtual range shares,
// 1 TiB as on an H200.
const maxVirtualSpace = 1 << 40

var errNoSparse = fmt.Errorf("cpu: the device has no sparse residency (cpu.WithSparseGranule gives it some): %w", vkruntime.ErrUnsupported)

// SparseGranule is the granule WithSparseGranule set, 0 for none.
func (s *Storage) SparseGranule() uint64 { return s.granule }

// MaxVirtualSize is 1 TiB with sparse residency, else 0: the address
// space all ranges share.
func (s *Storage) MaxVirtualSize() uint64 {
	if s.granule == 0 {
		return 0
	}
	return maxVirtualSpace
}

// VirtualSpaceLeft is what the live ranges leave of the sparse address
// space (runtime.VirtualSpaceReporter).
func (s *Storage) VirtualSpaceLeft() uint64 {
	s.mu.Lock()
	defer s.mu.Unlock()
	return maxVirtualSpace - s.virtualBytes
}

// ReserveVirtual makes a virtual range of size bytes with nothing bound;
// it holds no memory and counts against neither the heap nor the limit.
func (s *Storage) ReserveVirtual(size uint64) (vkruntime.StorageHandle, error) {
	if err := s.dev.begin(context.Background()); err != nil {
		return vkruntime.StorageHandle{}, err
	}
	defer s.dev.end()
	if s.granule == 0 {
		return vkruntime.StorageHandle{}, errNoSparse
	}
	if size == 0 {
		return vkruntime.StorageHandle{}, fmt.Errorf("cpu: a virtual range needs at least one byte: %w", vkruntime.ErrZeroSize)
	}
	s.mu.Lock()
	defer s.mu.Unlock()
	// The range takes whole granules of the space, as on a GPU (and vk),
	// since Bind binds its last granule whole. A range past the whole
	// address space is past what the live ranges leave, as the contract
	// classifies it.
	whole := (size + s.granule - 1) &^ (s.granule - 1)
	if left := maxVirtualSpace - s.virtualBytes; size > left || whole > left {
		return vkruntime.StorageHandle{}, &vkruntime.OutOfMemoryError{Size: size, Limit: maxVirtualSpace,
			Detail: fmt.Sprintf("the sparse address space has %d B left of %d B, in %d B granules", left, uint64(maxVirtualSpace), s.granule)}
	}
	s.virtualBytes += whole
	id := vkruntime.NewStorageID()
	s.pages[id] = &page{virtual: map[uint64]granuleMemory{}, size: size, held: whole}
	return vkruntime.StorageHandle{ID: id, Size: size}, nil
}

// ReleaseVirtual forgets a virtual range and what is bound in it.
func (s *Storage) ReleaseVirtual(id vkruntime.StorageID) {
	s.mu.Lock()
	defer s.mu.Unlock()
	if p, ok := s.pages[id]; ok && p.virtual != nil {
		s.forget(id, p)
	}
}

// Bind backs granules of a virtual range with pages' memory (Memory 0
// unbinds them). Every bind is checked first; a refused call binds nothing.
func (s *Storage) Bind(virtual vkruntime.StorageID, binds []vkruntime.SparseBind) error {
	if err := s.dev.begin(context.Background()); err != nil {
		return err
	}
	defer s.dev.end()
	if s.granule == 0 {
		// Without sparse residency no storage is a virtual range: the
		// range named is not found, as on vk.
		return fmt.Errorf("cpu: sparse bind into storage %d, which is no virtual range: %w (the device has no sparse residency)", virtual, vkruntime.ErrNotFound)
	}
	// What is checked is what is bound: binds read again from the
	// caller's slice, which may change meanwhile, could bind memory past
	// its page, which a kernel then reads and writes.
	binds = slices.Clone(binds)
	s.mu.Lock()
	defer s.mu.Unlock()
	vp, ok := s.pages[virtual]
	if !ok || vp.virtual == nil {
		return fmt.Errorf("cpu: sparse bind into storage %d, which is no virtual range: %w", virtual, vkruntime.ErrNotFound)
	}
	g := s.granule
	mems := make([]*page, len(binds))
	for i, b := range binds {
		if b.Offset%g != 0 || b.Size%g != 0 || b.MemoryOffset%g != 0 || b.Size == 0 {
			return fmt.Errorf("cpu: sparse bind %d (%+v): offsets and sizes must be non-zero multiples of the %d B granule: %w", i, b, g, vkruntime.ErrInvalidArgument)
		}
		if b.Offset > math.MaxUint64-b.Size || b.Offset+b.Size > (vp.size+g-1)&^(g-1) {
			return fmt.Errorf("cpu: sparse bind %d (%+v) lies outside the %d B virtual range: %w", i, b, vp.size, vkruntime.ErrOutOfRange)
		}
		if b.Memory == 0 {
			continue
		}
		mp, ok := s.pages[b.Memory]
		if !ok || mp.virtual != nil {
			return fmt.Errorf("cpu: sparse bind %d (%+v): no page %d: %w", i, b, b.Memory, vkruntime.ErrNotFound)
		}
		if b.MemoryOffset > uint64(len(mp.mem)) || b.Size > uint64(len(mp.mem))-b.MemoryOffset {
			return fmt.Errorf("cpu: sparse bind %d (%+v): page %d holds %d B: %w", i, b, b.Memory, len(mp.mem), vkruntime.ErrOutOfRange)
		}
		mems[i] = mp
	}
	// Vulkan leaves the order of one submission's binds open: a range
	// named twice in it may end either way on a GPU, so it is refused
	// here, where the binds would apply in order and hide it.
	if err := vkruntime.CheckOverlappingBinds(binds); err != nil {
		return fmt.Errorf("cpu: %w", err)
	}
	if afterBindCheck != nil {
		afterBindCheck()
	}
	for i, b := range binds {
		if first, n := b.Offset/g, b.Size/g; mems[i] == nil && n > uint64(len(vp.virtual)) {
			// An unbind of more granules than are bound looks only at
			// those bound: granule by granule, one of a 1 TiB range of
			// 256 B granules held the storage's lock for 2^32 steps.
			for k, m := range vp.virtual {
				if k-first < n {
					m.page.backing--
					delete(vp.virtual, k)
				}
			}
			continue
		}
		for o := uint64(0); o < b.Size; o += g {
			k := (b.Offset + o) / g
			if old, ok := vp.virtual[k]; ok {
				old.page.backing--
			}
			if mems[i] == nil {
				delete(vp.virtual, k)
			} else {
				vp.virtual[k] = granuleMemory{page: mems[i], offset: b.MemoryOffset + o}
				mems[i].backing++
			}
		}
	}
	return nil
}

// afterBindCheck, set by tests, is called once Bind has checked its binds,
// before any is applied.
var afterBindCheck func()
