package runtime

import (
	"cmp"
	"fmt"
	"slices"
)

// SparseStorage is a storage that can also back a range of address space
// with device memory granule by granule: Vulkan's sparse binding and
// residency (a buffer made with VK_BUFFER_CREATE_SPARSE_BINDING_BIT and
// SPARSE_RESIDENCY_BIT, memory bound with vkQueueBindSparse). memory's
// Virtual layout probes for it and falls back to the SubSlices pools where
// a storage lacks it or answers a granule of 0 (a device without sparse
// residency).
type SparseStorage interface {
	Storage
	// SparseGranule is the binding granularity in bytes, a power of two;
	// 0 means the device offers no sparse residency.
	SparseGranule() uint64
	// MaxVirtualSize is the device's sparse address space: the largest
	// range ReserveVirtual makes, and what all its live ranges share.
	MaxVirtualSize() uint64
	// ReserveVirtual makes size bytes of address space with no memory
	// bound: one buffer a slice (ID, Offset, Size) of which binds to a
	// kernel like a slice of a page. Past the address space the live
	// ranges leave, it fails with an error matching ErrOutOfDeviceMemory,
	// and for size 0 with one matching ErrZeroSize; on a device without
	// sparse residency (a granule of 0) it fails with one matching
	// ErrUnsupported. None of these changes anything.
	ReserveVirtual(size uint64) (StorageHandle, error)
	// ReleaseVirtual releases a range made by ReserveVirtual. Its address
	// space is free again by the next Flush at the latest: like a
	// deallocated page, a range that work in flight still uses may be
	// kept until then.
	ReleaseVirtual(id StorageID)
	// Bind binds, and with Memory 0 unbinds, granules of a virtual range,
	// all in one submission to the device. A submission names each granule
	// at most once: Vulkan leaves the order of its binds open.
	Bind(virtual StorageID, binds []SparseBind) error
}

// VirtualSpaceReporter is a SparseStorage that says how much of its
// sparse address space the live ranges leave. memory's virtual pools size
// their first range by it, so that the streams that come later find room;
// a storage without it is taken to have all of it left.
type VirtualSpaceReporter interface {
	VirtualSpaceLeft() uint64
}

// SparseBind is one range of a Bind: Size bytes at Offset of the virtual
// range backed by the device allocation Memory from MemoryOffset on (Memory
// 0: unbound). Offsets and sizes are multiples of the granule.
type SparseBind struct {
	Offset       uint64
	Size         uint64
	Memory       StorageID
	MemoryOffset uint64
}

// OverlappingBindsError is ErrOverlappingBinds with the binds: the
// submission's binds First and Second (First < Second), A and B, name the
// same bytes of the range.
type OverlappingBindsError struct {
	First, Second int
	A, B          SparseBind
}

func (e *OverlappingBindsError) Error() string {
	return fmt.Sprintf("vkrt: sparse binds %d (%+v) and %d (%+v) name the same bytes in one submission, whose order a device may take either way",
		e.First, e.A, e.Second, e.B)
}

// Is makes an *OverlappingBindsError match ErrOverlappingBinds.
func (e *OverlappingBindsError) Is(target error) bool { return target == ErrOverlappingBinds }

// CheckOverlappingBinds is an *OverlappingBindsError naming the first two
// binds overlappingBinds finds, nil where there are none: what a
// SparseStorage returns for such a submission, before it binds anything.
func CheckOverlappingBinds(binds []SparseBind) error {
	if i, j, ok := overlappingBinds(binds); ok {
		return &OverlappingBindsError{First: i, Second: j, A: binds[i], B: binds[j]}
	}
	return nil
}

// overlappingBinds finds two binds of one submission that name the same
// bytes of the range, which a device may apply in either order: i < j,
// ok false where there are none. A bind of 0 B names no bytes. A long
// submission is checked through a sorted copy of its offsets, so it costs
// n log n.
func overlappingBinds(binds []SparseBind) (i, j int, ok bool) {
	if len(binds) <= 16 {
		for j := 1; j < len(binds); j++ {
			if binds[j].Size == 0 {
				continue
			}
			for i := range j {
				if overlap(&binds[i], &binds[j]) {
					return i, j, true
				}
			}
		}
		return 0, 0, false
	}
	order := make([]int, 0, len(binds))
	for k := range binds {
		if binds[k].Size != 0 {
			order = append(order, k)
		}
	}
	slices.SortFunc(order, func(a, b int) int { return cmp.Compare(binds[a].Offset, binds[b].Offset) })
	for k := 1; k < len(order); k++ {
		if overlap(&binds[order[k-1]], &binds[order[k]]) {
			return min(order[k-1], order[k]), max(order[k-1], order[k]), true
		}
	}
	return 0, 0, false
}

// overlap says whether two binds share a byte, counted without wrapping:
// a bind whose end lies past 2^64 (which no range holds, but a storage may
// check overlaps first) covers every byte from its offset on, where its
// wrapped end read as one below its start and hid the overlap.
func overlap(a, b *SparseBind) bool {
	if a.Size == 0 || b.Size == 0 {
		return false
	}
	if a.Offset <= b.Offset {
		return b.Offset-a.Offset < a.Size
	}
	return a.Offset-b.Offset < b.Size
}

// The H200's driver (580.159) reports a sparse address space of 1.10 TB
// (1 TiB) and maps every device allocation into the same space at three
// times its bytes: with 2 MiB, 20 MiB, 100 MiB or 256 MiB allocations held
// (63–134 GB in all) it refused a further 64 MiB sparse buffer once the
// ranges plus three times the allocated bytes passed 957 GB, to within
// 0.1 GB each time, and with none it refused past 942–956 GB. After such a
// refusal its next vkAllocateMemory crashed (SIGSEGV): at the 51st stream's
// virtual pool when the ranges could take the whole space, at the 4,177th
// with ranges of what the streams need. So the ranges take at most
// RangesSpace: three fourths of the reported space, and no more than
// leaves room, within thirteen sixteenths of it, for the whole heap counted
// three times. Past it a storage refuses a range, as an error the pools
// handle (vk does, and so does the replay's model of the H200), and the
// heap can fill whatever the ranges took: on the H200 the ranges take
// 441 GB, and with the heap full the driver's count stays at 893 GB of
// its 957.
const (
	rangesShareNum, rangesShareDen     = 3, 4
	addressUsableNum, addressUsableDen = 13, 16
	allocationAddressFactor            = 3
)

// RangesSpace is the sparse address space the virtual ranges may take of
// the reported space on a device with a heap of heap bytes; at least an
// eighth of the reported space, where the heap is too large for the rule.
func RangesSpace(reported, heap uint64) uint64 {
	space := reported / rangesShareDen * rangesShareNum
	usable := reported / addressUsableDen * addressUsableNum
	if heap <= usable/allocationAddressFactor {
		space = min(space, usable-allocationAddressFactor*heap)
	} else {
		space = 0
	}
	return max(space, reported/8)
}
