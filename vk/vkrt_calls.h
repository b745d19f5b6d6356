// vkrt's own Vulkan calls: every call that hands the driver a structure
// (or an array of them) is built here, in C memory that lives on the C
// stack for the length of the call. vulkan-go would copy such structures
// into C memory that a Go finalizer frees, and a collection during the call
// freed it under the driver (see calls.go).
#ifndef VKRT_CALLS_H
#define VKRT_CALLS_H

#include <stddef.h>
#include <stdint.h>

#include "vkrt_vk.h"

// The device-level entry points of one VkDevice, found once through
// vkGetDeviceProcAddr. NULL when one is missing (the message says which).
typedef struct vkrt_device vkrt_device;
vkrt_device* vkrt_device_new(void* instance, void* device, const char** missing);
void vkrt_device_free(vkrt_device* d);

// Results are VkResult values.
int32_t vkrt_create_buffer(vkrt_device* d, uint64_t size, uint32_t usage, uint32_t flags, void** out);
void vkrt_buffer_requirements(vkrt_device* d, void* buffer, vkrt_vk_memory_requirements* out);
int32_t vkrt_allocate_memory(vkrt_device* d, uint64_t size, uint32_t type, void** out);

int32_t vkrt_create_command_pool(vkrt_device* d, uint32_t family, void** out);
int32_t vkrt_allocate_command_buffer(vkrt_device* d, void* pool, void** out);
int32_t vkrt_create_fence(vkrt_device* d, void** out);
int32_t vkrt_create_descriptor_pool(vkrt_device* d, uint32_t max_sets, uint32_t storage_buffers, void** out);

// Begins a one-time-submit recording.
int32_t vkrt_begin(vkrt_device* d, void* cmd);
// Submits one command buffer, signalling fence.
int32_t vkrt_submit(vkrt_device* d, void* queue, void* cmd, void* fence);
// A global memory barrier between stages (both masks the same stages).
void vkrt_cmd_barrier(vkrt_device* d, void* cmd, uint32_t stages, uint32_t src_access, uint32_t dst_access);
void vkrt_cmd_copy(vkrt_device* d, void* cmd, void* src, void* dst, uint64_t src_offset, uint64_t dst_offset, uint64_t size);

int32_t vkrt_allocate_set(vkrt_device* d, void* pool, void* layout, void** out);
// Writes n storage-buffer descriptors, binding i from buffers[i].
#define VKRT_MAX_WRITES 32
int32_t vkrt_write_storage_buffers(vkrt_device* d, void* set, uint32_t n, const vkrt_vk_descriptor_buffer_info* buffers);

// Binds n ranges of buffer in one submission, signalling fence.
int32_t vkrt_bind_sparse(vkrt_device* d, void* queue, void* buffer, uint32_t n, const vkrt_vk_sparse_memory_bind* binds, void* fence);

int32_t vkrt_create_shader_module(vkrt_device* d, const uint32_t* code, size_t size, void** out);
// A set layout of n storage buffers, binding i at i, for compute.
int32_t vkrt_create_storage_set_layout(vkrt_device* d, uint32_t n, void** out);
// One set layout and, when push_size > 0, push_size bytes of constants.
int32_t vkrt_create_pipeline_layout(vkrt_device* d, void* set_layout, uint32_t push_size, void** out);
// A compute pipeline whose entry point is "main".
int32_t vkrt_create_compute_pipeline(vkrt_device* d, void* module, void* layout, void** out);

// Instance-level queries. vkrt_queue_families returns the family count and
// writes the first max families' queue flags.
uint32_t vkrt_queue_families(void* instance, void* physical, uint32_t max, uint32_t* flags);
int vkrt_has_device_extension(void* instance, void* physical, const char* name);
int vkrt_has_instance_layer(const char* name);

#endif
