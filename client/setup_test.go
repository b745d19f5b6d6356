package client

import (
	"context"
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/vkrt/vkrt/device/cpu"
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

// openOnCPU opens a client on a pure-Go device of its own made with
// deviceOpts (cpu.WithSparseGranule gives it sparse residency).
func openOnCPU(t testing.TB, deviceOpts []cpu.Option, opts ...Option) *Client {
	t.Helper()
	d, err := cpu.New(deviceOpts...)
	require.NoError(t, err)
	c, err := Open(context.Background(), append(opts, WithBackend(d))...)
	require.NoError(t, err)
	t.Cleanup(func() { require.NoError(t, c.Close()) })
	return c
}
