package replay

import (
	"fmt"

	vkruntime "github.com/vkrt/vkrt/runtime"
)

// sparseCounts are a CountingStorage's counters of sparse residency.
type sparseCounts struct {
	ranges, calls, binds, unbinds uint64
	boundBytes, unboundBytes      uint64
}

// H200Granule is the sparse binding granularity replays assume: the
// memory alignment the H200's Vulkan driver (580) reports for a buffer
// with sparse residency, measured on the device. PyTorch's expandable
// segments map 2 MiB granules on the same GPU, CUDA's granularity.
const H200Granule = 64 << 10

// reportedVirtualSize is the H200's sparseAddressSpaceSize. Of it the
// ranges take what vk lets them take there (runtime.RangesSpace, for the
// storage's Limit as the heap), so a replay refuses a range where the
// device does.
const reportedVirtualSize = 1 << 40

// maxVirtualSize is what the ranges may take; caller holds s.mu or owns s.
func (s *CountingStorage) maxVirtualSize() uint64 {
	return vkruntime.RangesSpace(reportedVirtualSize, s.Limit) &^ (H200Granule - 1)
}

var _ vkruntime.SparseStorage = (*CountingStorage)(nil)

// SparseGranule is the storage's Granule.
func (s *CountingStorage) SparseGranule() uint64 { return s.Granule }

// MaxVirtualSize is what vk lets the ranges take of the H200's sparse
// address space: 441 GB with the H200's heap.
func (s *CountingStorage) MaxVirtualSize() uint64 { return s.maxVirtualSize() }

// VirtualSpaceLeft is what the live ranges leave of the address space
// (runtime.VirtualSpaceReporter).
func (s *CountingStorage) VirtualSpaceLeft() uint64 {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.maxVirtualSize() - s.virtualBytes
}

// ReserveVirtual counts an address range; it holds no memory.
func (s *CountingStorage) ReserveVirtual(size uint64) (vkruntime.StorageHandle, error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.Granule == 0 {
		return vkruntime.StorageHandle{}, fmt.Errorf("replay: this storage models a device without sparse residency")
	}
	// The ranges share the address space, as a device's do.
	if space := s.maxVirtualSize(); size > space-s.virtualBytes {
		return vkruntime.StorageHandle{}, &vkruntime.OutOfMemoryError{Size: size, Limit: space,
			Detail: fmt.Sprintf("the device's sparse address space has %d B left of the %d B its ranges may take", space-s.virtualBytes, space)}
	}
	s.next++
	s.sparse.ranges++
	if s.virtual == nil {
		s.virtual = map[vkruntime.StorageID]uint64{}
	}
	s.virtual[s.next] = size
	s.virtualBytes += size
	return vkruntime.StorageHandle{ID: s.next, Size: size}, nil
}

// ReleaseVirtual gives the range's address space back.
func (s *CountingStorage) ReleaseVirtual(id vkruntime.StorageID) {
	s.mu.Lock()
	defer s.mu.Unlock()
	s.virtualBytes -= s.virtual[id]
	delete(s.virtual, id)
}

// Bind counts one submission and its binds and unbinds. A bind that names
// memory the storage does not hold is an error, as it would be a device's,
// and so is a submission naming a granule twice.
func (s *CountingStorage) Bind(_ vkruntime.StorageID, binds []vkruntime.SparseBind) error {
	s.mu.Lock()
	defer s.mu.Unlock()
	if err := vkruntime.CheckOverlappingBinds(binds); err != nil {
		return fmt.Errorf("replay: %w", err)
	}
	var bound, boundBytes, unboundBytes uint64
	for _, b := range binds {
		if b.Memory == 0 {
			unboundBytes += b.Size
			continue
		}
		bound++
		boundBytes += b.Size
		if a, ok := s.allocation(b.Memory); !ok || b.MemoryOffset > a.size || b.Size > a.size-b.MemoryOffset {
			return fmt.Errorf("replay: bind of %d B at %d of allocation %d, which is not held or too small", b.Size, b.MemoryOffset, b.Memory)
		}
	}
	s.sparse.calls++
	s.sparse.binds += bound
	s.sparse.unbinds += uint64(len(binds)) - bound
	s.sparse.boundBytes += boundBytes
	s.sparse.unboundBytes += unboundBytes
	return nil
}
