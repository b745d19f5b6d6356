//go:build cgo

package vk

import (
	"context"
	"fmt"
	"math"

	vulkan "github.com/vulkan-go/vulkan"

	vkruntime "github.com/vkrt/vkrt/runtime"
)

// The storage is a runtime.SparseStorage: on a device with sparse residency
// a virtual range is one buffer made with SPARSE_BINDING and
// SPARSE_RESIDENCY and no memory, whose granules Bind backs with the
// memory of the storage's pages (vkQueueBindSparse on the dispatch queue).
// Elsewhere (lavapipe) SparseGranule is 0 and the Virtual layout's pool
// falls back to SubSlices.
var _ vkruntime.SparseStorage = (*Storage)(nil)

const sparseFlags = vulkan.BufferCreateSparseBindingBit | vulkan.BufferCreateSparseResidencyBit

// probeSparse asks the driver for a sparse buffer's binding granularity;
// the device keeps sparse residency off (granule 0) unless such a buffer
// can take the storage's memory type.
func (d *Device) probeSparse() {
	const probe = 64 << 20
	buf, err := d.createBufferWith(probe, sparseFlags)
	if err != nil {
		return
	}
	defer vulkan.DestroyBuffer(d.handle, buf, nil)
	req := d.calls.bufferRequirements(buf)
	granule := req.alignment
	if granule == 0 || granule&(granule-1) != 0 || req.memoryTypeBits&(1<<d.memoryType) == 0 {
		return
	}
	d.sparseGranule = granule
	d.sparseSpace = vkruntime.RangesSpace(d.info.Limits.SparseAddressSpaceSize, d.info.Heaps[d.heapIndex].Size) &^ (granule - 1)
}

// SparseGranule is the binding granularity of a virtual range (64 KiB on
// NVIDIA), 0 where the device has no sparse residency.
func (s *Storage) SparseGranule() uint64 { return s.dev.sparseGranule }

// MaxVirtualSize is what the ranges may take of the device's sparse
// address space (runtime.RangesSpace), in whole granules.
func (s *Storage) MaxVirtualSize() uint64 { return s.dev.sparseSpace }

// VirtualSpaceLeft is what the live ranges leave of MaxVirtualSize
// (runtime.VirtualSpaceReporter).
func (s *Storage) VirtualSpaceLeft() uint64 {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.dev.sparseSpace - s.virtualBytes
}

// ReserveVirtual makes a virtual range of size bytes with no memory bound.
// It holds no device memory, so it counts against neither the heap nor the
// limit; the pages bound into it do.
func (s *Storage) ReserveVirtual(size uint64) (vkruntime.StorageHandle, error) {
	d := s.dev
	if err := d.begin(); err != nil {
		return vkruntime.StorageHandle{}, err
	}
	defer d.end()
	switch {
	case d.sparseGranule == 0:
		return vkruntime.StorageHandle{}, fmt.Errorf("vk: device %d (%s) has no sparse residency: %w", d.info.Index, d.info.Name, vkruntime.ErrUnsupported)
	case size == 0:
		return vkruntime.StorageHandle{}, fmt.Errorf("vk: a virtual range needs at least one byte: %w", vkruntime.ErrZeroSize)
	case size > d.sparseSpace:
		// Past the whole space is past what the live ranges leave: the
		// contract's class, which a pool halving its range relies on.
		return vkruntime.StorageHandle{}, &vkruntime.OutOfMemoryError{Size: size, Limit: d.sparseSpace,
			Detail: fmt.Sprintf("the ranges may take %d B of the device's sparse address space", d.sparseSpace)}
	}
	// Whole granules, so every granule of the range can be bound.
	whole := (size + d.sparseGranule - 1) &^ (d.sparseGranule - 1)
	// The ranges share the device's sparse address space: what is left is
	// checked here, so the refusal is the same on every driver.
	s.mu.Lock()
	if left := d.sparseSpace - s.virtualBytes; whole > left {
		s.mu.Unlock()
		return vkruntime.StorageHandle{}, &vkruntime.OutOfMemoryError{Size: whole, Limit: d.sparseSpace,
			Detail: fmt.Sprintf("the device's sparse address space has %d B left of the %d B its ranges may take", left, d.sparseSpace)}
	}
	s.virtualBytes += whole
	s.mu.Unlock()
	buf, err := d.createBufferWith(whole, sparseFlags)
	if err != nil {
		s.mu.Lock()
		s.virtualBytes -= whole
		s.mu.Unlock()
		return vkruntime.StorageHandle{}, err
	}
	p := &page{id: vkruntime.NewStorageID(), size: whole, buffer: buf, virtual: true}
	s.mu.Lock()
	s.pages[p.id] = p
	s.mu.Unlock()
	return vkruntime.StorageHandle{ID: p.id, Size: size}, nil
}

// ReleaseVirtual releases a virtual range, which should have no memory
// bound any more; like Dealloc, the buffer goes at the next Flush once no
// transfer or dispatch uses it.
func (s *Storage) ReleaseVirtual(id vkruntime.StorageID) {
	s.mu.Lock()
	p, ok := s.pages[id]
	s.mu.Unlock()
	if ok && p.virtual {
		s.Dealloc(id) // its address space comes back at that Flush
	}
}

// Bind backs granules of a virtual range with the memory of the storage's
// pages (Memory 0 unbinds them), in one vkQueueBindSparse, and waits for it:
// work submitted afterwards sees the new bindings. Every bind is checked
// first; a refused call binds nothing.
func (s *Storage) Bind(virtual vkruntime.StorageID, binds []vkruntime.SparseBind) error {
	d := s.dev
	if err := d.begin(); err != nil {
		return err
	}
	defer d.end()
	if len(binds) == 0 {
		// Nothing to bind, but the range is named all the same, as the cpu
		// device checks it: an unknown one was taken.
		s.mu.Lock()
		p, ok := s.pages[virtual]
		s.mu.Unlock()
		if !ok || !p.virtual {
			return fmt.Errorf("vk: sparse bind into storage %d, which is no virtual range: %w", virtual, vkruntime.ErrNotFound)
		}
		return nil
	}
	// Granules being rebound may be what an abandoned dispatch still reads.
	if err := d.settle(context.Background()); err != nil {
		return err
	}
	handles := []vkruntime.StorageHandle{{ID: virtual}}
	for _, b := range binds {
		if b.Memory != 0 {
			handles = append(handles, vkruntime.StorageHandle{ID: b.Memory})
		}
	}
	pins, err := s.pin(handles...)
	if err != nil {
		return s.bindRefusal(virtual, binds, err)
	}
	release := func() { s.unpin(pins) }
	vp := pins[0].page
	if !vp.virtual {
		release()
		return fmt.Errorf("vk: sparse bind into storage %d, which is a page, not a virtual range: %w", virtual, vkruntime.ErrNotFound)
	}
	g := d.sparseGranule
	memBinds := make([]sparseBind, len(binds))
	next := 1
	for i, b := range binds {
		if b.Offset%g != 0 || b.Size%g != 0 || b.MemoryOffset%g != 0 || b.Size == 0 {
			release()
			return fmt.Errorf("vk: sparse bind %d (%+v): offsets and sizes must be non-zero multiples of the %d B granule: %w", i, b, g, vkruntime.ErrInvalidArgument)
		}
		if b.Offset > math.MaxUint64-b.Size || b.Offset+b.Size > vp.size {
			release()
			return fmt.Errorf("vk: sparse bind %d (%+v) lies outside the %d B virtual range: %w", i, b, vp.size, vkruntime.ErrOutOfRange)
		}
		memBinds[i] = newSparseBind(b.Offset, b.Size, nil, 0)
		if b.Memory != 0 {
			mp := pins[next].page
			next++
			if mp.virtual {
				release()
				return fmt.Errorf("vk: sparse bind %d (%+v): storage %d is a virtual range, which holds no memory", i, b, b.Memory)
			}
			if b.MemoryOffset > mp.held || b.Size > mp.held-b.MemoryOffset {
				release()
				return fmt.Errorf("vk: sparse bind %d (%+v): storage %d holds %d B of memory: %w", i, b, b.Memory, mp.held, vkruntime.ErrOutOfRange)
			}
			memBinds[i] = newSparseBind(b.Offset, b.Size, mp.memory, b.MemoryOffset)
		}
	}
	if err := vkruntime.CheckOverlappingBinds(binds); err != nil {
		release()
		return err
	}
	c, err := d.acquireContext()
	if err != nil {
		release()
		return err
	}
	defer func() { d.releaseContext(c); release() }()
	d.queueMu.Lock()
	r := d.calls.bindSparse(d.queue, vp.buffer, memBinds, c.fence)
	d.queueMu.Unlock()
	if err := d.noteResult("vkQueueBindSparse", r); err != nil {
		return err
	}
	fences := []vulkan.Fence{c.fence}
	if err := d.noteResult("vkWaitForFences", vulkan.WaitForFences(d.handle, 1, fences, vulkan.True, math.MaxUint64)); err != nil {
		return err
	}
	if err := d.noteResult("vkResetFences", vulkan.ResetFences(d.handle, 1, fences)); err != nil {
		return err
	}
	return d.checkValidation()
}

// bindRefusal is the error of a Bind whose range or memory pin refused
// (err): which of them is not found, as the cpu device names it, where
// err named only a handle of 0 B.
func (s *Storage) bindRefusal(virtual vkruntime.StorageID, binds []vkruntime.SparseBind, err error) error {
	s.mu.Lock()
	defer s.mu.Unlock()
	if p, ok := s.pages[virtual]; !ok || !p.virtual {
		return fmt.Errorf("vk: sparse bind into storage %d, which is no virtual range: %w", virtual, vkruntime.ErrNotFound)
	}
	for i, b := range binds {
		if _, ok := s.pages[b.Memory]; b.Memory != 0 && !ok {
			return fmt.Errorf("vk: sparse bind %d (%+v): no page %d: %w", i, b, b.Memory, vkruntime.ErrNotFound)
		}
	}
	return fmt.Errorf("vk: sparse bind: %w", err)
}
