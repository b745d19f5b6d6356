//go:build cgo

package vk

/*
#cgo LDFLAGS: -ldl
#include <stdlib.h>
#include "vkrt_c.h"
*/
import "C"

import (
	"fmt"
	"sync"
	"unsafe"

	vulkan "github.com/vulkan-go/vulkan"
)

var (
	loadOnce sync.Once
	loadErr  error
)

// loadVulkan opens libvulkan.so.1 once per process and hands its
// vkGetInstanceProcAddr to vulkan-go, whose own loader would look for
// libvulkan.so, which only the development package provides.
func loadVulkan() error {
	loadOnce.Do(func() {
		if msg := C.vkrt_load(); msg != nil {
			loadErr = fmt.Errorf("%w: %s (Debian: libvulkan1, and a driver: mesa-vulkan-drivers)", ErrNoVulkan, C.GoString(msg))
			return
		}
		vulkan.SetGetInstanceProcAddr(C.vkrt_get_instance_proc_addr())
		if err := vulkan.Init(); err != nil {
			loadErr = fmt.Errorf("%w: %v", ErrNoVulkan, err)
		}
	})
	return loadErr
}

// instanceVersion is the Vulkan version the loader offers instances.
func instanceVersion() uint32 { return uint32(C.vkrt_instance_version()) }

// messages collects the validation layer's error messages of one instance.
type messages struct{ c *C.vkrt_messages }

func newMessages() *messages { return &messages{c: C.vkrt_messages_new()} }

func (m *messages) free() {
	if m != nil && m.c != nil {
		C.vkrt_messages_free(m.c)
		m.c = nil
	}
}

// take returns the error messages that arrived since the last call and how
// many there were (the text holds the first few).
func (m *messages) take() (int, string) {
	if m == nil || m.c == nil {
		return 0, ""
	}
	buf := make([]byte, 16<<10)
	n := C.vkrt_messages_take(m.c, (*C.char)(unsafe.Pointer(&buf[0])), C.int(len(buf)))
	return int(n), C.GoString((*C.char)(unsafe.Pointer(&buf[0])))
}

// createInfo is a VkDebugUtilsMessengerCreateInfoEXT in C memory for the
// instance create info's pNext chain; release it with freeC.
func (m *messages) createInfo() unsafe.Pointer { return C.vkrt_messenger_create_info(m.c) }

func freeC(p unsafe.Pointer) { C.free(p) }

func createMessenger(instance vulkan.Instance, m *messages) (uint64, error) {
	var handle C.uint64_t
	if r := C.vkrt_create_messenger(unsafe.Pointer(instance), m.c, &handle); r != 0 {
		return 0, fmt.Errorf("vk: vkCreateDebugUtilsMessengerEXT: %w", vkError(vulkan.Result(r)))
	}
	return uint64(handle), nil
}

func destroyMessenger(instance vulkan.Instance, messenger uint64) {
	C.vkrt_destroy_messenger(unsafe.Pointer(instance), C.uint64_t(messenger))
}

// heapBudget is VK_EXT_memory_budget's answer: per heap, what this process
// may use and what it uses.
type heapBudget struct {
	Budget, Usage []uint64
}

func queryBudget(inst *instance, physical vulkan.PhysicalDevice) (heapBudget, bool) {
	var out C.vkrt_budget
	C.vkrt_query_budget(unsafe.Pointer(inst.handle), unsafe.Pointer(physical), &out)
	if out.has_budget == 0 {
		return heapBudget{}, false
	}
	n := int(out.heap_count)
	b := heapBudget{Budget: make([]uint64, n), Usage: make([]uint64, n)}
	for i := range n {
		b.Budget[i] = uint64(out.heap_budget[i])
		b.Usage[i] = uint64(out.heap_usage[i])
	}
	return b, true
}

func queryDriver(inst *instance, physical vulkan.PhysicalDevice) (name, info string, ok bool) {
	var out C.vkrt_driver
	C.vkrt_query_driver(unsafe.Pointer(inst.handle), unsafe.Pointer(physical), &out)
	if out.has_driver == 0 {
		return "", "", false
	}
	return C.GoString(&out.driver_name[0]), C.GoString(&out.driver_info[0]), true
}

// queryMaxAllocation is maxMemoryAllocationSize (Vulkan 1.1), 0 where the
// driver does not say.
func queryMaxAllocation(inst *instance, physical vulkan.PhysicalDevice) uint64 {
	return uint64(C.vkrt_query_max_allocation(unsafe.Pointer(inst.handle), unsafe.Pointer(physical)))
}
