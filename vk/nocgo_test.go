//go:build !cgo

package vk

import (
	"context"
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/vkrt/vkrt/device"
)

// Built without cgo, the backend says so: an error that names the cause and
// classifies as a device this machine cannot run.
func TestWithoutCgoTheBackendSaysSo(t *testing.T) {
	_, err := Open(0)
	require.ErrorIs(t, err, ErrNoCgo)
	require.ErrorIs(t, err, device.ErrUnavailable)
	require.EqualError(t, err, "vkrt was built without cgo; the Vulkan backend needs CGO_ENABLED=1")
	_, err = Devices()
	require.ErrorIs(t, err, ErrNoCgo)
	_, err = device.Open(context.Background(), device.Config{})
	require.ErrorIs(t, err, device.ErrNoBackend, "without cgo the package registers no backend")
	require.ErrorContains(t, err, "needs cgo")
}
