package vk

import (
	"fmt"

	json "github.com/goccy/go-json"

	"github.com/vkrt/vkrt/device"
	vkruntime "github.com/vkrt/vkrt/runtime"
)

// DeviceInfo describes one physical device as the driver reports it.
type DeviceInfo struct {
	Index         int          `json:"index"`
	Name          string       `json:"name"`
	Type          string       `json:"type"` // discrete-gpu, integrated-gpu, virtual-gpu, cpu, other
	VendorID      uint32       `json:"vendor_id"`
	Vendor        string       `json:"vendor"`
	DeviceID      uint32       `json:"device_id"`
	APIVersion    string       `json:"api_version"`
	DriverVersion string       `json:"driver_version"`
	DriverName    string       `json:"driver_name,omitempty"` // Vulkan 1.2 drivers only
	DriverInfo    string       `json:"driver_info,omitempty"`
	Heaps         []HeapInfo   `json:"heaps"`
	MemoryTypes   []MemoryType `json:"memory_types"`
	// MemoryBudget: the device has VK_EXT_memory_budget, so heaps carry a
	// budget and a usage.
	MemoryBudget       bool `json:"memory_budget"`
	RobustBufferAccess bool `json:"robust_buffer_access"`
	// SparseResidency: the device binds memory to buffers granule by
	// granule (sparseBinding and sparseResidencyBuffer), which the Virtual
	// layout's pool needs.
	SparseResidency bool         `json:"sparse_residency"`
	Limits          DeviceLimits `json:"limits"`
}

// MarshalJSON writes each heap's budget and usage exactly where the device
// has VK_EXT_memory_budget, 0 B too: a process that has allocated nothing
// uses 0 B of each heap, and its usage was left out as if the device had
// no budget to report.
func (d DeviceInfo) MarshalJSON() ([]byte, error) {
	type plain DeviceInfo // no methods: marshalling it does not recurse
	p := plain(d)
	if d.MemoryBudget && d.Heaps != nil {
		p.Heaps = make([]HeapInfo, len(d.Heaps))
		for i, h := range d.Heaps {
			h.budgeted = true
			p.Heaps[i] = h
		}
	}
	return json.Marshal(p)
}

// HeapInfo is one memory heap. Budget and Usage are VK_EXT_memory_budget's
// figures for this process, 0 where the device lacks the extension.
type HeapInfo struct {
	Index       int    `json:"index"`
	Size        uint64 `json:"size"`
	DeviceLocal bool   `json:"device_local"`
	Budget      uint64 `json:"budget,omitempty"`
	Usage       uint64 `json:"usage,omitempty"`
	// budgeted: marshalled as a heap of a device with the extension, so
	// Budget and Usage are written when 0 too.
	budgeted bool
}

// MarshalJSON writes Budget and Usage where they are not 0, or always
// where the heap is one of a device with VK_EXT_memory_budget (see
// DeviceInfo.MarshalJSON).
func (h HeapInfo) MarshalJSON() ([]byte, error) {
	out := struct {
		Index       int     `json:"index"`
		Size        uint64  `json:"size"`
		DeviceLocal bool    `json:"device_local"`
		Budget      *uint64 `json:"budget,omitempty"`
		Usage       *uint64 `json:"usage,omitempty"`
	}{Index: h.Index, Size: h.Size, DeviceLocal: h.DeviceLocal}
	if h.budgeted || h.Budget != 0 {
		out.Budget = &h.Budget
	}
	if h.budgeted || h.Usage != 0 {
		out.Usage = &h.Usage
	}
	return json.Marshal(out)
}

// MemoryType is one memory type: the heap it draws from and its properties.
type MemoryType struct {
	Index        int  `json:"index"`
	Heap         int  `json:"heap"`
	DeviceLocal  bool `json:"device_local"`
	HostVisible  bool `json:"host_visible"`
	HostCoherent bool `json:"host_coherent"`
	HostCached   bool `json:"host_cached"`
}

// DeviceLimits are the device limits that bound storage and dispatches, as
// the driver reports them (Device.Limits is the part a dispatch is checked
// against).
type DeviceLimits struct {
	MinStorageBufferOffsetAlignment uint64    `json:"min_storage_buffer_offset_alignment"`
	MaxStorageBufferRange           uint64    `json:"max_storage_buffer_range"`
	MaxMemoryAllocationCount        uint32    `json:"max_memory_allocation_count"`
	MaxPushConstantsSize            uint32    `json:"max_push_constants_size"`
	MaxComputeWorkGroupCount        [3]uint32 `json:"max_compute_work_group_count"`
	MaxComputeWorkGroupSize         [3]uint32 `json:"max_compute_work_group_size"`
	MaxComputeWorkGroupInvocations  uint32    `json:"max_compute_work_group_invocations"`
	MaxComputeSharedMemorySize      uint32    `json:"max_compute_shared_memory_size"`
	MaxPerStageStorageBuffers       uint32    `json:"max_per_stage_storage_buffers"`
	NonCoherentAtomSize             uint64    `json:"non_coherent_atom_size"`
	TimestampPeriodNs               float32   `json:"timestamp_period_ns"`
	SparseAddressSpaceSize          uint64    `json:"sparse_address_space_size"`
	// MaxMemoryAllocationSize is the largest single allocation the device
	// makes (Vulkan 1.1's maxMemoryAllocationSize), 0 where the driver does
	// not say.
	MaxMemoryAllocationSize uint64 `json:"max_memory_allocation_size,omitempty"`
}

// unavailableError is an error that says the backend cannot run here: it
// matches device.ErrUnavailable, which tests skip on.
type unavailableError struct{ msg string }

func (e *unavailableError) Error() string { return e.msg }

// Is makes the error match device.ErrUnavailable.
func (e *unavailableError) Is(target error) bool { return target == device.ErrUnavailable }

// ErrNoVulkan: the machine has no Vulkan loader or no Vulkan driver. It
// matches device.ErrUnavailable.
var ErrNoVulkan error = &unavailableError{"vk: Vulkan is not available"}

// ErrNoCgo: the program was built without cgo, which the Vulkan backend
// needs. It matches device.ErrUnavailable.
var ErrNoCgo error = &unavailableError{"vkrt was built without cgo; the Vulkan backend needs CGO_ENABLED=1"}

// ValidationError: the Khronos validation layer reported errors. Count is how
// many; Messages holds the first few. It matches device.ErrValidation.
type ValidationError struct {
	Count    int
	Messages string
}

func (e *ValidationError) Error() string {
	return fmt.Sprintf("vk: %d Vulkan validation error(s):\n%s", e.Count, e.Messages)
}

// Is makes a *ValidationError match device.ErrValidation.
func (e *ValidationError) Is(target error) bool { return target == device.ErrValidation }

// ErrClosed: the device was used after Close. It is runtime.ErrClosed, the
// contract's class every backend's closed device answers with, so
// errors.Is matches either name.
var ErrClosed = vkruntime.ErrClosed
