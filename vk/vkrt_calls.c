//go:build cgo

#include "vkrt_calls.h"

#include <stdlib.h>
#include <string.h>

#include "vkrt_c.h"

// Structure types, enums and flags of the Vulkan 1.0 core used below.
#define STYPE_SUBMIT_INFO 4
#define STYPE_MEMORY_ALLOCATE_INFO 5
#define STYPE_BIND_SPARSE_INFO 7
#define STYPE_FENCE_CREATE_INFO 8
#define STYPE_BUFFER_CREATE_INFO 12
#define STYPE_SHADER_MODULE_CREATE_INFO 16
#define STYPE_PIPELINE_SHADER_STAGE_CREATE_INFO 18
#define STYPE_COMPUTE_PIPELINE_CREATE_INFO 29
#define STYPE_PIPELINE_LAYOUT_CREATE_INFO 30
#define STYPE_DESCRIPTOR_SET_LAYOUT_CREATE_INFO 32
#define STYPE_DESCRIPTOR_POOL_CREATE_INFO 33
#define STYPE_DESCRIPTOR_SET_ALLOCATE_INFO 34
#define STYPE_WRITE_DESCRIPTOR_SET 35
#define STYPE_COMMAND_POOL_CREATE_INFO 39
#define STYPE_COMMAND_BUFFER_ALLOCATE_INFO 40
#define STYPE_COMMAND_BUFFER_BEGIN_INFO 42
#define STYPE_MEMORY_BARRIER 46

#define DESCRIPTOR_TYPE_STORAGE_BUFFER 7
#define SHADER_STAGE_COMPUTE 0x20
#define COMMAND_BUFFER_LEVEL_PRIMARY 0
#define COMMAND_BUFFER_USAGE_ONE_TIME_SUBMIT 0x1
#define SHARING_MODE_EXCLUSIVE 0
#define VK_ERROR_INITIALIZATION_FAILED (-3)

typedef void (*pfn)(void);
typedef pfn (*gdpa_fn)(void* device, const char* name);
typedef pfn (*gipa_fn)(void* instance, const char* name);

#define H(x) ((vkrt_vk_handle)(uintptr_t)(x))

struct vkrt_device {
	void* handle;
	int32_t (*create_buffer)(void*, const vkrt_vk_buffer_create_info*, const void*, vkrt_vk_handle*);
	void (*buffer_requirements)(void*, vkrt_vk_handle, vkrt_vk_memory_requirements*);
	int32_t (*allocate_memory)(void*, const vkrt_vk_memory_allocate_info*, const void*, vkrt_vk_handle*);
	int32_t (*create_command_pool)(void*, const vkrt_vk_command_pool_create_info*, const void*, vkrt_vk_handle*);
	int32_t (*allocate_command_buffers)(void*, const vkrt_vk_command_buffer_allocate_info*, void**);
	int32_t (*create_fence)(void*, const vkrt_vk_fence_create_info*, const void*, vkrt_vk_handle*);
	int32_t (*create_descriptor_pool)(void*, const vkrt_vk_descriptor_pool_create_info*, const void*, vkrt_vk_handle*);
	int32_t (*begin)(void*, const vkrt_vk_command_buffer_begin_info*);
	int32_t (*submit)(void*, uint32_t, const vkrt_vk_submit_info*, vkrt_vk_handle);
	void (*cmd_barrier)(void*, uint32_t, uint32_t, uint32_t, uint32_t, const vkrt_vk_memory_barrier*, uint32_t,
	                    const void*, uint32_t, const void*);
	void (*cmd_copy)(void*, vkrt_vk_handle, vkrt_vk_handle, uint32_t, const vkrt_vk_buffer_copy*);
	int32_t (*allocate_sets)(void*, const vkrt_vk_descriptor_set_allocate_info*, vkrt_vk_handle*);
	void (*update_sets)(void*, uint32_t, const vkrt_vk_write_descriptor_set*, uint32_t, const void*);
	int32_t (*bind_sparse)(void*, uint32_t, const vkrt_vk_bind_sparse_info*, vkrt_vk_handle);
	int32_t (*create_shader_module)(void*, const vkrt_vk_shader_module_create_info*, const void*, vkrt_vk_handle*);
	int32_t (*create_set_layout)(void*, const vkrt_vk_descriptor_set_layout_create_info*, const void*, vkrt_vk_handle*);
	int32_t (*create_pipeline_layout)(void*, const vkrt_vk_pipeline_layout_create_info*, const void*, vkrt_vk_handle*);
	int32_t (*create_compute_pipelines)(void*, vkrt_vk_handle, uint32_t, const vkrt_vk_compute_pipeline_create_info*,
	                                    const void*, vkrt_vk_handle*);
};

vkrt_device* vkrt_device_new(void* instance, void* device, const char** missing) {
	gipa_fn gipa = (gipa_fn)vkrt_get_instance_proc_addr();
	gdpa_fn gdpa = gipa ? (gdpa_fn)gipa(instance, "vkGetDeviceProcAddr") : NULL;
	if (gdpa == NULL) {
		*missing = "vkGetDeviceProcAddr";
		return NULL;
	}
	vkrt_device* d = calloc(1, sizeof(*d));
	if (d == NULL) {
		*missing = "memory for the entry points";
		return NULL;
	}
	d->handle = device;
#define FIND(field, name)                    \
	do {                                     \
		pfn f = gdpa(device, name);          \
		if (f == NULL) {                     \
			*missing = name;                 \
			free(d);                         \
			return NULL;                     \
		}                                    \
		memcpy(&d->field, &f, sizeof(f));    \
	} while (0)
	FIND(create_buffer, "vkCreateBuffer");
	FIND(buffer_requirements, "vkGetBufferMemoryRequirements");
	FIND(allocate_memory, "vkAllocateMemory");
	FIND(create_command_pool, "vkCreateCommandPool");
	FIND(allocate_command_buffers, "vkAllocateCommandBuffers");
	FIND(create_fence, "vkCreateFence");
	FIND(create_descriptor_pool, "vkCreateDescriptorPool");
	FIND(begin, "vkBeginCommandBuffer");
	FIND(submit, "vkQueueSubmit");
	FIND(cmd_barrier, "vkCmdPipelineBarrier");
	FIND(cmd_copy, "vkCmdCopyBuffer");
	FIND(allocate_sets, "vkAllocateDescriptorSets");
	FIND(update_sets, "vkUpdateDescriptorSets");
	FIND(bind_sparse, "vkQueueBindSparse");
	FIND(create_shader_module, "vkCreateShaderModule");
	FIND(create_set_layout, "vkCreateDescriptorSetLayout");
	FIND(create_pipeline_layout, "vkCreatePipelineLayout");
	FIND(create_compute_pipelines, "vkCreateComputePipelines");
#undef FIND
	*missing = NULL;
	return d;
}

void vkrt_device_free(vkrt_device* d) { free(d); }

int32_t vkrt_create_buffer(vkrt_device* d, uint64_t size, uint32_t usage, uint32_t flags, void** out) {
	vkrt_vk_buffer_create_info ci = {
	    .sType = STYPE_BUFFER_CREATE_INFO, .flags = flags, .size = size, .usage = usage, .sharingMode = SHARING_MODE_EXCLUSIVE};
	vkrt_vk_handle h = 0;
	int32_t r = d->create_buffer(d->handle, &ci, NULL, &h);
	*out = (void*)(uintptr_t)h;
	return r;
}

void vkrt_buffer_requirements(vkrt_device* d, void* buffer, vkrt_vk_memory_requirements* out) {
	memset(out, 0, sizeof(*out));
	d->buffer_requirements(d->handle, H(buffer), out);
}

int32_t vkrt_allocate_memory(vkrt_device* d, uint64_t size, uint32_t type, void** out) {
	vkrt_vk_memory_allocate_info ai = {.sType = STYPE_MEMORY_ALLOCATE_INFO, .allocationSize = size, .memoryTypeIndex = type};
	vkrt_vk_handle h = 0;
	int32_t r = d->allocate_memory(d->handle, &ai, NULL, &h);
	*out = (void*)(uintptr_t)h;
	return r;
}

int32_t vkrt_create_command_pool(vkrt_device* d, uint32_t family, void** out) {
	vkrt_vk_command_pool_create_info ci = {.sType = STYPE_COMMAND_POOL_CREATE_INFO, .queueFamilyIndex = family};
	vkrt_vk_handle h = 0;
	int32_t r = d->create_command_pool(d->handle, &ci, NULL, &h);
	*out = (void*)(uintptr_t)h;
	return r;
}

int32_t vkrt_allocate_command_buffer(vkrt_device* d, void* pool, void** out) {
	vkrt_vk_command_buffer_allocate_info ai = {.sType = STYPE_COMMAND_BUFFER_ALLOCATE_INFO,
	                                           .commandPool = H(pool),
	                                           .level = COMMAND_BUFFER_LEVEL_PRIMARY,
	                                           .commandBufferCount = 1};
	*out = NULL;
	return d->allocate_command_buffers(d->handle, &ai, out);
}

int32_t vkrt_create_fence(vkrt_device* d, void** out) {
	vkrt_vk_fence_create_info ci = {.sType = STYPE_FENCE_CREATE_INFO};
	vkrt_vk_handle h = 0;
	int32_t r = d->create_fence(d->handle, &ci, NULL, &h);
	*out = (void*)(uintptr_t)h;
	return r;
}

int32_t vkrt_create_descriptor_pool(vkrt_device* d, uint32_t max_sets, uint32_t storage_buffers, void** out) {
	vkrt_vk_descriptor_pool_size size = {.type = DESCRIPTOR_TYPE_STORAGE_BUFFER, .descriptorCount = storage_buffers};
	vkrt_vk_descriptor_pool_create_info ci = {
	    .sType = STYPE_DESCRIPTOR_POOL_CREATE_INFO, .maxSets = max_sets, .poolSizeCount = 1, .pPoolSizes = &size};
	vkrt_vk_handle h = 0;
	int32_t r = d->create_descriptor_pool(d->handle, &ci, NULL, &h);
	*out = (void*)(uintptr_t)h;
	return r;
}

int32_t vkrt_begin(vkrt_device* d, void* cmd) {
	vkrt_vk_command_buffer_begin_info bi = {.sType = STYPE_COMMAND_BUFFER_BEGIN_INFO,
	                                        .flags = COMMAND_BUFFER_USAGE_ONE_TIME_SUBMIT};
	return d->begin(cmd, &bi);
}

int32_t vkrt_submit(vkrt_device* d, void* queue, void* cmd, void* fence) {
	void* cmds[1] = {cmd};
	vkrt_vk_submit_info si = {.sType = STYPE_SUBMIT_INFO, .commandBufferCount = 1, .pCommandBuffers = cmds};
	return d->submit(queue, 1, &si, H(fence));
}

void vkrt_cmd_barrier(vkrt_device* d, void* cmd, uint32_t stages, uint32_t src_access, uint32_t dst_access) {
	vkrt_vk_memory_barrier b = {.sType = STYPE_MEMORY_BARRIER, .srcAccessMask = src_access, .dstAccessMask = dst_access};
	d->cmd_barrier(cmd, stages, stages, 0, 1, &b, 0, NULL, 0, NULL);
}

void vkrt_cmd_copy(vkrt_device* d, void* cmd, void* src, void* dst, uint64_t src_offset, uint64_t dst_offset,
                   uint64_t size) {
	vkrt_vk_buffer_copy region = {.srcOffset = src_offset, .dstOffset = dst_offset, .size = size};
	d->cmd_copy(cmd, H(src), H(dst), 1, &region);
}

int32_t vkrt_allocate_set(vkrt_device* d, void* pool, void* layout, void** out) {
	vkrt_vk_handle layouts[1] = {H(layout)};
	vkrt_vk_descriptor_set_allocate_info ai = {.sType = STYPE_DESCRIPTOR_SET_ALLOCATE_INFO,
	                                           .descriptorPool = H(pool),
	                                           .descriptorSetCount = 1,
	                                           .pSetLayouts = layouts};
	vkrt_vk_handle h = 0;
	int32_t r = d->allocate_sets(d->handle, &ai, &h);
	*out = (void*)(uintptr_t)h;
	return r;
}

int32_t vkrt_write_storage_buffers(vkrt_device* d, void* set, uint32_t n, const vkrt_vk_descriptor_buffer_info* buffers) {
	if (n > VKRT_MAX_WRITES) return VK_ERROR_INITIALIZATION_FAILED;
	vkrt_vk_write_descriptor_set writes[VKRT_MAX_WRITES];
	memset(writes, 0, sizeof(writes[0]) * n);
	for (uint32_t i = 0; i < n; i++) {
		writes[i].sType = STYPE_WRITE_DESCRIPTOR_SET;
		writes[i].dstSet = H(set);
		writes[i].dstBinding = i;
		writes[i].descriptorCount = 1;
		writes[i].descriptorType = DESCRIPTOR_TYPE_STORAGE_BUFFER;
		writes[i].pBufferInfo = &buffers[i];
	}
	d->update_sets(d->handle, n, writes, 0, NULL);
	return 0;
}

int32_t vkrt_bind_sparse(vkrt_device* d, void* queue, void* buffer, uint32_t n, const vkrt_vk_sparse_memory_bind* binds,
                         void* fence) {
	vkrt_vk_sparse_buffer_memory_bind_info bb = {.buffer = H(buffer), .bindCount = n, .pBinds = binds};
	vkrt_vk_bind_sparse_info bi = {.sType = STYPE_BIND_SPARSE_INFO, .bufferBindCount = 1, .pBufferBinds = &bb};
	return d->bind_sparse(queue, 1, &bi, H(fence));
}

int32_t vkrt_create_shader_module(vkrt_device* d, const uint32_t* code, size_t size, void** out) {
	vkrt_vk_shader_module_create_info ci = {.sType = STYPE_SHADER_MODULE_CREATE_INFO, .codeSize = size, .pCode = code};
	vkrt_vk_handle h = 0;
	int32_t r = d->create_shader_module(d->handle, &ci, NULL, &h);
	*out = (void*)(uintptr_t)h;
	return r;
}

int32_t vkrt_create_storage_set_layout(vkrt_device* d, uint32_t n, void** out) {
	if (n > VKRT_MAX_WRITES) return VK_ERROR_INITIALIZATION_FAILED;
	vkrt_vk_descriptor_set_layout_binding bindings[VKRT_MAX_WRITES];
	memset(bindings, 0, sizeof(bindings[0]) * n);
	for (uint32_t i = 0; i < n; i++) {
		bindings[i].binding = i;
		bindings[i].descriptorType = DESCRIPTOR_TYPE_STORAGE_BUFFER;
		bindings[i].descriptorCount = 1;
		bindings[i].stageFlags = SHADER_STAGE_COMPUTE;
	}
	vkrt_vk_descriptor_set_layout_create_info ci = {
	    .sType = STYPE_DESCRIPTOR_SET_LAYOUT_CREATE_INFO, .bindingCount = n, .pBindings = n > 0 ? bindings : NULL};
	vkrt_vk_handle h = 0;
	int32_t r = d->create_set_layout(d->handle, &ci, NULL, &h);
	*out = (void*)(uintptr_t)h;
	return r;
}

int32_t vkrt_create_pipeline_layout(vkrt_device* d, void* set_layout, uint32_t push_size, void** out) {
	vkrt_vk_handle layouts[1] = {H(set_layout)};
	vkrt_vk_push_constant_range push = {.stageFlags = SHADER_STAGE_COMPUTE, .offset = 0, .size = push_size};
	vkrt_vk_pipeline_layout_create_info ci = {.sType = STYPE_PIPELINE_LAYOUT_CREATE_INFO,
	                                          .setLayoutCount = 1,
	                                          .pSetLayouts = layouts,
	                                          .pushConstantRangeCount = push_size > 0 ? 1 : 0,
	                                          .pPushConstantRanges = push_size > 0 ? &push : NULL};
	vkrt_vk_handle h = 0;
	int32_t r = d->create_pipeline_layout(d->handle, &ci, NULL, &h);
	*out = (void*)(uintptr_t)h;
	return r;
}

int32_t vkrt_create_compute_pipeline(vkrt_device* d, void* module, void* layout, void** out) {
	vkrt_vk_compute_pipeline_create_info ci = {
	    .sType = STYPE_COMPUTE_PIPELINE_CREATE_INFO,
	    .stage = {.sType = STYPE_PIPELINE_SHADER_STAGE_CREATE_INFO,
	              .stage = SHADER_STAGE_COMPUTE,
	              .module = H(module),
	              .pName = "main"},
	    .layout = H(layout),
	    .basePipelineIndex = -1,
	};
	vkrt_vk_handle h = 0;
	int32_t r = d->create_compute_pipelines(d->handle, 0, 1, &ci, NULL, &h);
	*out = (void*)(uintptr_t)h;
	return r;
}

uint32_t vkrt_queue_families(void* instance, void* physical, uint32_t max, uint32_t* flags) {
	gipa_fn gipa = (gipa_fn)vkrt_get_instance_proc_addr();
	typedef void (*fn)(void*, uint32_t*, vkrt_vk_queue_family_properties*);
	fn f = gipa ? (fn)gipa(instance, "vkGetPhysicalDeviceQueueFamilyProperties") : NULL;
	if (f == NULL) return 0;
	uint32_t count = 0;
	f(physical, &count, NULL);
	if (count == 0) return 0;
	vkrt_vk_queue_family_properties* props = calloc(count, sizeof(*props));
	if (props == NULL) return 0;
	f(physical, &count, props);
	for (uint32_t i = 0; i < count && i < max; i++) flags[i] = props[i].queueFlags;
	free(props);
	return count;
}

int vkrt_has_device_extension(void* instance, void* physical, const char* name) {
	gipa_fn gipa = (gipa_fn)vkrt_get_instance_proc_addr();
	typedef int32_t (*fn)(void*, const char*, uint32_t*, vkrt_vk_extension_properties*);
	fn f = gipa ? (fn)gipa(instance, "vkEnumerateDeviceExtensionProperties") : NULL;
	if (f == NULL) return 0;
	uint32_t count = 0;
	if (f(physical, NULL, &count, NULL) != 0 || count == 0) return 0;
	vkrt_vk_extension_properties* props = calloc(count, sizeof(*props));
	if (props == NULL) return 0;
	int found = 0;
	int32_t r = f(physical, NULL, &count, props);
	if (r >= 0) { // VK_SUCCESS or VK_INCOMPLETE: look at what came
		for (uint32_t i = 0; i < count && !found; i++) {
			props[i].extensionName[sizeof(props[i].extensionName) - 1] = 0;
			found = strcmp(props[i].extensionName, name) == 0;
		}
	}
	free(props);
	return found;
}

int vkrt_has_instance_layer(const char* name) {
	gipa_fn gipa = (gipa_fn)vkrt_get_instance_proc_addr();
	typedef int32_t (*fn)(uint32_t*, vkrt_vk_layer_properties*);
	fn f = gipa ? (fn)gipa(NULL, "vkEnumerateInstanceLayerProperties") : NULL;
	if (f == NULL) return 0;
	uint32_t count = 0;
	if (f(&count, NULL) != 0 || count == 0) return 0;
	vkrt_vk_layer_properties* props = calloc(count, sizeof(*props));
	if (props == NULL) return 0;
	int found = 0;
	if (f(&count, props) >= 0) {
		for (uint32_t i = 0; i < count && !found; i++) {
			props[i].layerName[sizeof(props[i].layerName) - 1] = 0;
			found = strcmp(props[i].layerName, name) == 0;
		}
	}
	free(props);
	return found;
}
