package conformance_test

import (
	"context"
	"errors"
	"os"
	"testing"

	"github.com/vkrt/vkrt/client"
	"github.com/vkrt/vkrt/conformance"
	"github.com/vkrt/vkrt/vk"
)

// openLavapipe is client.Open on the default Vulkan device (lavapipe where
// there is no GPU). Without Vulkan the test skips, unless
// VKRT_REQUIRE_DEVICE=1 makes that a failure.
func requireVulkan(t *testing.T) {
	t.Helper()
	c, err := client.Open(context.Background())
	if errors.Is(err, vk.ErrNoVulkan) && os.Getenv("VKRT_REQUIRE_DEVICE") != "1" {
		t.Skipf("no Vulkan device (set VKRT_REQUIRE_DEVICE=1 to fail instead): %v", err)
	}
	if err != nil {
		t.Fatalf("opening the default Vulkan device: %v", err)
	}
	c.Close()
}

func TestVulkanDeviceConforms(t *testing.T) {
	requireVulkan(t)
	conformance.TestDevice(t, client.Open)
}
