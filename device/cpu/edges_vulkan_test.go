//go:build cgo

package cpu_test

import (
	"os"
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/vkrt/vkrt/device"
	"github.com/vkrt/vkrt/internal/devtest"
	"github.com/vkrt/vkrt/vk"
)

func init() {
	openVulkan = func(t *testing.T) device.Device {
		t.Helper()
		d, err := vk.Open(0, vk.WithValidation(os.Getenv("VKRT_TEST_VALIDATION") != "0"))
		devtest.SkipUnavailable(t, err)
		t.Cleanup(func() { require.NoError(t, d.Close(), "closing the device: validation errors or leaks") })
		return d
	}
}
