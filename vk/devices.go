//go:build cgo

package vk

import (
	"fmt"

	vulkan "github.com/vulkan-go/vulkan"
)

// Devices lists every physical device the Vulkan loader finds. No loader or
// no driver is an error matching ErrNoVulkan.
func Devices() ([]DeviceInfo, error) {
	inst, err := acquireInstance(false)
	if err != nil {
		return nil, err
	}
	defer releaseInstance(inst)
	physical, err := inst.physicalDevices()
	if err != nil {
		return nil, err
	}
	if len(physical) == 0 {
		return nil, fmt.Errorf("%w: the loader found no Vulkan device (Debian: mesa-vulkan-drivers runs one on the CPU)", ErrNoVulkan)
	}
	infos := make([]DeviceInfo, len(physical))
	for i, pd := range physical {
		withoutGC(func() { infos[i] = describe(inst, pd, i) })
	}
	return infos, nil
}

func versionString(v uint32) string {
	return fmt.Sprintf("%d.%d.%d", v>>22, (v>>12)&0x3ff, v&0xfff)
}

var vendorNames = map[uint32]string{
	0x1002: "AMD", 0x1010: "ImgTec", 0x10de: "NVIDIA", 0x13b5: "ARM", 0x5143: "Qualcomm",
	0x8086: "Intel", 0x10005: "Mesa",
}

func driverVersionString(vendor, v uint32) string {
	if vendor == 0x10de { // NVIDIA packs 10.8.8.6 bits
		return fmt.Sprintf("%d.%d.%d", v>>22, (v>>14)&0xff, (v>>6)&0xff)
	}
	return versionString(v)
}

var deviceTypes = map[vulkan.PhysicalDeviceType]string{
	vulkan.PhysicalDeviceTypeDiscreteGpu:   "discrete-gpu",
	vulkan.PhysicalDeviceTypeIntegratedGpu: "integrated-gpu",
	vulkan.PhysicalDeviceTypeVirtualGpu:    "virtual-gpu",
	vulkan.PhysicalDeviceTypeCpu:           "cpu",
}

func describe(inst *instance, pd vulkan.PhysicalDevice, index int) DeviceInfo {
	var props vulkan.PhysicalDeviceProperties
	vulkan.GetPhysicalDeviceProperties(pd, &props)
	props.Deref()
	props.Limits.Deref()
	l := props.Limits
	info := DeviceInfo{
		Index:         index,
		Name:          cString(props.DeviceName[:]),
		Type:          deviceTypes[props.DeviceType],
		VendorID:      props.VendorID,
		Vendor:        vendorNames[props.VendorID],
		DeviceID:      props.DeviceID,
		APIVersion:    versionString(props.ApiVersion),
		DriverVersion: driverVersionString(props.VendorID, props.DriverVersion),
		Limits: DeviceLimits{
			MinStorageBufferOffsetAlignment: uint64(l.MinStorageBufferOffsetAlignment),
			MaxStorageBufferRange:           uint64(l.MaxStorageBufferRange),
			MaxMemoryAllocationCount:        l.MaxMemoryAllocationCount,
			MaxPushConstantsSize:            l.MaxPushConstantsSize,
			MaxComputeWorkGroupCount:        l.MaxComputeWorkGroupCount,
			MaxComputeWorkGroupSize:         l.MaxComputeWorkGroupSize,
			MaxComputeWorkGroupInvocations:  l.MaxComputeWorkGroupInvocations,
			MaxComputeSharedMemorySize:      l.MaxComputeSharedMemorySize,
			MaxPerStageStorageBuffers:       l.MaxPerStageDescriptorStorageBuffers,
			NonCoherentAtomSize:             uint64(l.NonCoherentAtomSize),
			TimestampPeriodNs:               l.TimestampPeriod,
			SparseAddressSpaceSize:          uint64(l.SparseAddressSpaceSize),
		},
	}
	props.Free()
	if info.Type == "" {
		info.Type = "other"
	}
	if info.Vendor == "" {
		info.Vendor = fmt.Sprintf("0x%x", info.VendorID)
	}
	if props.ApiVersion >= vulkan.MakeVersion(1, 1, 0) && inst.version >= vulkan.MakeVersion(1, 1, 0) {
		info.Limits.MaxMemoryAllocationSize = queryMaxAllocation(inst, pd)
	}
	if props.ApiVersion >= vulkan.MakeVersion(1, 2, 0) && inst.version >= vulkan.MakeVersion(1, 2, 0) {
		if name, drv, ok := queryDriver(inst, pd); ok {
			info.DriverName, info.DriverInfo = name, drv
		}
	}

	var features vulkan.PhysicalDeviceFeatures
	vulkan.GetPhysicalDeviceFeatures(pd, &features)
	features.Deref()
	info.RobustBufferAccess = features.RobustBufferAccess == vulkan.True
	info.SparseResidency = features.SparseBinding == vulkan.True && features.SparseResidencyBuffer == vulkan.True
	features.Free()

	var mem vulkan.PhysicalDeviceMemoryProperties
	vulkan.GetPhysicalDeviceMemoryProperties(pd, &mem)
	mem.Deref()
	for i := range int(mem.MemoryHeapCount) {
		h := mem.MemoryHeaps[i]
		h.Deref()
		info.Heaps = append(info.Heaps, HeapInfo{
			Index:       i,
			Size:        uint64(h.Size),
			DeviceLocal: vulkan.MemoryHeapFlagBits(h.Flags)&vulkan.MemoryHeapDeviceLocalBit != 0,
		})
	}
	for i := range int(mem.MemoryTypeCount) {
		t := mem.MemoryTypes[i]
		t.Deref()
		f := vulkan.MemoryPropertyFlagBits(t.PropertyFlags)
		info.MemoryTypes = append(info.MemoryTypes, MemoryType{
			Index:        i,
			Heap:         int(t.HeapIndex),
			DeviceLocal:  f&vulkan.MemoryPropertyDeviceLocalBit != 0,
			HostVisible:  f&vulkan.MemoryPropertyHostVisibleBit != 0,
			HostCoherent: f&vulkan.MemoryPropertyHostCoherentBit != 0,
			HostCached:   f&vulkan.MemoryPropertyHostCachedBit != 0,
		})
	}
	mem.Free()

	if inst.version >= vulkan.MakeVersion(1, 1, 0) && hasDeviceExtension(inst.handle, pd, "VK_EXT_memory_budget") {
		if b, ok := queryBudget(inst, pd); ok {
			info.MemoryBudget = true
			for i := range info.Heaps {
				if i < len(b.Budget) {
					info.Heaps[i].Budget, info.Heaps[i].Usage = b.Budget[i], b.Usage[i]
				}
			}
		}
	}
	return info
}
