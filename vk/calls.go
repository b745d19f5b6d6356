//go:build cgo

package vk

/*
#include <stdlib.h>
#include "vkrt_calls.h"
*/
import "C"

import (
	"fmt"
	"unsafe"

	vulkan "github.com/vulkan-go/vulkan"
)

// Every Vulkan call that hands the driver a structure goes through
// vkrt_calls.c, which builds it on the C stack for the length of the call.
// vulkan-go copies a slice of structures into C memory and frees it from a
// finalizer set on a variable that is garbage as soon as the copy is made:
// a collection during the call frees the copy under the driver (a SIGSEGV
// in vkCreateComputePipelines, about 1 run in 40 of the vk tests, and
// stopping the collector with debug.SetGCPercent(-1) does not close it: a
// cycle that passed its trigger check before the call still runs). Its
// single-structure copies are never freed at all. The calls below take
// only handles, numbers and Go memory that holds no Go pointer.

// deviceCalls holds a VkDevice's entry points, found once.
type deviceCalls struct{ c *C.vkrt_device }

func newDeviceCalls(inst vulkan.Instance, dev vulkan.Device) (deviceCalls, error) {
	var missing *C.char
	c := C.vkrt_device_new(unsafe.Pointer(inst), unsafe.Pointer(dev), &missing)
	if c == nil {
		return deviceCalls{}, fmt.Errorf("vk: the device has no %s", C.GoString(missing))
	}
	return deviceCalls{c: c}, nil
}

func (dc *deviceCalls) free() {
	if dc.c != nil {
		C.vkrt_device_free(dc.c)
		dc.c = nil
	}
}

// bits is a handle as the 64-bit value a structure mirrored in vkrt_vk.h
// holds.
func bits(h unsafe.Pointer) C.vkrt_vk_handle { return C.vkrt_vk_handle(uintptr(h)) }

func (dc deviceCalls) createBuffer(size uint64, usage, flags uint32) (vulkan.Buffer, vulkan.Result) {
	var out unsafe.Pointer
	r := C.vkrt_create_buffer(dc.c, C.uint64_t(size), C.uint32_t(usage), C.uint32_t(flags), &out)
	return vulkan.Buffer(out), vulkan.Result(r)
}

// requirements is what a buffer needs of its memory.
type requirements struct {
	size, alignment uint64
	memoryTypeBits  uint32
}

func (dc deviceCalls) bufferRequirements(buf vulkan.Buffer) requirements {
	var req C.vkrt_vk_memory_requirements
	C.vkrt_buffer_requirements(dc.c, unsafe.Pointer(buf), &req)
	return requirements{size: uint64(req.size), alignment: uint64(req.alignment), memoryTypeBits: uint32(req.memoryTypeBits)}
}

func (dc deviceCalls) allocateMemory(size uint64, memoryType uint32) (vulkan.DeviceMemory, vulkan.Result) {
	var out unsafe.Pointer
	r := C.vkrt_allocate_memory(dc.c, C.uint64_t(size), C.uint32_t(memoryType), &out)
	return vulkan.DeviceMemory(out), vulkan.Result(r)
}

func (dc deviceCalls) createCommandPool(family uint32) (vulkan.CommandPool, vulkan.Result) {
	var out unsafe.Pointer
	r := C.vkrt_create_command_pool(dc.c, C.uint32_t(family), &out)
	return vulkan.CommandPool(out), vulkan.Result(r)
}

func (dc deviceCalls) allocateCommandBuffer(pool vulkan.CommandPool) (vulkan.CommandBuffer, vulkan.Result) {
	var out unsafe.Pointer
	r := C.vkrt_allocate_command_buffer(dc.c, unsafe.Pointer(pool), &out)
	return vulkan.CommandBuffer(out), vulkan.Result(r)
}

func (dc deviceCalls) createFence() (vulkan.Fence, vulkan.Result) {
	var out unsafe.Pointer
	r := C.vkrt_create_fence(dc.c, &out)
	return vulkan.Fence(out), vulkan.Result(r)
}

func (dc deviceCalls) createDescriptorPool(maxSets, storageBuffers uint32) (vulkan.DescriptorPool, vulkan.Result) {
	var out unsafe.Pointer
	r := C.vkrt_create_descriptor_pool(dc.c, C.uint32_t(maxSets), C.uint32_t(storageBuffers), &out)
	return vulkan.DescriptorPool(out), vulkan.Result(r)
}

func (dc deviceCalls) begin(cmd vulkan.CommandBuffer) vulkan.Result {
	return vulkan.Result(C.vkrt_begin(dc.c, unsafe.Pointer(cmd)))
}

func (dc deviceCalls) submit(queue vulkan.Queue, cmd vulkan.CommandBuffer, fence vulkan.Fence) vulkan.Result {
	return vulkan.Result(C.vkrt_submit(dc.c, unsafe.Pointer(queue), unsafe.Pointer(cmd), unsafe.Pointer(fence)))
}

// barrier orders everything recorded before it (compute and transfers)
// before everything recorded after it.
func (dc deviceCalls) barrier(cmd vulkan.CommandBuffer) {
	stages := vulkan.PipelineStageComputeShaderBit | vulkan.PipelineStageTransferBit
	src := vulkan.AccessShaderWriteBit | vulkan.AccessTransferWriteBit
	dst := vulkan.AccessShaderReadBit | vulkan.AccessShaderWriteBit | vulkan.AccessTransferReadBit | vulkan.AccessTransferWriteBit
	C.vkrt_cmd_barrier(dc.c, unsafe.Pointer(cmd), C.uint32_t(stages), C.uint32_t(src), C.uint32_t(dst))
}

func (dc deviceCalls) copyBuffer(cmd vulkan.CommandBuffer, src, dst vulkan.Buffer, srcOffset, dstOffset, size uint64) {
	C.vkrt_cmd_copy(dc.c, unsafe.Pointer(cmd), unsafe.Pointer(src), unsafe.Pointer(dst), C.uint64_t(srcOffset), C.uint64_t(dstOffset), C.uint64_t(size))
}

func (dc deviceCalls) allocateSet(pool vulkan.DescriptorPool, layout vulkan.DescriptorSetLayout) (vulkan.DescriptorSet, vulkan.Result) {
	var out unsafe.Pointer
	r := C.vkrt_allocate_set(dc.c, unsafe.Pointer(pool), unsafe.Pointer(layout), &out)
	return vulkan.DescriptorSet(out), vulkan.Result(r)
}

// bufferRange is a storage-buffer descriptor: a buffer and a range of it.
type bufferRange = C.vkrt_vk_descriptor_buffer_info

func newBufferRange(buf vulkan.Buffer, offset, size uint64) bufferRange {
	return bufferRange{buffer: bits(unsafe.Pointer(buf)), offset: C.uint64_t(offset), _range: C.uint64_t(size)}
}

// writeStorageBuffers points binding i of set at ranges[i].
func (dc deviceCalls) writeStorageBuffers(set vulkan.DescriptorSet, ranges []bufferRange) error {
	if len(ranges) == 0 {
		return nil
	}
	if len(ranges) > C.VKRT_MAX_WRITES {
		return fmt.Errorf("vk: %d descriptor writes in one set, at most %d", len(ranges), C.VKRT_MAX_WRITES)
	}
	C.vkrt_write_storage_buffers(dc.c, unsafe.Pointer(set), C.uint32_t(len(ranges)), &ranges[0])
	return nil
}

// sparseBind is one range of a sparse buffer bound to memory (or unbound).
type sparseBind = C.vkrt_vk_sparse_memory_bind

func newSparseBind(resourceOffset, size uint64, memory vulkan.DeviceMemory, memoryOffset uint64) sparseBind {
	return sparseBind{resourceOffset: C.uint64_t(resourceOffset), size: C.uint64_t(size), memory: bits(unsafe.Pointer(memory)), memoryOffset: C.uint64_t(memoryOffset)}
}

func (dc deviceCalls) bindSparse(queue vulkan.Queue, buf vulkan.Buffer, binds []sparseBind, fence vulkan.Fence) vulkan.Result {
	var first *sparseBind
	if len(binds) > 0 {
		first = &binds[0]
	}
	return vulkan.Result(C.vkrt_bind_sparse(dc.c, unsafe.Pointer(queue), unsafe.Pointer(buf), C.uint32_t(len(binds)), first, unsafe.Pointer(fence)))
}

func (dc deviceCalls) createShaderModule(code []uint32) (vulkan.ShaderModule, vulkan.Result) {
	var first *C.uint32_t
	if len(code) > 0 {
		first = (*C.uint32_t)(unsafe.Pointer(&code[0]))
	}
	var out unsafe.Pointer
	r := C.vkrt_create_shader_module(dc.c, first, C.size_t(4*len(code)), &out)
	return vulkan.ShaderModule(out), vulkan.Result(r)
}

func (dc deviceCalls) createStorageSetLayout(bindings int) (vulkan.DescriptorSetLayout, vulkan.Result) {
	var out unsafe.Pointer
	r := C.vkrt_create_storage_set_layout(dc.c, C.uint32_t(bindings), &out)
	return vulkan.DescriptorSetLayout(out), vulkan.Result(r)
}

func (dc deviceCalls) createPipelineLayout(set vulkan.DescriptorSetLayout, pushSize uint32) (vulkan.PipelineLayout, vulkan.Result) {
	var out unsafe.Pointer
	r := C.vkrt_create_pipeline_layout(dc.c, unsafe.Pointer(set), C.uint32_t(pushSize), &out)
	return vulkan.PipelineLayout(out), vulkan.Result(r)
}

func (dc deviceCalls) createComputePipeline(module vulkan.ShaderModule, layout vulkan.PipelineLayout) (vulkan.Pipeline, vulkan.Result) {
	var out unsafe.Pointer
	r := C.vkrt_create_compute_pipeline(dc.c, unsafe.Pointer(module), unsafe.Pointer(layout), &out)
	return vulkan.Pipeline(out), vulkan.Result(r)
}

// queueFamilyFlags lists each queue family's VkQueueFlags.
func queueFamilyFlags(inst vulkan.Instance, pd vulkan.PhysicalDevice) []uint32 {
	n := C.vkrt_queue_families(unsafe.Pointer(inst), unsafe.Pointer(pd), 0, nil)
	if n == 0 {
		return nil
	}
	flags := make([]uint32, n)
	n = C.vkrt_queue_families(unsafe.Pointer(inst), unsafe.Pointer(pd), C.uint32_t(len(flags)), (*C.uint32_t)(unsafe.Pointer(&flags[0])))
	return flags[:min(int(n), len(flags))]
}

func hasDeviceExtension(inst vulkan.Instance, pd vulkan.PhysicalDevice, name string) bool {
	cs := C.CString(name)
	defer C.free(unsafe.Pointer(cs))
	return C.vkrt_has_device_extension(unsafe.Pointer(inst), unsafe.Pointer(pd), cs) != 0
}

func hasInstanceLayer(name string) bool {
	cs := C.CString(name)
	defer C.free(unsafe.Pointer(cs))
	return C.vkrt_has_instance_layer(cs) != 0
}
