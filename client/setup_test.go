package client

import (
	"context"
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/vkrt/vkrt/internal/devtest"
)

// The tests run on the default device: Vulkan where the cgo build links it
// in (vulkan_test.go), else, or with VKRT_TEST_DEVICE=cpu, the pure-Go one.
func init() { devtest.SelectDevice() }

// openClient opens a client on the default device, skipping when there is no
// device unless VKRT_REQUIRE_DEVICE=1 makes that a failure.
func openClient(t testing.TB, opts ...Option) *Client {
	t.Helper()
	c, err := Open(context.Background(), opts...)
	devtest.SkipUnavailable(t, err)
	t.Cleanup(func() { require.NoError(t, c.Close()) })
	return c
}
