// The few Vulkan entry points and structures vulkan-go's 1.0 headers lack:
// the loader itself, the debug-utils messenger, the memory budget and the
// driver properties. Declared here by hand so the package builds without
// the Vulkan development headers.
#ifndef VKRT_C_H
#define VKRT_C_H

#include <stdint.h>

// Opens libvulkan.so.1 (or libvulkan.so) and finds vkGetInstanceProcAddr.
// Returns NULL on success, otherwise a static message.
const char* vkrt_load(void);
void* vkrt_get_instance_proc_addr(void);
uint32_t vkrt_instance_version(void);

// Validation messages collected by the debug messenger of one instance.
typedef struct vkrt_messages vkrt_messages;
vkrt_messages* vkrt_messages_new(void);
void vkrt_messages_free(vkrt_messages* m);
// Copies out and forgets the collected error messages; returns how many
// errors arrived since the last call (the copy holds at most the first few).
int vkrt_messages_take(vkrt_messages* m, char* buf, int buflen);

// The create info to chain into VkInstanceCreateInfo.pNext so that instance
// creation and destruction are validated too; owned by the caller (free()).
void* vkrt_messenger_create_info(vkrt_messages* m);
int32_t vkrt_create_messenger(void* instance, vkrt_messages* m, uint64_t* messenger);
void vkrt_destroy_messenger(void* instance, uint64_t messenger);

typedef struct {
	uint32_t has_budget;
	uint32_t heap_count;
	uint64_t heap_budget[16];
	uint64_t heap_usage[16];
} vkrt_budget;
// Queries VK_EXT_memory_budget through vkGetPhysicalDeviceMemoryProperties2.
void vkrt_query_budget(void* instance, void* physical, vkrt_budget* out);

typedef struct {
	uint32_t has_driver;
	uint32_t driver_id;
	char driver_name[256];
	char driver_info[256];
} vkrt_driver;
// Queries VkPhysicalDeviceDriverProperties (Vulkan 1.2) through
// vkGetPhysicalDeviceProperties2.
void vkrt_query_driver(void* instance, void* physical, vkrt_driver* out);

// Queries VkPhysicalDeviceMaintenance3Properties (Vulkan 1.1) through
// vkGetPhysicalDeviceProperties2: the largest single allocation the device
// makes, 0 where the entry point is missing.
uint64_t vkrt_query_max_allocation(void* instance, void* physical);

#endif
