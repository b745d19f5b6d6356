package runtime

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
	// ranges leave, it fails with an error matching ErrOutOfDeviceMemory
	// and changes nothing.
	ReserveVirtual(size uint64) (StorageHandle, error)
	// ReleaseVirtual releases a range made by ReserveVirtual.
	ReleaseVirtual(id StorageID)
	// Bind binds, and with Memory 0 unbinds, granules of a virtual range,
	// all in one submission to the device.
	Bind(virtual StorageID, binds []SparseBind) error
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
