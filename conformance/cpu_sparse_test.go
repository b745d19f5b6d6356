package conformance_test

import (
	"context"
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/vkrt/vkrt/conformance"
	"github.com/vkrt/vkrt/device"
	"github.com/vkrt/vkrt/device/cpu"
)

// The pure-Go device with sparse residency (64 KiB granules, as on an
// H200) passes the sparse-binding check too: the suite's sparse rules run
// in CI, where lavapipe has no sparse binding.
func TestCPUDeviceWithSparseResidencyConforms(t *testing.T) {
	open := conformance.OnDevice(func(_ context.Context, cfg device.Config) (device.Device, error) {
		d, err := cpu.New(cpu.WithMemoryLimit(cfg.MemoryLimit), cpu.WithSparseGranule(64<<10))
		if err != nil {
			return nil, err
		}
		return d, nil
	})
	conformance.TestDevice(t, open)
	rep := conformance.RunDevice(context.Background(), open, conformance.Options{})
	require.Empty(t, rep.Failed())
	r, ok := rep.Result("storage/sparse-binding")
	require.True(t, ok)
	require.Equal(t, conformance.Pass, r.Status)
}
