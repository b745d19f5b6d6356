// Mirrors of the Vulkan structures vkrt builds itself (vkrt_calls.c, and
// vkrt_c.c's messenger and driver query), declared by hand so the package
// builds without the Vulkan development headers. Non-dispatchable handles
// are 64-bit on every platform vkrt builds for.
// TestMirroredStructsMatchTheVulkanHeader compiles these against Khronos'
// vulkan_core.h and asserts every size, alignment and offset.
#ifndef VKRT_VK_H
#define VKRT_VK_H

#include <stddef.h>
#include <stdint.h>

typedef uint64_t vkrt_vk_handle; // a non-dispatchable handle

typedef struct {
	int32_t sType;
	const void* pNext;
	uint32_t flags;
	uint64_t size;
	uint32_t usage;
	int32_t sharingMode;
	uint32_t queueFamilyIndexCount;
	const uint32_t* pQueueFamilyIndices;
} vkrt_vk_buffer_create_info; // VkBufferCreateInfo

typedef struct {
	uint64_t size;
	uint64_t alignment;
	uint32_t memoryTypeBits;
} vkrt_vk_memory_requirements; // VkMemoryRequirements

typedef struct {
	int32_t sType;
	const void* pNext;
	uint64_t allocationSize;
	uint32_t memoryTypeIndex;
} vkrt_vk_memory_allocate_info; // VkMemoryAllocateInfo

typedef struct {
	int32_t sType;
	const void* pNext;
	uint32_t flags;
	uint32_t queueFamilyIndex;
} vkrt_vk_command_pool_create_info; // VkCommandPoolCreateInfo

typedef struct {
	int32_t sType;
	const void* pNext;
	vkrt_vk_handle commandPool;
	int32_t level;
	uint32_t commandBufferCount;
} vkrt_vk_command_buffer_allocate_info; // VkCommandBufferAllocateInfo

typedef struct {
	int32_t sType;
	const void* pNext;
	uint32_t flags;
} vkrt_vk_fence_create_info; // VkFenceCreateInfo

typedef struct {
	int32_t sType;
	const void* pNext;
	uint32_t flags;
	const void* pInheritanceInfo;
} vkrt_vk_command_buffer_begin_info; // VkCommandBufferBeginInfo

typedef struct {
	int32_t sType;
	const void* pNext;
	uint32_t waitSemaphoreCount;
	const vkrt_vk_handle* pWaitSemaphores;
	const uint32_t* pWaitDstStageMask;
	uint32_t commandBufferCount;
	void* const* pCommandBuffers;
	uint32_t signalSemaphoreCount;
	const vkrt_vk_handle* pSignalSemaphores;
} vkrt_vk_submit_info; // VkSubmitInfo

typedef struct {
	int32_t sType;
	const void* pNext;
	uint32_t srcAccessMask;
	uint32_t dstAccessMask;
} vkrt_vk_memory_barrier; // VkMemoryBarrier

typedef struct {
	uint64_t srcOffset;
	uint64_t dstOffset;
	uint64_t size;
} vkrt_vk_buffer_copy; // VkBufferCopy

typedef struct {
	int32_t type;
	uint32_t descriptorCount;
} vkrt_vk_descriptor_pool_size; // VkDescriptorPoolSize

typedef struct {
	int32_t sType;
	const void* pNext;
	uint32_t flags;
	uint32_t maxSets;
	uint32_t poolSizeCount;
	const vkrt_vk_descriptor_pool_size* pPoolSizes;
} vkrt_vk_descriptor_pool_create_info; // VkDescriptorPoolCreateInfo

typedef struct {
	int32_t sType;
	const void* pNext;
	vkrt_vk_handle descriptorPool;
	uint32_t descriptorSetCount;
	const vkrt_vk_handle* pSetLayouts;
} vkrt_vk_descriptor_set_allocate_info; // VkDescriptorSetAllocateInfo

typedef struct {
	vkrt_vk_handle buffer;
	uint64_t offset;
	uint64_t range;
} vkrt_vk_descriptor_buffer_info; // VkDescriptorBufferInfo

typedef struct {
	int32_t sType;
	const void* pNext;
	vkrt_vk_handle dstSet;
	uint32_t dstBinding;
	uint32_t dstArrayElement;
	uint32_t descriptorCount;
	int32_t descriptorType;
	const void* pImageInfo;
	const vkrt_vk_descriptor_buffer_info* pBufferInfo;
	const vkrt_vk_handle* pTexelBufferView;
} vkrt_vk_write_descriptor_set; // VkWriteDescriptorSet

typedef struct {
	uint64_t resourceOffset;
	uint64_t size;
	vkrt_vk_handle memory;
	uint64_t memoryOffset;
	uint32_t flags;
} vkrt_vk_sparse_memory_bind; // VkSparseMemoryBind

typedef struct {
	vkrt_vk_handle buffer;
	uint32_t bindCount;
	const vkrt_vk_sparse_memory_bind* pBinds;
} vkrt_vk_sparse_buffer_memory_bind_info; // VkSparseBufferMemoryBindInfo

typedef struct {
	int32_t sType;
	const void* pNext;
	uint32_t waitSemaphoreCount;
	const vkrt_vk_handle* pWaitSemaphores;
	uint32_t bufferBindCount;
	const vkrt_vk_sparse_buffer_memory_bind_info* pBufferBinds;
	uint32_t imageOpaqueBindCount;
	const void* pImageOpaqueBinds;
	uint32_t imageBindCount;
	const void* pImageBinds;
	uint32_t signalSemaphoreCount;
	const vkrt_vk_handle* pSignalSemaphores;
} vkrt_vk_bind_sparse_info; // VkBindSparseInfo

typedef struct {
	int32_t sType;
	const void* pNext;
	uint32_t flags;
	size_t codeSize;
	const uint32_t* pCode;
} vkrt_vk_shader_module_create_info; // VkShaderModuleCreateInfo

typedef struct {
	uint32_t binding;
	int32_t descriptorType;
	uint32_t descriptorCount;
	uint32_t stageFlags;
	const vkrt_vk_handle* pImmutableSamplers;
} vkrt_vk_descriptor_set_layout_binding; // VkDescriptorSetLayoutBinding

typedef struct {
	int32_t sType;
	const void* pNext;
	uint32_t flags;
	uint32_t bindingCount;
	const vkrt_vk_descriptor_set_layout_binding* pBindings;
} vkrt_vk_descriptor_set_layout_create_info; // VkDescriptorSetLayoutCreateInfo

typedef struct {
	uint32_t stageFlags;
	uint32_t offset;
	uint32_t size;
} vkrt_vk_push_constant_range; // VkPushConstantRange

typedef struct {
	int32_t sType;
	const void* pNext;
	uint32_t flags;
	uint32_t setLayoutCount;
	const vkrt_vk_handle* pSetLayouts;
	uint32_t pushConstantRangeCount;
	const vkrt_vk_push_constant_range* pPushConstantRanges;
} vkrt_vk_pipeline_layout_create_info; // VkPipelineLayoutCreateInfo

typedef struct {
	int32_t sType;
	const void* pNext;
	uint32_t flags;
	uint32_t stage;
	vkrt_vk_handle module;
	const char* pName;
	const void* pSpecializationInfo;
} vkrt_vk_pipeline_shader_stage_create_info; // VkPipelineShaderStageCreateInfo

typedef struct {
	int32_t sType;
	const void* pNext;
	uint32_t flags;
	vkrt_vk_pipeline_shader_stage_create_info stage;
	vkrt_vk_handle layout;
	vkrt_vk_handle basePipelineHandle;
	int32_t basePipelineIndex;
} vkrt_vk_compute_pipeline_create_info; // VkComputePipelineCreateInfo

typedef struct {
	uint32_t queueFlags;
	uint32_t queueCount;
	uint32_t timestampValidBits;
	uint32_t minImageTransferGranularity[3];
} vkrt_vk_queue_family_properties; // VkQueueFamilyProperties

typedef struct {
	char extensionName[256];
	uint32_t specVersion;
} vkrt_vk_extension_properties; // VkExtensionProperties

typedef struct {
	char layerName[256];
	uint32_t specVersion;
	uint32_t implementationVersion;
	char description[256];
} vkrt_vk_layer_properties; // VkLayerProperties

typedef struct {
	int32_t sType;
	const void* pNext;
	uint32_t flags;
	uint32_t messageSeverity;
	uint32_t messageType;
	void* pfnUserCallback;
	void* pUserData;
} vkrt_vk_debug_utils_messenger_create_info; // VkDebugUtilsMessengerCreateInfoEXT

typedef struct {
	int32_t sType;
	void* pNext;
	uint32_t driverID;
	char driverName[256];
	char driverInfo[256];
	uint8_t conformanceVersion[4];
} vkrt_vk_driver_properties; // VkPhysicalDeviceDriverPropertiesKHR

typedef struct {
	int32_t sType;
	void* pNext;
	uint32_t maxPerSetDescriptors;
	uint64_t maxMemoryAllocationSize;
} vkrt_vk_maintenance3_properties; // VkPhysicalDeviceMaintenance3Properties

#endif
