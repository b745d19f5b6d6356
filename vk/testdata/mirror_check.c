// Compiled by TestMirroredStructsMatchTheVulkanHeader against Khronos'
// vulkan_core.h: every mirror in vkrt_vk.h has the size, alignment and
// field offsets of the structure it stands for.
#include <stddef.h>
#include "vulkan/vulkan_core.h"
#include "vkrt_vk.h"

#define SAME_SIZE(mirror, real) \
	_Static_assert(sizeof(mirror) == sizeof(real), #mirror ": size differs from " #real); \
	_Static_assert(_Alignof(mirror) == _Alignof(real), #mirror ": alignment differs from " #real)
#define SAME_FIELD(mirror, real, field) \
	_Static_assert(offsetof(mirror, field) == offsetof(real, field), #mirror "." #field ": offset differs from " #real)

SAME_SIZE(vkrt_vk_buffer_create_info, VkBufferCreateInfo);
SAME_FIELD(vkrt_vk_buffer_create_info, VkBufferCreateInfo, sType);
SAME_FIELD(vkrt_vk_buffer_create_info, VkBufferCreateInfo, pNext);
SAME_FIELD(vkrt_vk_buffer_create_info, VkBufferCreateInfo, flags);
SAME_FIELD(vkrt_vk_buffer_create_info, VkBufferCreateInfo, size);
SAME_FIELD(vkrt_vk_buffer_create_info, VkBufferCreateInfo, usage);
SAME_FIELD(vkrt_vk_buffer_create_info, VkBufferCreateInfo, sharingMode);
SAME_FIELD(vkrt_vk_buffer_create_info, VkBufferCreateInfo, queueFamilyIndexCount);
SAME_FIELD(vkrt_vk_buffer_create_info, VkBufferCreateInfo, pQueueFamilyIndices);

SAME_SIZE(vkrt_vk_memory_requirements, VkMemoryRequirements);
SAME_FIELD(vkrt_vk_memory_requirements, VkMemoryRequirements, size);
SAME_FIELD(vkrt_vk_memory_requirements, VkMemoryRequirements, alignment);
SAME_FIELD(vkrt_vk_memory_requirements, VkMemoryRequirements, memoryTypeBits);

SAME_SIZE(vkrt_vk_memory_allocate_info, VkMemoryAllocateInfo);
SAME_FIELD(vkrt_vk_memory_allocate_info, VkMemoryAllocateInfo, sType);
SAME_FIELD(vkrt_vk_memory_allocate_info, VkMemoryAllocateInfo, pNext);
SAME_FIELD(vkrt_vk_memory_allocate_info, VkMemoryAllocateInfo, allocationSize);
SAME_FIELD(vkrt_vk_memory_allocate_info, VkMemoryAllocateInfo, memoryTypeIndex);

SAME_SIZE(vkrt_vk_command_pool_create_info, VkCommandPoolCreateInfo);
SAME_FIELD(vkrt_vk_command_pool_create_info, VkCommandPoolCreateInfo, sType);
SAME_FIELD(vkrt_vk_command_pool_create_info, VkCommandPoolCreateInfo, pNext);
SAME_FIELD(vkrt_vk_command_pool_create_info, VkCommandPoolCreateInfo, flags);
SAME_FIELD(vkrt_vk_command_pool_create_info, VkCommandPoolCreateInfo, queueFamilyIndex);

SAME_SIZE(vkrt_vk_command_buffer_allocate_info, VkCommandBufferAllocateInfo);
SAME_FIELD(vkrt_vk_command_buffer_allocate_info, VkCommandBufferAllocateInfo, sType);
SAME_FIELD(vkrt_vk_command_buffer_allocate_info, VkCommandBufferAllocateInfo, pNext);
SAME_FIELD(vkrt_vk_command_buffer_allocate_info, VkCommandBufferAllocateInfo, commandPool);
SAME_FIELD(vkrt_vk_command_buffer_allocate_info, VkCommandBufferAllocateInfo, level);
SAME_FIELD(vkrt_vk_command_buffer_allocate_info, VkCommandBufferAllocateInfo, commandBufferCount);

SAME_SIZE(vkrt_vk_fence_create_info, VkFenceCreateInfo);
SAME_FIELD(vkrt_vk_fence_create_info, VkFenceCreateInfo, sType);
SAME_FIELD(vkrt_vk_fence_create_info, VkFenceCreateInfo, pNext);
SAME_FIELD(vkrt_vk_fence_create_info, VkFenceCreateInfo, flags);

SAME_SIZE(vkrt_vk_command_buffer_begin_info, VkCommandBufferBeginInfo);
SAME_FIELD(vkrt_vk_command_buffer_begin_info, VkCommandBufferBeginInfo, sType);
SAME_FIELD(vkrt_vk_command_buffer_begin_info, VkCommandBufferBeginInfo, pNext);
SAME_FIELD(vkrt_vk_command_buffer_begin_info, VkCommandBufferBeginInfo, flags);
SAME_FIELD(vkrt_vk_command_buffer_begin_info, VkCommandBufferBeginInfo, pInheritanceInfo);

SAME_SIZE(vkrt_vk_submit_info, VkSubmitInfo);
SAME_FIELD(vkrt_vk_submit_info, VkSubmitInfo, sType);
SAME_FIELD(vkrt_vk_submit_info, VkSubmitInfo, pNext);
SAME_FIELD(vkrt_vk_submit_info, VkSubmitInfo, waitSemaphoreCount);
SAME_FIELD(vkrt_vk_submit_info, VkSubmitInfo, pWaitSemaphores);
SAME_FIELD(vkrt_vk_submit_info, VkSubmitInfo, pWaitDstStageMask);
SAME_FIELD(vkrt_vk_submit_info, VkSubmitInfo, commandBufferCount);
SAME_FIELD(vkrt_vk_submit_info, VkSubmitInfo, pCommandBuffers);
SAME_FIELD(vkrt_vk_submit_info, VkSubmitInfo, signalSemaphoreCount);
SAME_FIELD(vkrt_vk_submit_info, VkSubmitInfo, pSignalSemaphores);

SAME_SIZE(vkrt_vk_memory_barrier, VkMemoryBarrier);
SAME_FIELD(vkrt_vk_memory_barrier, VkMemoryBarrier, sType);
SAME_FIELD(vkrt_vk_memory_barrier, VkMemoryBarrier, pNext);
SAME_FIELD(vkrt_vk_memory_barrier, VkMemoryBarrier, srcAccessMask);
SAME_FIELD(vkrt_vk_memory_barrier, VkMemoryBarrier, dstAccessMask);

SAME_SIZE(vkrt_vk_buffer_copy, VkBufferCopy);
SAME_FIELD(vkrt_vk_buffer_copy, VkBufferCopy, srcOffset);
SAME_FIELD(vkrt_vk_buffer_copy, VkBufferCopy, dstOffset);
SAME_FIELD(vkrt_vk_buffer_copy, VkBufferCopy, size);

SAME_SIZE(vkrt_vk_descriptor_pool_size, VkDescriptorPoolSize);
SAME_FIELD(vkrt_vk_descriptor_pool_size, VkDescriptorPoolSize, type);
SAME_FIELD(vkrt_vk_descriptor_pool_size, VkDescriptorPoolSize, descriptorCount);

SAME_SIZE(vkrt_vk_descriptor_pool_create_info, VkDescriptorPoolCreateInfo);
SAME_FIELD(vkrt_vk_descriptor_pool_create_info, VkDescriptorPoolCreateInfo, sType);
SAME_FIELD(vkrt_vk_descriptor_pool_create_info, VkDescriptorPoolCreateInfo, pNext);
SAME_FIELD(vkrt_vk_descriptor_pool_create_info, VkDescriptorPoolCreateInfo, flags);
SAME_FIELD(vkrt_vk_descriptor_pool_create_info, VkDescriptorPoolCreateInfo, maxSets);
SAME_FIELD(vkrt_vk_descriptor_pool_create_info, VkDescriptorPoolCreateInfo, poolSizeCount);
SAME_FIELD(vkrt_vk_descriptor_pool_create_info, VkDescriptorPoolCreateInfo, pPoolSizes);

SAME_SIZE(vkrt_vk_descriptor_set_allocate_info, VkDescriptorSetAllocateInfo);
SAME_FIELD(vkrt_vk_descriptor_set_allocate_info, VkDescriptorSetAllocateInfo, sType);
SAME_FIELD(vkrt_vk_descriptor_set_allocate_info, VkDescriptorSetAllocateInfo, pNext);
SAME_FIELD(vkrt_vk_descriptor_set_allocate_info, VkDescriptorSetAllocateInfo, descriptorPool);
SAME_FIELD(vkrt_vk_descriptor_set_allocate_info, VkDescriptorSetAllocateInfo, descriptorSetCount);
SAME_FIELD(vkrt_vk_descriptor_set_allocate_info, VkDescriptorSetAllocateInfo, pSetLayouts);

SAME_SIZE(vkrt_vk_descriptor_buffer_info, VkDescriptorBufferInfo);
SAME_FIELD(vkrt_vk_descriptor_buffer_info, VkDescriptorBufferInfo, buffer);
SAME_FIELD(vkrt_vk_descriptor_buffer_info, VkDescriptorBufferInfo, offset);
SAME_FIELD(vkrt_vk_descriptor_buffer_info, VkDescriptorBufferInfo, range);

SAME_SIZE(vkrt_vk_write_descriptor_set, VkWriteDescriptorSet);
SAME_FIELD(vkrt_vk_write_descriptor_set, VkWriteDescriptorSet, sType);
SAME_FIELD(vkrt_vk_write_descriptor_set, VkWriteDescriptorSet, pNext);
SAME_FIELD(vkrt_vk_write_descriptor_set, VkWriteDescriptorSet, dstSet);
SAME_FIELD(vkrt_vk_write_descriptor_set, VkWriteDescriptorSet, dstBinding);
SAME_FIELD(vkrt_vk_write_descriptor_set, VkWriteDescriptorSet, dstArrayElement);
SAME_FIELD(vkrt_vk_write_descriptor_set, VkWriteDescriptorSet, descriptorCount);
SAME_FIELD(vkrt_vk_write_descriptor_set, VkWriteDescriptorSet, descriptorType);
SAME_FIELD(vkrt_vk_write_descriptor_set, VkWriteDescriptorSet, pImageInfo);
SAME_FIELD(vkrt_vk_write_descriptor_set, VkWriteDescriptorSet, pBufferInfo);
SAME_FIELD(vkrt_vk_write_descriptor_set, VkWriteDescriptorSet, pTexelBufferView);

SAME_SIZE(vkrt_vk_sparse_memory_bind, VkSparseMemoryBind);
SAME_FIELD(vkrt_vk_sparse_memory_bind, VkSparseMemoryBind, resourceOffset);
SAME_FIELD(vkrt_vk_sparse_memory_bind, VkSparseMemoryBind, size);
SAME_FIELD(vkrt_vk_sparse_memory_bind, VkSparseMemoryBind, memory);
SAME_FIELD(vkrt_vk_sparse_memory_bind, VkSparseMemoryBind, memoryOffset);
SAME_FIELD(vkrt_vk_sparse_memory_bind, VkSparseMemoryBind, flags);

SAME_SIZE(vkrt_vk_sparse_buffer_memory_bind_info, VkSparseBufferMemoryBindInfo);
SAME_FIELD(vkrt_vk_sparse_buffer_memory_bind_info, VkSparseBufferMemoryBindInfo, buffer);
SAME_FIELD(vkrt_vk_sparse_buffer_memory_bind_info, VkSparseBufferMemoryBindInfo, bindCount);
SAME_FIELD(vkrt_vk_sparse_buffer_memory_bind_info, VkSparseBufferMemoryBindInfo, pBinds);

SAME_SIZE(vkrt_vk_bind_sparse_info, VkBindSparseInfo);
SAME_FIELD(vkrt_vk_bind_sparse_info, VkBindSparseInfo, sType);
SAME_FIELD(vkrt_vk_bind_sparse_info, VkBindSparseInfo, pNext);
SAME_FIELD(vkrt_vk_bind_sparse_info, VkBindSparseInfo, waitSemaphoreCount);
SAME_FIELD(vkrt_vk_bind_sparse_info, VkBindSparseInfo, pWaitSemaphores);
SAME_FIELD(vkrt_vk_bind_sparse_info, VkBindSparseInfo, bufferBindCount);
SAME_FIELD(vkrt_vk_bind_sparse_info, VkBindSparseInfo, pBufferBinds);
SAME_FIELD(vkrt_vk_bind_sparse_info, VkBindSparseInfo, imageOpaqueBindCount);
SAME_FIELD(vkrt_vk_bind_sparse_info, VkBindSparseInfo, pImageOpaqueBinds);
SAME_FIELD(vkrt_vk_bind_sparse_info, VkBindSparseInfo, imageBindCount);
SAME_FIELD(vkrt_vk_bind_sparse_info, VkBindSparseInfo, pImageBinds);
SAME_FIELD(vkrt_vk_bind_sparse_info, VkBindSparseInfo, signalSemaphoreCount);
SAME_FIELD(vkrt_vk_bind_sparse_info, VkBindSparseInfo, pSignalSemaphores);

SAME_SIZE(vkrt_vk_shader_module_create_info, VkShaderModuleCreateInfo);
SAME_FIELD(vkrt_vk_shader_module_create_info, VkShaderModuleCreateInfo, sType);
SAME_FIELD(vkrt_vk_shader_module_create_info, VkShaderModuleCreateInfo, pNext);
SAME_FIELD(vkrt_vk_shader_module_create_info, VkShaderModuleCreateInfo, flags);
SAME_FIELD(vkrt_vk_shader_module_create_info, VkShaderModuleCreateInfo, codeSize);
SAME_FIELD(vkrt_vk_shader_module_create_info, VkShaderModuleCreateInfo, pCode);

SAME_SIZE(vkrt_vk_descriptor_set_layout_binding, VkDescriptorSetLayoutBinding);
SAME_FIELD(vkrt_vk_descriptor_set_layout_binding, VkDescriptorSetLayoutBinding, binding);
SAME_FIELD(vkrt_vk_descriptor_set_layout_binding, VkDescriptorSetLayoutBinding, descriptorType);
SAME_FIELD(vkrt_vk_descriptor_set_layout_binding, VkDescriptorSetLayoutBinding, descriptorCount);
SAME_FIELD(vkrt_vk_descriptor_set_layout_binding, VkDescriptorSetLayoutBinding, stageFlags);
SAME_FIELD(vkrt_vk_descriptor_set_layout_binding, VkDescriptorSetLayoutBinding, pImmutableSamplers);

SAME_SIZE(vkrt_vk_descriptor_set_layout_create_info, VkDescriptorSetLayoutCreateInfo);
SAME_FIELD(vkrt_vk_descriptor_set_layout_create_info, VkDescriptorSetLayoutCreateInfo, sType);
SAME_FIELD(vkrt_vk_descriptor_set_layout_create_info, VkDescriptorSetLayoutCreateInfo, pNext);
SAME_FIELD(vkrt_vk_descriptor_set_layout_create_info, VkDescriptorSetLayoutCreateInfo, flags);
SAME_FIELD(vkrt_vk_descriptor_set_layout_create_info, VkDescriptorSetLayoutCreateInfo, bindingCount);
SAME_FIELD(vkrt_vk_descriptor_set_layout_create_info, VkDescriptorSetLayoutCreateInfo, pBindings);

SAME_SIZE(vkrt_vk_push_constant_range, VkPushConstantRange);
SAME_FIELD(vkrt_vk_push_constant_range, VkPushConstantRange, stageFlags);
SAME_FIELD(vkrt_vk_push_constant_range, VkPushConstantRange, offset);
SAME_FIELD(vkrt_vk_push_constant_range, VkPushConstantRange, size);

SAME_SIZE(vkrt_vk_pipeline_layout_create_info, VkPipelineLayoutCreateInfo);
SAME_FIELD(vkrt_vk_pipeline_layout_create_info, VkPipelineLayoutCreateInfo, sType);
SAME_FIELD(vkrt_vk_pipeline_layout_create_info, VkPipelineLayoutCreateInfo, pNext);
SAME_FIELD(vkrt_vk_pipeline_layout_create_info, VkPipelineLayoutCreateInfo, flags);
SAME_FIELD(vkrt_vk_pipeline_layout_create_info, VkPipelineLayoutCreateInfo, setLayoutCount);
SAME_FIELD(vkrt_vk_pipeline_layout_create_info, VkPipelineLayoutCreateInfo, pSetLayouts);
SAME_FIELD(vkrt_vk_pipeline_layout_create_info, VkPipelineLayoutCreateInfo, pushConstantRangeCount);
SAME_FIELD(vkrt_vk_pipeline_layout_create_info, VkPipelineLayoutCreateInfo, pPushConstantRanges);

SAME_SIZE(vkrt_vk_pipeline_shader_stage_create_info, VkPipelineShaderStageCreateInfo);
SAME_FIELD(vkrt_vk_pipeline_shader_stage_create_info, VkPipelineShaderStageCreateInfo, sType);
SAME_FIELD(vkrt_vk_pipeline_shader_stage_create_info, VkPipelineShaderStageCreateInfo, pNext);
SAME_FIELD(vkrt_vk_pipeline_shader_stage_create_info, VkPipelineShaderStageCreateInfo, flags);
SAME_FIELD(vkrt_vk_pipeline_shader_stage_create_info, VkPipelineShaderStageCreateInfo, stage);
SAME_FIELD(vkrt_vk_pipeline_shader_stage_create_info, VkPipelineShaderStageCreateInfo, module);
SAME_FIELD(vkrt_vk_pipeline_shader_stage_create_info, VkPipelineShaderStageCreateInfo, pName);
SAME_FIELD(vkrt_vk_pipeline_shader_stage_create_info, VkPipelineShaderStageCreateInfo, pSpecializationInfo);

SAME_SIZE(vkrt_vk_compute_pipeline_create_info, VkComputePipelineCreateInfo);
SAME_FIELD(vkrt_vk_compute_pipeline_create_info, VkComputePipelineCreateInfo, sType);
SAME_FIELD(vkrt_vk_compute_pipeline_create_info, VkComputePipelineCreateInfo, pNext);
SAME_FIELD(vkrt_vk_compute_pipeline_create_info, VkComputePipelineCreateInfo, flags);
SAME_FIELD(vkrt_vk_compute_pipeline_create_info, VkComputePipelineCreateInfo, stage);
SAME_FIELD(vkrt_vk_compute_pipeline_create_info, VkComputePipelineCreateInfo, layout);
SAME_FIELD(vkrt_vk_compute_pipeline_create_info, VkComputePipelineCreateInfo, basePipelineHandle);
SAME_FIELD(vkrt_vk_compute_pipeline_create_info, VkComputePipelineCreateInfo, basePipelineIndex);

SAME_SIZE(vkrt_vk_queue_family_properties, VkQueueFamilyProperties);
SAME_FIELD(vkrt_vk_queue_family_properties, VkQueueFamilyProperties, queueFlags);
SAME_FIELD(vkrt_vk_queue_family_properties, VkQueueFamilyProperties, queueCount);
SAME_FIELD(vkrt_vk_queue_family_properties, VkQueueFamilyProperties, timestampValidBits);
SAME_FIELD(vkrt_vk_queue_family_properties, VkQueueFamilyProperties, minImageTransferGranularity);

SAME_SIZE(vkrt_vk_extension_properties, VkExtensionProperties);
SAME_FIELD(vkrt_vk_extension_properties, VkExtensionProperties, extensionName);
SAME_FIELD(vkrt_vk_extension_properties, VkExtensionProperties, specVersion);

SAME_SIZE(vkrt_vk_layer_properties, VkLayerProperties);
SAME_FIELD(vkrt_vk_layer_properties, VkLayerProperties, layerName);
SAME_FIELD(vkrt_vk_layer_properties, VkLayerProperties, specVersion);
SAME_FIELD(vkrt_vk_layer_properties, VkLayerProperties, implementationVersion);
SAME_FIELD(vkrt_vk_layer_properties, VkLayerProperties, description);
