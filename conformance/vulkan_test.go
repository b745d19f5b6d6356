//go:build cgo

package conformance_test

import (
	"context"
	"testing"

	"github.com/vkrt/vkrt/conformance"
	"github.com/vkrt/vkrt/device"
	"github.com/vkrt/vkrt/internal/devtest"
	_ "github.com/vkrt/vkrt/vk" // the Vulkan backend: lavapipe where there is no GPU
)

// The first Vulkan device passes the whole suite. Without Vulkan the test
// skips, unless VKRT_REQUIRE_DEVICE=1 makes that a failure.
func TestVulkanDeviceConforms(t *testing.T) {
	d, err := device.Open(context.Background(), device.Config{})
	devtest.SkipUnavailable(t, err)
	t.Logf("device: %s", d.Name())
	if err := d.Close(); err != nil {
		t.Fatal(err)
	}
	conformance.TestDevice(t, conformance.DefaultDevice(0))
}
