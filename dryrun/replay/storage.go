package replay

import (
	"fmt"
	"sync"

	vkruntime "github.com/vkrt/vkrt/runtime"
)

// CountingStorage is a [vkruntime.Storage] that holds no memory: every Alloc
// is counted as the device allocation a real run would make, and the bytes
// it would hold are tracked, so a replay's driver_allocs and footprint are
// what a device would see. Ids are never reused. It is safe for concurrent
// use.
type CountingStorage struct {
	// Limit, when non-zero, is the heap size: an Alloc that would hold more
	// fails with ErrOutOfDeviceMemory, as the driver would.
	Limit uint64
	// Granule, when non-zero, is the sparse binding granularity the storage
	// offers (see vkruntime.SparseStorage); 0 is a device without sparse
	// residency.
	Granule uint64

	mu        sync.Mutex
	sparse    sparseCounts
	next      vkruntime.StorageID
	held      []heldAlloc // by id, which counts up from 1
	allocs    uint64
	deallocs  uint64
	bytesHeld uint64
	peakHeld  uint64
	// virtual: the live ranges' sizes, which share maxVirtualSize.
	virtual      map[vkruntime.StorageID]uint64
	virtualBytes uint64
}

// heldAlloc is an allocation's size and whether it is held.
type heldAlloc struct {
	size uint64
	held bool
}

// NewCountingStorage is a CountingStorage refusing to hold more than limit
// bytes (0: no limit).
func NewCountingStorage(limit uint64) *CountingStorage {
	return &CountingStorage{Limit: limit}
}

// Alloc counts one device allocation of size bytes.
func (s *CountingStorage) Alloc(size uint64) (vkruntime.StorageHandle, error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	if size == 0 {
		return vkruntime.StorageHandle{}, fmt.Errorf("replay: a page needs at least one byte: %w", vkruntime.ErrZeroSize)
	}
	if s.Limit != 0 && (size > s.Limit || s.bytesHeld > s.Limit-size) {
		return vkruntime.StorageHandle{}, &vkruntime.OutOfMemoryError{Size: size, Limit: s.Limit, Usage: s.bytesHeld,
			Detail: fmt.Sprintf("a dry-run storage of %d B already holds %d B", s.Limit, s.bytesHeld)}
	}
	s.next++
	s.hold(s.next, size)
	s.allocs++
	s.bytesHeld += size
	s.peakHeld = max(s.peakHeld, s.bytesHeld)
	return vkruntime.StorageHandle{ID: s.next, Size: size}, nil
}

// Dealloc releases an allocation at once; an id it does not hold is ignored,
// as releasing twice must not count twice.
func (s *CountingStorage) Dealloc(id vkruntime.StorageID) {
	s.mu.Lock()
	defer s.mu.Unlock()
	a, ok := s.allocation(id)
	if !ok {
		return
	}
	s.held[id] = heldAlloc{}
	s.deallocs++
	s.bytesHeld -= a.size
}

// hold records allocation id, the newest, of size bytes. s.mu is held.
func (s *CountingStorage) hold(id vkruntime.StorageID, size uint64) {
	for uint64(len(s.held)) <= uint64(id) {
		s.held = append(s.held, heldAlloc{})
	}
	s.held[id] = heldAlloc{size: size, held: true}
}

// allocation is held allocation id; ok is false for any other id. s.mu is
// held.
func (s *CountingStorage) allocation(id vkruntime.StorageID) (heldAlloc, bool) {
	if uint64(id) >= uint64(len(s.held)) || !s.held[id].held {
		return heldAlloc{}, false
	}
	return s.held[id], true
}

// Flush has nothing deferred to hand over.
func (s *CountingStorage) Flush() {}

// StorageCounts is a reading of a CountingStorage.
type StorageCounts struct {
	Allocs        uint64 // device allocations made
	Deallocs      uint64 // device allocations released
	Live          uint64 // allocations held now
	BytesHeld     uint64 // bytes held now
	PeakBytesHeld uint64 // the most bytes held at once
	// VirtualRanges counts address ranges made for sparse residency (no
	// memory behind them), BindCalls the submissions binding or unbinding
	// memory in them (vkQueueBindSparse), Binds and Unbinds the ranges
	// bound and unbound, one VkSparseMemoryBind each, and BoundBytes and
	// UnboundBytes the memory they bound and unbound.
	VirtualRanges, BindCalls, Binds, Unbinds uint64
	BoundBytes, UnboundBytes                 uint64
}

// Counts reads the counters.
func (s *CountingStorage) Counts() StorageCounts {
	s.mu.Lock()
	defer s.mu.Unlock()
	return StorageCounts{Allocs: s.allocs, Deallocs: s.deallocs, Live: s.allocs - s.deallocs,
		BytesHeld: s.bytesHeld, PeakBytesHeld: s.peakHeld, VirtualRanges: s.sparse.ranges,
		BindCalls: s.sparse.calls, Binds: s.sparse.binds, Unbinds: s.sparse.unbinds,
		BoundBytes: s.sparse.boundBytes, UnboundBytes: s.sparse.unboundBytes}
}
