package runtime

import (
	"fmt"
	"math/bits"
	"sync/atomic"
)

// StorageID names one device allocation of a [Storage].
type StorageID uint64

// lastStorageID is the last id NewStorageID handed out.
var lastStorageID atomic.Uint64

// NewStorageID is an id no other call of the process gets, never 0. The
// shipped storages (vk's, device/cpu's) take their ids from it, so a
// handle used on another device, of another backend too, names nothing
// there (ErrNotFound) rather than one of its allocations.
func NewStorageID() StorageID { return StorageID(lastStorageID.Add(1)) }

// StorageHandle is a byte range of one device allocation.
type StorageHandle struct {
	ID     StorageID
	Offset uint64
	Size   uint64
}

// End is the offset one past the handle's last byte.
func (h StorageHandle) End() uint64 { return h.Offset + h.Size }

// String writes the range as [Offset, End); a range whose end lies past
// 2^64 says so, where End wraps to a number below its start.
func (h StorageHandle) String() string {
	if end, carry := bits.Add64(h.Offset, h.Size, 0); carry == 0 {
		return fmt.Sprintf("storage %d [%d, %d)", h.ID, h.Offset, end)
	}
	return fmt.Sprintf("storage %d [%d, +%d B, past 2^64)", h.ID, h.Offset, h.Size)
}

// Storage is what a device offers the pools: whole device allocations.
//
// Implementations need not be safe for concurrent use; a memory manager
// serialises its calls.
type Storage interface {
	// Alloc makes one device allocation of size bytes; the handle's Offset is 0.
	// Alloc(0) makes nothing and fails with an error matching ErrZeroSize.
	Alloc(size uint64) (StorageHandle, error)
	// Dealloc releases an allocation. It may be deferred until Flush.
	Dealloc(id StorageID)
	// Flush hands deferred deallocations to the driver.
	Flush()
}

// DeviceProperties are the facts about a device the pools size themselves by.
type DeviceProperties struct {
	// Alignment: every slice offset and size is a multiple of this.
	Alignment uint64
	// MaxPageSize sizes the presets' pages. It is no allocation limit of
	// its own: a Storage that has one says so (AllocationLimiter), and the
	// shipped devices' (cpu, vk) is this size.
	MaxPageSize uint64
	// MemorySize is the size in bytes of the heap the pools allocate from.
	MemorySize uint64
}

// Validate reports whether the properties can drive a pool manager.
func (p DeviceProperties) Validate() error {
	switch {
	case p.Alignment == 0 || p.Alignment&(p.Alignment-1) != 0:
		return fmt.Errorf("vkrt: device alignment %d is not a power of two", p.Alignment)
	case p.MaxPageSize == 0:
		return fmt.Errorf("vkrt: device max page size is 0")
	case p.MaxPageSize%p.Alignment != 0:
		return fmt.Errorf("vkrt: device max page size %d is not a multiple of the alignment %d", p.MaxPageSize, p.Alignment)
	}
	return nil
}

// AllocationLimiter is implemented by a Storage that cannot make one device
// allocation past some size (a device binds at most so many bytes as one
// buffer). The pools refuse a layout whose pages exceed it as InvalidLayout,
// and reservations past it as ErrBufferTooBig.
type AllocationLimiter interface {
	MaxAllocationSize() uint64
}
