package client

import (
	"context"
	"errors"
	"os"
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/vkrt/vkrt/vk"
)

// openClient opens a client on the default device, skipping when there is no
// Vulkan device unless VKRT_REQUIRE_DEVICE=1 makes that a failure.
func openClient(t testing.TB, opts ...Option) *Client {
	t.Helper()
	c, err := Open(context.Background(), opts...)
	if errors.Is(err, vk.ErrNoVulkan) && os.Getenv("VKRT_REQUIRE_DEVICE") != "1" {
		t.Skipf("no Vulkan device: %v", err)
	}
	require.NoError(t, err)
	t.Cleanup(func() { require.NoError(t, c.Close()) })
	return c
}
