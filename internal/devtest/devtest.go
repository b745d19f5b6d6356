// Package devtest is what the tests of every package share about devices:
// which device they run on, when a missing one is a skip and when a
// failure, and how close a device's floats must come to a CPU reference.
package devtest

import (
	"errors"
	"math"
	"os"
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/vkrt/vkrt/device"
	"github.com/vkrt/vkrt/device/cpu"
)

// RequireEnv names the environment variable that makes a missing device a
// failure instead of a skip (CI sets VKRT_REQUIRE_DEVICE=1).
const RequireEnv = "VKRT_REQUIRE_DEVICE"

// DeviceEnv names the environment variable that picks the device tests run
// on: "cpu" runs them on the pure-Go device even where Vulkan is linked in.
const DeviceEnv = "VKRT_TEST_DEVICE"

// SelectDevice makes the pure-Go cpu device the default one (device.Open)
// when no backend is linked into the test binary or VKRT_TEST_DEVICE=cpu.
// Packages call it from an init function of their tests; a test file with
// the cgo build tag links Vulkan in with import _ "github.com/vkrt/vkrt/vk".
func SelectDevice() {
	if device.Backend() == "" || os.Getenv(DeviceEnv) == "cpu" {
		device.Register("cpu", cpu.Open)
	}
}

// OnCPU reports whether the tests run on the pure-Go device.
func OnCPU() bool { return device.Backend() == "cpu" }

// SkipUnavailable skips the test when err says no device can run here
// (device.ErrUnavailable: no Vulkan driver, a build without cgo), unless
// VKRT_REQUIRE_DEVICE=1 makes a missing driver a failure; a build without
// cgo always skips, since no machine could run Vulkan from it. Any other
// error fails.
func SkipUnavailable(t testing.TB, err error) {
	t.Helper()
	if errors.Is(err, device.ErrUnavailable) {
		if !cgoBuild {
			t.Skipf("built without cgo, so without Vulkan: %v", err)
		}
		if os.Getenv(RequireEnv) != "1" {
			t.Skipf("no device (set %s=1 to fail instead): %v", RequireEnv, err)
		}
	}
	require.NoError(t, err)
}

// RequireClose fails unless every element of got is within tol of want,
// relative to the larger of 1 and |want|.
func RequireClose(t testing.TB, want, got []float32, tol float64, what string) {
	t.Helper()
	require.Len(t, got, len(want), what)
	for i := range want {
		diff := math.Abs(float64(want[i]) - float64(got[i]))
		if !(diff <= tol*math.Max(1, math.Abs(float64(want[i])))) {
			require.Failf(t, "mismatch", "%s: element %d: want %g, got %g (tolerance %g)", what, i, want[i], got[i], tol)
		}
	}
}
