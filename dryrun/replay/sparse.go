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
	if size == 0 {
		return vkruntime.StorageHandle{}, fmt.Errorf("replay: a virtual range needs at least one byte: %w", vkruntime.ErrZeroSize)
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

// Bind counts one submission and its binds and unbinds. What a device
// refuses is an error here too, and counts nothing: a bind into no live
// range or a storage without sparse residency, one not in whole granules,
// past its range (runtime.ErrOutOfRange), naming memory the storage does
// not hold (runtime.ErrNotFound) or past it (ErrOutOfRange), and a
// submission naming a granule twice.
func (s *CountingStorage) Bind(virtual vkruntime.StorageID, binds []vkruntime.SparseBind) error {
	s.mu.Lock()
	defer s.mu.Unlock()
	g := s.Granule
	if g == 0 {
		return fmt.Errorf("replay: this storage models a device without sparse residency")
	}
	size, ok := s.virtual[virtual]
	if !ok {
		return fmt.Errorf("replay: sparse bind into storage %d, which is no live virtual range: %w", virtual, vkruntime.ErrNotFound)
	}
	// A range's last granule is bound whole, as a device binds it (its
	// size is at most the address space, so this does not wrap).
	size = (size + g - 1) / g * g
	if err := vkruntime.CheckOverlappingBinds(binds); err != nil {
		return fmt.Errorf("replay: %w", err)
	}
	var bound, boundBytes, unboundBytes uint64
	for i, b := range binds {
		if b.Offset%g != 0 || b.Size%g != 0 || b.MemoryOffset%g != 0 || b.Size == 0 {
			return fmt.Errorf("replay: sparse bind %d (%+v): offsets and sizes must be non-zero multiples of the %d B granule: %w", i, b, g, vkruntime.ErrInvalidArgument)
		}
		if b.Offset > size || b.Size > size-b.Offset {
			return fmt.Errorf("replay: sparse bind %d (%+v) lies outside the %d B virtual range: %w", i, b, size, vkruntime.ErrOutOfRange)
		}
		if b.Memory == 0 {
			unboundBytes += b.Size
			continue
		}
		bound++
		boundBytes += b.Size
		a, ok := s.allocation(b.Memory)
		if !ok {
			return fmt.Errorf("replay: sparse bind %d (%+v): allocation %d is not held: %w", i, b, b.Memory, vkruntime.ErrNotFound)
		}
		if b.MemoryOffset > a.size || b.Size > a.size-b.MemoryOffset {
			return fmt.Errorf("replay: sparse bind %d (%+v): allocation %d holds %d B: %w", i, b, b.Memory, a.size, vkruntime.ErrOutOfRange)
		}
	}
	s.sparse.calls++
	s.sparse.binds += bound
	s.sparse.unbinds += uint64(len(binds)) - bound
	s.sparse.boundBytes += boundBytes
	s.sparse.unboundBytes += unboundBytes
	return nil
}
