package client

import (
	"fmt"
	"sync"

	"github.com/vkrt/vkrt/device"
	vkruntime "github.com/vkrt/vkrt/runtime"
)

// StorageStats are the device's own figures as the client's pools drive
// its storage: what they asked of the driver, not what they hand out.
type StorageStats struct {
	// Allocs and Deallocs count the device allocations made and released.
	Allocs, Deallocs uint64
	// Allocations is the number of device allocations the storage holds
	// now (released ones until they are flushed), AllocationsPeak the most
	// it held at once.
	Allocations, AllocationsPeak int
	// Bytes is the device memory the storage holds now (its Allocated),
	// BytesPeak the most it held at once.
	Bytes, BytesPeak uint64
	// BindCalls counts sparse-binding submissions (the Virtual layout's).
	BindCalls uint64
}

// StorageStats reads the device storage's figures now.
func (c *Client) StorageStats() StorageStats {
	if c.isNil() {
		return StorageStats{}
	}
	return c.storage.statsNow()
}

// clientStorage is the device's storage as the client's pools use it: it
// counts what they ask of the device (StorageStats), holds a device handed
// with WithBackend to the client's memory limit, and passes the device's
// sparse residency through (a granule of 0 where it has none, so the
// Virtual layout falls back).
type clientStorage struct {
	device.Storage
	sparse      vkruntime.SparseStorage // nil where the device has none
	limit, heap uint64                  // limit 0: none beyond the device's own

	// flushMu keeps the device's Flush apart from the calls whose account
	// it settles: Flush holds it alone, while Dealloc holds it shared from
	// counting a release to handing it to the device, and Alloc from asking
	// the device to reading its figures. So held never falls below what the
	// device holds, and a peak is read before a Flush can lower it.
	flushMu  sync.RWMutex
	mu       sync.Mutex
	sizes    map[vkruntime.StorageID]uint64 // live allocations, for the limit
	held     uint64                         // bytes asked of live and unflushed allocations
	released uint64                         // part of held, deallocated but not yet flushed
	stats    StorageStats
}

var _ vkruntime.SparseStorage = (*clientStorage)(nil)

func newClientStorage(s device.Storage, limit, heap uint64) *clientStorage {
	if inner := s.Limit(); limit != 0 && inner != 0 && inner < limit {
		limit = inner
	}
	cs := &clientStorage{Storage: s, limit: limit, heap: heap, sizes: map[vkruntime.StorageID]uint64{}}
	cs.sparse, _ = s.(vkruntime.SparseStorage)
	return cs
}

// Alloc refuses an allocation past the client's limit (after a Flush)
// with a *runtime.OutOfMemoryError, and otherwise asks the device.
func (s *clientStorage) Alloc(size uint64) (vkruntime.StorageHandle, error) {
	if !s.room(size) {
		s.Flush()
		if !s.room(size) {
			s.mu.Lock()
			held := s.held
			s.mu.Unlock()
			return vkruntime.StorageHandle{}, &vkruntime.OutOfMemoryError{
				Size: size, HeapSize: s.heap, Usage: held, Limit: s.limit,
				Detail: fmt.Sprintf("the client's memory limit: %d B held, %d B free", held, s.limit-min(s.limit, held)),
			}
		}
	}
	h, bytes, allocations, err := s.deviceAlloc(size)
	s.mu.Lock()
	defer s.mu.Unlock()
	if err != nil {
		s.held -= size
		return h, err
	}
	s.sizes[h.ID] = size
	s.stats.Allocs++
	s.stats.BytesPeak = max(s.stats.BytesPeak, bytes)
	s.stats.AllocationsPeak = max(s.stats.AllocationsPeak, allocations)
	return h, nil
}

// deviceAlloc asks the device for size bytes and reads its figures after,
// under flushMu, released however the device's calls end: one that
// panicked left it held, and every Flush after (closing the client) then
// waited for it for ever. A call that panics gives back what room
// reserved, which otherwise stayed counted against the limit for good,
// and an allocation the device made before its figures panicked, which
// nobody else could free.
func (s *clientStorage) deviceAlloc(size uint64) (h vkruntime.StorageHandle, bytes uint64, allocations int, err error) {
	s.flushMu.RLock()
	defer s.flushMu.RUnlock()
	allocated, returned := false, false
	defer func() {
		switch {
		case returned:
		case allocated:
			// Released as Dealloc releases: held until the next Flush.
			s.mu.Lock()
			s.released += size
			s.stats.Allocs++
			s.stats.Deallocs++
			s.mu.Unlock()
			s.Storage.Dealloc(h.ID)
		default:
			s.mu.Lock()
			s.held -= size
			s.mu.Unlock()
		}
	}()
	h, err = s.Storage.Alloc(size)
	allocated = err == nil
	bytes, allocations = s.Storage.Allocated(), s.Storage.Allocations()
	returned = true
	return h, bytes, allocations, err
}

// figures reads the device's holdings under flushMu, released however
// the reading ends, as deviceAlloc does.
func (s *clientStorage) figures() (bytes uint64, allocations int) {
	s.flushMu.RLock()
	defer s.flushMu.RUnlock()
	return s.Storage.Allocated(), s.Storage.Allocations()
}

// room reserves size bytes under the limit; without one, always.
func (s *clientStorage) room(size uint64) bool {
	s.mu.Lock()
	defer s.mu.Unlock()
	total := s.held + size
	if s.limit != 0 && (total < size || total > s.limit) {
		return false
	}
	s.held = total
	return true
}

func (s *clientStorage) Dealloc(id vkruntime.StorageID) {
	s.flushMu.RLock()
	defer s.flushMu.RUnlock()
	s.mu.Lock()
	if size, ok := s.sizes[id]; ok {
		delete(s.sizes, id)
		s.released += size
		s.stats.Deallocs++
	}
	s.mu.Unlock()
	s.Storage.Dealloc(id)
}

// deferringStorage is a device storage whose Flush may keep released
// pages that work in flight still uses (vk's), and says what it kept.
type deferringStorage interface {
	Deferred() (bytes uint64, pages int)
}

func (s *clientStorage) Flush() {
	s.flushMu.Lock()
	defer s.flushMu.Unlock()
	s.Storage.Flush()
	// What the device kept is still held: with flushMu held alone, its
	// deferred pages are exactly the released ones it did not free.
	var kept uint64
	if d, ok := s.Storage.(deferringStorage); ok {
		kept, _ = d.Deferred()
	}
	s.mu.Lock()
	kept = min(kept, s.released)
	s.held -= s.released - kept
	s.released = kept
	s.mu.Unlock()
}

// Limit is the smaller of the client's limit and the device's.
func (s *clientStorage) Limit() uint64 {
	if s.limit != 0 {
		return s.limit
	}
	return s.Storage.Limit()
}

func (s *clientStorage) statsNow() StorageStats {
	bytes, allocations := s.figures()
	s.mu.Lock()
	defer s.mu.Unlock()
	st := s.stats
	st.Bytes, st.Allocations = bytes, allocations
	st.BytesPeak, st.AllocationsPeak = max(st.BytesPeak, bytes), max(st.AllocationsPeak, allocations)
	return st
}

// errNoSparse refuses a virtual range where the device has no sparse
// residency, as the devices themselves do.
var errNoSparse = fmt.Errorf("client: the device has no sparse residency: %w", vkruntime.ErrUnsupported)

// SparseGranule is the device's, 0 where it has no sparse residency.
func (s *clientStorage) SparseGranule() uint64 {
	if s.sparse == nil {
		return 0
	}
	return s.sparse.SparseGranule()
}

func (s *clientStorage) MaxVirtualSize() uint64 {
	if s.sparse == nil {
		return 0
	}
	return s.sparse.MaxVirtualSize()
}

// VirtualSpaceLeft is the device storage's, where it tells it; else the
// whole space.
func (s *clientStorage) VirtualSpaceLeft() uint64 {
	if r, ok := s.sparse.(vkruntime.VirtualSpaceReporter); ok {
		return r.VirtualSpaceLeft()
	}
	return s.MaxVirtualSize()
}

func (s *clientStorage) ReserveVirtual(size uint64) (vkruntime.StorageHandle, error) {
	if s.sparse == nil {
		return vkruntime.StorageHandle{}, errNoSparse
	}
	return s.sparse.ReserveVirtual(size)
}

func (s *clientStorage) ReleaseVirtual(id vkruntime.StorageID) {
	if s.sparse != nil {
		s.sparse.ReleaseVirtual(id)
	}
}

func (s *clientStorage) Bind(virtual vkruntime.StorageID, binds []vkruntime.SparseBind) error {
	if s.sparse == nil {
		// No range was ever reserved, so virtual names none, as the
		// devices say.
		return fmt.Errorf("client: sparse bind into storage %d, which is no virtual range (the device has no sparse residency): %w",
			virtual, vkruntime.ErrNotFound)
	}
	s.mu.Lock()
	s.stats.BindCalls++
	s.mu.Unlock()
	return s.sparse.Bind(virtual, binds)
}
