//go:build cgo

#include "vkrt_c.h"
#include "vkrt_vk.h"

#include <dlfcn.h>
#include <pthread.h>
#include <stdlib.h>
#include <string.h>

typedef void (*vkrt_pfn)(void);
typedef vkrt_pfn (*vkrt_gipa_fn)(void* instance, const char* name);

static vkrt_gipa_fn gipa;

const char* vkrt_load(void) {
	if (gipa != NULL) return NULL;
	void* lib = dlopen("libvulkan.so.1", RTLD_NOW | RTLD_LOCAL);
	if (lib == NULL) lib = dlopen("libvulkan.so", RTLD_NOW | RTLD_LOCAL);
	if (lib == NULL) return "libvulkan.so.1 not found";
	gipa = (vkrt_gipa_fn)dlsym(lib, "vkGetInstanceProcAddr");
	if (gipa == NULL) return "libvulkan.so.1 has no vkGetInstanceProcAddr";
	return NULL;
}

void* vkrt_get_instance_proc_addr(void) { return (void*)gipa; }

uint32_t vkrt_instance_version(void) {
	typedef int32_t (*fn)(uint32_t*);
	fn f = (fn)gipa(NULL, "vkEnumerateInstanceVersion");
	uint32_t v = 1u << 22; // 1.0: loaders without the entry point
	if (f != NULL && f(&v) != 0) v = 1u << 22;
	return v;
}

// ---- debug messenger ----

#define VKRT_KEEP 8
#define VKRT_MSG_LEN 2048

struct vkrt_messages {
	pthread_mutex_t mu;
	int errors;
	char text[VKRT_KEEP][VKRT_MSG_LEN];
};

vkrt_messages* vkrt_messages_new(void) {
	vkrt_messages* m = calloc(1, sizeof(*m));
	pthread_mutex_init(&m->mu, NULL);
	return m;
}

void vkrt_messages_free(vkrt_messages* m) {
	if (m == NULL) return;
	pthread_mutex_destroy(&m->mu);
	free(m);
}

int vkrt_messages_take(vkrt_messages* m, char* buf, int buflen) {
	pthread_mutex_lock(&m->mu);
	int n = m->errors;
	int used = 0;
	if (buflen > 0) buf[0] = 0;
	for (int i = 0; i < n && i < VKRT_KEEP; i++) {
		int len = (int)strlen(m->text[i]);
		if (used + len + 2 > buflen) break;
		memcpy(buf + used, m->text[i], len);
		used += len;
		buf[used++] = '\n';
		buf[used] = 0;
	}
	m->errors = 0;
	pthread_mutex_unlock(&m->mu);
	return n;
}

typedef struct {
	int32_t sType;
	const void* pNext;
	uint32_t flags;
	const char* pMessageIdName;
	int32_t messageIdNumber;
	const char* pMessage;
} vkrt_callback_data; // leading fields of VkDebugUtilsMessengerCallbackDataEXT

#define VKRT_SEVERITY_WARNING 0x100
#define VKRT_SEVERITY_ERROR 0x1000

static uint32_t vkrt_on_message(uint32_t severity, uint32_t types, const vkrt_callback_data* data, void* user) {
	(void)types;
	vkrt_messages* m = user;
	if (m == NULL || (severity & VKRT_SEVERITY_ERROR) == 0) return 0;
	pthread_mutex_lock(&m->mu);
	if (m->errors < VKRT_KEEP) {
		const char* msg = data && data->pMessage ? data->pMessage : "(no message)";
		strncpy(m->text[m->errors], msg, VKRT_MSG_LEN - 1);
		m->text[m->errors][VKRT_MSG_LEN - 1] = 0;
	}
	m->errors++;
	pthread_mutex_unlock(&m->mu);
	return 0; // VK_FALSE: never abort the call
}

#define VKRT_STYPE_DEBUG_UTILS_MESSENGER_CREATE_INFO 1000128004

static void vkrt_fill_messenger_info(vkrt_vk_debug_utils_messenger_create_info* ci, vkrt_messages* m) {
	memset(ci, 0, sizeof(*ci));
	ci->sType = VKRT_STYPE_DEBUG_UTILS_MESSENGER_CREATE_INFO;
	ci->messageSeverity = VKRT_SEVERITY_WARNING | VKRT_SEVERITY_ERROR;
	ci->messageType = 0x1 | 0x2 | 0x4; // general, validation, performance
	ci->pfnUserCallback = (void*)vkrt_on_message;
	ci->pUserData = m;
}

void* vkrt_messenger_create_info(vkrt_messages* m) {
	vkrt_vk_debug_utils_messenger_create_info* ci = malloc(sizeof(*ci));
	vkrt_fill_messenger_info(ci, m);
	return ci;
}

int32_t vkrt_create_messenger(void* instance, vkrt_messages* m, uint64_t* messenger) {
	typedef int32_t (*fn)(void*, const vkrt_vk_debug_utils_messenger_create_info*, const void*, uint64_t*);
	fn f = (fn)gipa(instance, "vkCreateDebugUtilsMessengerEXT");
	if (f == NULL) return -7; // VK_ERROR_EXTENSION_NOT_PRESENT
	vkrt_vk_debug_utils_messenger_create_info ci;
	vkrt_fill_messenger_info(&ci, m);
	return f(instance, &ci, NULL, messenger);
}

void vkrt_destroy_messenger(void* instance, uint64_t messenger) {
	typedef void (*fn)(void*, uint64_t, const void*);
	fn f = (fn)gipa(instance, "vkDestroyDebugUtilsMessengerEXT");
	if (f != NULL && messenger != 0) f(instance, messenger, NULL);
}

// ---- properties2 queries ----
// The structures below stay out of vkrt_vk.h's checked mirrors: partial or
// padded, or (the budget) newer than the vulkan_core.h the check reads.

typedef struct {
	int32_t sType;
	void* pNext;
	uint64_t heapBudget[16];
	uint64_t heapUsage[16];
} vkrt_budget_props; // VkPhysicalDeviceMemoryBudgetPropertiesEXT

typedef struct {
	int32_t sType;
	void* pNext;
	// VkPhysicalDeviceMemoryProperties: 4 + 32*8 + 4 + pad + 16*16 bytes
	uint32_t memoryTypeCount;
	uint32_t memoryTypes[32][2];
	uint32_t memoryHeapCount;
	struct {
		uint64_t size;
		uint32_t flags;
	} memoryHeaps[16];
} vkrt_memory_props2; // VkPhysicalDeviceMemoryProperties2

#define VKRT_STYPE_MEMORY_PROPERTIES_2 1000059006
#define VKRT_STYPE_MEMORY_BUDGET 1000237000
#define VKRT_STYPE_PROPERTIES_2 1000059001
#define VKRT_STYPE_DRIVER_PROPERTIES 1000196000
#define VKRT_STYPE_MAINTENANCE_3_PROPERTIES 1000168000

typedef void (*vkrt_props2_fn)(void*, void*);

static vkrt_props2_fn vkrt_find(void* instance, const char* core, const char* khr) {
	vkrt_props2_fn f = (vkrt_props2_fn)gipa(instance, core);
	if (f == NULL) f = (vkrt_props2_fn)gipa(instance, khr);
	return f;
}

void vkrt_query_budget(void* instance, void* physical, vkrt_budget* out) {
	memset(out, 0, sizeof(*out));
	vkrt_props2_fn f = vkrt_find(instance, "vkGetPhysicalDeviceMemoryProperties2",
	                             "vkGetPhysicalDeviceMemoryProperties2KHR");
	if (f == NULL) return;
	vkrt_budget_props budget;
	memset(&budget, 0, sizeof(budget));
	budget.sType = VKRT_STYPE_MEMORY_BUDGET;
	vkrt_memory_props2 props;
	memset(&props, 0, sizeof(props));
	props.sType = VKRT_STYPE_MEMORY_PROPERTIES_2;
	props.pNext = &budget;
	f(physical, &props);
	out->has_budget = 1;
	out->heap_count = props.memoryHeapCount;
	memcpy(out->heap_budget, budget.heapBudget, sizeof(out->heap_budget));
	memcpy(out->heap_usage, budget.heapUsage, sizeof(out->heap_usage));
}

typedef struct {
	int32_t sType;
	void* pNext;
	uint64_t properties[256]; // room for VkPhysicalDeviceProperties (824 bytes)
} vkrt_props2; // VkPhysicalDeviceProperties2

void vkrt_query_driver(void* instance, void* physical, vkrt_driver* out) {
	memset(out, 0, sizeof(*out));
	vkrt_props2_fn f = vkrt_find(instance, "vkGetPhysicalDeviceProperties2",
	                             "vkGetPhysicalDeviceProperties2KHR");
	if (f == NULL) return;
	vkrt_vk_driver_properties driver;
	memset(&driver, 0, sizeof(driver));
	driver.sType = VKRT_STYPE_DRIVER_PROPERTIES;
	vkrt_props2 props;
	memset(&props, 0, sizeof(props));
	props.sType = VKRT_STYPE_PROPERTIES_2;
	props.pNext = &driver;
	f(physical, &props);
	out->has_driver = 1;
	out->driver_id = driver.driverID;
	memcpy(out->driver_name, driver.driverName, sizeof(out->driver_name));
	memcpy(out->driver_info, driver.driverInfo, sizeof(out->driver_info));
	out->driver_name[255] = 0;
	out->driver_info[255] = 0;
}

uint64_t vkrt_query_max_allocation(void* instance, void* physical) {
	vkrt_props2_fn f = vkrt_find(instance, "vkGetPhysicalDeviceProperties2",
	                             "vkGetPhysicalDeviceProperties2KHR");
	if (f == NULL) return 0;
	vkrt_vk_maintenance3_properties m3;
	memset(&m3, 0, sizeof(m3));
	m3.sType = VKRT_STYPE_MAINTENANCE_3_PROPERTIES;
	vkrt_props2 props;
	memset(&props, 0, sizeof(props));
	props.sType = VKRT_STYPE_PROPERTIES_2;
	props.pNext = &m3;
	f(physical, &props);
	return m3.maxMemoryAllocationSize;
}
