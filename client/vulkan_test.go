//go:build cgo

package client

import (
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/vkrt/vkrt/internal/devtest"
	"github.com/vkrt/vkrt/vk" // the Vulkan backend, the default device of a cgo build
)

// The default device of a cgo build is the first Vulkan device.
func TestDefaultDeviceIsTheFirstVulkanDevice(t *testing.T) {
	c := openClient(t)
	if devtest.OnCPU() {
		t.Skipf("the tests run on the cpu device (%s=cpu)", devtest.DeviceEnv)
	}
	devices, err := vk.Devices()
	require.NoError(t, err)
	require.Equal(t, devices[0].Name, c.Device().Name())
	require.IsType(t, &vk.Device{}, c.Device())
}
