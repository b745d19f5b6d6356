package conformance_test

import (
	"context"
	"regexp"
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/vkrt/vkrt/client"
	"github.com/vkrt/vkrt/conformance"
	"github.com/vkrt/vkrt/device"
	"github.com/vkrt/vkrt/device/cpu"
)

// The pure-Go device passes the whole suite; what it lacks (a memory
// budget, sparse binding) is not supported, never a pass.
func TestCPUDeviceConforms(t *testing.T) {
	conformance.TestDevice(t, conformance.OnDevice(cpu.Open))
	if testing.Short() {
		return // the statuses below are the subtests' again, counted
	}
	rep := conformance.RunDevice(context.Background(), conformance.OnDevice(cpu.Open), conformance.Options{})
	require.Empty(t, rep.Failed())
	for _, name := range []string{"device/memory-budget", "storage/sparse-binding"} {
		r, ok := rep.Result(name)
		require.True(t, ok, name)
		require.Equal(t, conformance.NotSupported, r.Status, name)
	}
}

// A correct device whose largest allocation is a few MiB, or down to
// 128 KiB, passes too: the checks size their buffers, pages and products
// to it. With 4 MiB buffers and pages the out-of-memory and install checks
// failed such a device for asking more than any allocation may hold; at
// 256 KiB the churn and cleanup checks installed pages of 1 MiB, and the
// cancelled dispatch bound operands of 768² floats; at 128 KiB the
// concurrent streams made buffers of up to 200,000 B.
func TestADeviceOfSmallPagesConforms(t *testing.T) {
	for _, page := range []uint64{128 << 10, 256 << 10, 1 << 20, 3 << 20} {
		open := func(ctx context.Context, cfg device.Config) (device.Device, error) {
			return cpu.New(cpu.WithMemoryLimit(cfg.MemoryLimit), cpu.WithMaxPageSize(page))
		}
		rep := conformance.RunDevice(context.Background(), conformance.OnDevice(open), conformance.Options{})
		for _, name := range rep.Failed() {
			r, _ := rep.Result(name)
			t.Errorf("pages of %d B: %s failed: %v", page, name, r.Evidence)
		}
	}
}

// A run ended early names its target as a whole run does: the device was
// named by opening it again after the checks, which an ended context
// refused, and the reports of an interrupted vkrt conformance had none.
func TestAnInterruptedRunNamesItsTarget(t *testing.T) {
	open := conformance.OnDevice(cpu.Open)
	whole := conformance.RunDevice(context.Background(), open, conformance.Options{Run: regexp.MustCompile("^storage/size-accounting$")})
	require.NotEmpty(t, whole.Target)
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	rep := conformance.RunDevice(ctx, open, conformance.Options{Finished: func(int, int, conformance.Result) { cancel() }})
	require.NotEmpty(t, rep.Interrupted, "the run stopped after its first check")
	require.Equal(t, whole.Target, rep.Target)
}

// A run told its target opens the device for its checks only, each its
// own, and names the target it was told; untold, it opens the device once
// more, before the checks, for the name.
func TestARunToldItsTargetOpensTheDeviceForItsChecksOnly(t *testing.T) {
	opened := 0
	onCPU := conformance.OnDevice(cpu.Open)
	open := func(ctx context.Context, cfg conformance.DeviceConfig) (*client.Client, error) {
		opened++
		return onCPU(ctx, cfg)
	}
	only := regexp.MustCompile("^device/properties$")
	rep := conformance.RunDevice(context.Background(), open, conformance.Options{Run: only, Target: "the device under test"})
	require.True(t, rep.OK(), "%+v", rep)
	require.Equal(t, "the device under test", rep.Target)
	require.Equal(t, 1, opened, "the check's open alone")

	opened = 0
	rep = conformance.RunDevice(context.Background(), open, conformance.Options{Run: only})
	require.True(t, rep.OK(), "%+v", rep)
	require.NotEmpty(t, rep.Target)
	require.Equal(t, 2, opened, "the open that names the device, and the check's")
}
