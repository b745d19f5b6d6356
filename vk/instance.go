//go:build cgo

package vk

import (
	"errors"
	"fmt"
	"strings"

	vulkan "github.com/vulkan-go/vulkan"

	vkruntime "github.com/vkrt/vkrt/runtime"
)

const validationLayer = "VK_LAYER_KHRONOS_validation"

// instance is one VkInstance with, when validation is on, the debug
// messenger that collects the validation layer's errors.
type instance struct {
	handle    vulkan.Instance
	version   uint32
	messages  *messages
	messenger uint64
}

func cstr(s string) string { return s + "\x00" }

// newInstance creates a Vulkan instance asking for the newest API version
// up to 1.3 the loader offers; with validation, the Khronos validation layer
// and a messenger that records every error it reports.
func newInstance(validation bool) (*instance, error) {
	if err := loadVulkan(); err != nil {
		return nil, err
	}
	version := min(instanceVersion(), vulkan.MakeVersion(1, 3, 0))
	app := &vulkan.ApplicationInfo{
		SType:            vulkan.StructureTypeApplicationInfo,
		PApplicationName: cstr("vkrt"),
		PEngineName:      cstr("vkrt"),
		ApiVersion:       version,
	}
	info := &vulkan.InstanceCreateInfo{
		SType:            vulkan.StructureTypeInstanceCreateInfo,
		PApplicationInfo: app,
	}
	inst := &instance{version: version}
	if validation {
		if !hasInstanceLayer(validationLayer) {
			return nil, fmt.Errorf("vkrt: validation asked for, but the layer %s is not installed (Debian: vulkan-validationlayers)", validationLayer)
		}
		inst.messages = newMessages()
		chained := inst.messages.createInfo()
		defer freeC(chained)
		info.PNext = chained
		info.EnabledLayerCount = 1
		info.PpEnabledLayerNames = []string{cstr(validationLayer)}
		info.EnabledExtensionCount = 1
		info.PpEnabledExtensionNames = []string{cstr("VK_EXT_debug_utils")}
	}
	var handle vulkan.Instance
	if r := vulkan.CreateInstance(info, nil, &handle); r != vulkan.Success {
		inst.messages.free()
		if r == vulkan.ErrorIncompatibleDriver || r == vulkan.ErrorInitializationFailed {
			return nil, fmt.Errorf("%w: vkCreateInstance: %w", ErrNoVulkan, vkError(r))
		}
		return nil, fmt.Errorf("vkrt: vkCreateInstance: %w", vkError(r))
	}
	if err := vulkan.InitInstance(handle); err != nil {
		vulkan.DestroyInstance(handle, nil)
		inst.messages.free()
		return nil, fmt.Errorf("vkrt: loading instance functions: %w", err)
	}
	inst.handle = handle
	if validation {
		m, err := createMessenger(handle, inst.messages)
		if err != nil {
			inst.destroy()
			return nil, err
		}
		inst.messenger = m
	}
	return inst, nil
}

// validationErrors returns the validation errors reported since the last call
// as one error, or nil.
func (in *instance) validationErrors() error {
	n, text := in.messages.take()
	if n == 0 {
		return nil
	}
	return &ValidationError{Count: n, Messages: strings.TrimSpace(text)}
}

func (in *instance) destroy() {
	if in.handle == nil {
		return
	}
	if in.messenger != 0 {
		destroyMessenger(in.handle, in.messenger)
		in.messenger = 0
	}
	vulkan.DestroyInstance(in.handle, nil)
	in.handle = nil
	in.messages.free()
}

func hasInstanceLayer(name string) bool {
	var count uint32
	if vulkan.EnumerateInstanceLayerProperties(&count, nil) != vulkan.Success || count == 0 {
		return false
	}
	layers := make([]vulkan.LayerProperties, count)
	if vulkan.EnumerateInstanceLayerProperties(&count, layers) != vulkan.Success {
		return false
	}
	for i := range layers[:count] {
		layers[i].Deref()
		if vulkan.ToString(layers[i].LayerName[:]) == name {
			return true
		}
	}
	return false
}

func (in *instance) physicalDevices() ([]vulkan.PhysicalDevice, error) {
	var count uint32
	if r := vulkan.EnumeratePhysicalDevices(in.handle, &count, nil); r != vulkan.Success {
		return nil, fmt.Errorf("vkrt: vkEnumeratePhysicalDevices: %w", vkError(r))
	}
	devices := make([]vulkan.PhysicalDevice, count)
	if count == 0 {
		return devices, nil
	}
	if r := vulkan.EnumeratePhysicalDevices(in.handle, &count, devices); r != vulkan.Success && r != vulkan.Incomplete {
		return nil, fmt.Errorf("vkrt: vkEnumeratePhysicalDevices: %w", vkError(r))
	}
	return devices[:count], nil
}

// ResultError is a Vulkan call that failed with a VkResult.
type ResultError struct {
	Result int32
	Name   string
}

func (e *ResultError) Error() string { return fmt.Sprintf("%s (VkResult %d)", e.Name, e.Result) }

// Is classifies driver results as the runtime's error kinds.
func (e *ResultError) Is(target error) bool {
	switch vulkan.Result(e.Result) {
	case vulkan.ErrorDeviceLost:
		return target == vkruntime.ErrDeviceLost
	case vulkan.ErrorOutOfDeviceMemory:
		return target == vkruntime.ErrOutOfDeviceMemory
	}
	return false
}

var resultNames = map[vulkan.Result]string{
	vulkan.NotReady:                  "VK_NOT_READY",
	vulkan.Timeout:                   "VK_TIMEOUT",
	vulkan.Incomplete:                "VK_INCOMPLETE",
	vulkan.ErrorOutOfHostMemory:      "VK_ERROR_OUT_OF_HOST_MEMORY",
	vulkan.ErrorOutOfDeviceMemory:    "VK_ERROR_OUT_OF_DEVICE_MEMORY",
	vulkan.ErrorInitializationFailed: "VK_ERROR_INITIALIZATION_FAILED",
	vulkan.ErrorDeviceLost:           "VK_ERROR_DEVICE_LOST",
	vulkan.ErrorMemoryMapFailed:      "VK_ERROR_MEMORY_MAP_FAILED",
	vulkan.ErrorLayerNotPresent:      "VK_ERROR_LAYER_NOT_PRESENT",
	vulkan.ErrorExtensionNotPresent:  "VK_ERROR_EXTENSION_NOT_PRESENT",
	vulkan.ErrorFeatureNotPresent:    "VK_ERROR_FEATURE_NOT_PRESENT",
	vulkan.ErrorIncompatibleDriver:   "VK_ERROR_INCOMPATIBLE_DRIVER",
	vulkan.ErrorTooManyObjects:       "VK_ERROR_TOO_MANY_OBJECTS",
}

func vkError(r vulkan.Result) error {
	if r == vulkan.Success {
		return nil
	}
	name, ok := resultNames[r]
	if !ok {
		name = fmt.Sprintf("VkResult(%d)", int32(r))
	}
	return &ResultError{Result: int32(r), Name: name}
}

// isDeviceLost reports whether err says the device is gone.
func isDeviceLost(err error) bool { return errors.Is(err, vkruntime.ErrDeviceLost) }

// cString reads a NUL-terminated byte array.
func cString(b []byte) string {
	if i := strings.IndexByte(string(b), 0); i >= 0 {
		return string(b[:i])
	}
	return string(b)
}
