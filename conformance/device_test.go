package conformance_test

import (
	"context"
	"testing"

	"github.com/vkrt/vkrt/client"
	"github.com/vkrt/vkrt/conformance"
	"github.com/vkrt/vkrt/internal/devtest"
	_ "github.com/vkrt/vkrt/vk" // the default device: Vulkan
)

// openLavapipe is client.Open on the default Vulkan device (lavapipe where
// there is no GPU). Without Vulkan the test skips, unless
// VKRT_REQUIRE_DEVICE=1 makes that a failure.
func requireVulkan(t *testing.T) {
	t.Helper()
	c, err := client.Open(context.Background())
	devtest.SkipUnavailable(t, err)
	c.Close()
}

func TestVulkanDeviceConforms(t *testing.T) {
	requireVulkan(t)
	conformance.TestDevice(t, conformance.DefaultDevice(0))
}
