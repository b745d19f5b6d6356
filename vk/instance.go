//go:build cgo

package vk

import (
	"errors"
	"fmt"
	"os"
	"strings"
	"sync"
	"sync/atomic"
	"syscall"

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
			return nil, fmt.Errorf("vk: validation asked for, but the layer %s is not installed (Debian: vulkan-validationlayers)", validationLayer)
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
	r := vulkan.CreateInstance(info, nil, &handle)
	info.Free() // vulkan-go's copies of info and app, which it would not free
	app.Free()
	if r != vulkan.Success {
		inst.messages.free()
		if r == vulkan.ErrorIncompatibleDriver || r == vulkan.ErrorInitializationFailed {
			return nil, fmt.Errorf("%w: vkCreateInstance: %w: the loader started no driver: none is installed (Debian: mesa-vulkan-drivers), or the one installed failed to start (this process holds %d Vulkan instances%s)",
				ErrNoVulkan, vkError(r), liveInstances.Load(), openFiles())
		}
		return nil, fmt.Errorf("vk: vkCreateInstance: %w", vkError(r))
	}
	if err := vulkan.InitInstance(handle); err != nil {
		vulkan.DestroyInstance(handle, nil)
		inst.messages.free()
		return nil, fmt.Errorf("vk: loading instance functions: %w", err)
	}
	inst.handle = handle
	liveInstances.Add(1)
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
	liveInstances.Add(-1)
}

// liveInstances counts the Vulkan instances made and not yet destroyed:
// each open device holds one, and Devices one while it runs. Drivers hold
// files and mappings per instance, so a leak ends in failed opens.
var liveInstances atomic.Int64

func (in *instance) physicalDevices() ([]vulkan.PhysicalDevice, error) {
	var count uint32
	if r := vulkan.EnumeratePhysicalDevices(in.handle, &count, nil); r != vulkan.Success {
		return nil, fmt.Errorf("vk: vkEnumeratePhysicalDevices: %w", vkError(r))
	}
	devices := make([]vulkan.PhysicalDevice, count)
	if count == 0 {
		return devices, nil
	}
	if r := vulkan.EnumeratePhysicalDevices(in.handle, &count, devices); r != vulkan.Success && r != vulkan.Incomplete {
		return nil, fmt.Errorf("vk: vkEnumeratePhysicalDevices: %w", vkError(r))
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

// The instance without validation is made once and shared by every device
// and listing of the process, for its life: a driver may hold files and
// mappings per instance (NVIDIA's do) and release them late, so making
// one per open runs out after a few dozen. An instance with validation is
// a device's own, so each device's validation errors stay its own.
var shared struct {
	mu   sync.Mutex
	inst *instance
}

// acquireInstance is the shared instance, or with validation a new one.
func acquireInstance(validation bool) (*instance, error) {
	if validation {
		return newInstanceWithoutGC(true)
	}
	shared.mu.Lock()
	defer shared.mu.Unlock()
	if shared.inst == nil {
		inst, err := newInstanceWithoutGC(false)
		if err != nil {
			return nil, err
		}
		shared.inst = inst
	}
	return shared.inst, nil
}

// newInstanceWithoutGC is newInstance with the collector held off: the
// create info's layer and extension names are slices vulkan-go copies
// (see gcHold).
func newInstanceWithoutGC(validation bool) (inst *instance, err error) {
	withoutGC(func() { inst, err = newInstance(validation) })
	return inst, err
}

// releaseInstance destroys a device's own instance; the shared one stays.
func releaseInstance(inst *instance) {
	if inst != nil && inst != sharedInstance() {
		inst.destroy()
	}
}

func sharedInstance() *instance {
	shared.mu.Lock()
	defer shared.mu.Unlock()
	return shared.inst
}

// openFiles describes the process's open files against its limit, for the
// error of an instance the driver would not make ("" where /proc is not
// there to ask).
func openFiles() string {
	entries, err := os.ReadDir("/proc/self/fd")
	if err != nil {
		return ""
	}
	var lim syscall.Rlimit
	if syscall.Getrlimit(syscall.RLIMIT_NOFILE, &lim) != nil {
		return fmt.Sprintf(" and %d open files", len(entries))
	}
	return fmt.Sprintf(" and %d open files of a limit of %d", len(entries), lim.Cur)
}
