//go:build !cgo

package vk

import (
	"context"

	"github.com/vkrt/vkrt/device"
)

// Device is an opened Vulkan device. Built without cgo there is none: Open
// fails with ErrNoCgo.
type Device struct{}

// Open fails: the Vulkan backend needs cgo.
func Open(index int, opts ...Option) (*Device, error) { return nil, ErrNoCgo }

// Devices fails: the Vulkan backend needs cgo.
func Devices() ([]DeviceInfo, error) { return nil, ErrNoCgo }

func init() {
	device.Register("vulkan", func(context.Context, device.Config) (device.Device, error) { return nil, ErrNoCgo })
}
