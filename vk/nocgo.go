//go:build !cgo

package vk

// Device is an opened Vulkan device. Built without cgo there is none: Open
// fails with ErrNoCgo, and the package registers no default backend, so
// device.Open fails with device.ErrNoBackend (and tests pick the cpu device).
type Device struct{}

// Open fails: the Vulkan backend needs cgo.
func Open(index int, opts ...Option) (*Device, error) { return nil, ErrNoCgo }

// Devices fails: the Vulkan backend needs cgo.
func Devices() ([]DeviceInfo, error) { return nil, ErrNoCgo }
