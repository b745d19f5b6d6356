package conformance_test

import (
	"context"
	"slices"
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/vkrt/vkrt/client"
	"github.com/vkrt/vkrt/conformance"
	"github.com/vkrt/vkrt/device"
	"github.com/vkrt/vkrt/device/cpu"
	"github.com/vkrt/vkrt/memory"
)

// onSparseCPU opens every client on a pure-Go device of its own with
// sparse residency at 64 KiB granules, as on an H200.
func onSparseCPU() conformance.OpenClient {
	return conformance.OnDevice(func(_ context.Context, cfg device.Config) (device.Device, error) {
		d, err := cpu.New(cpu.WithMemoryLimit(cfg.MemoryLimit), cpu.WithSparseGranule(64<<10))
		if err != nil {
			return nil, err
		}
		return d, nil
	})
}

// The pure-Go device with sparse residency (64 KiB granules, as on an
// H200) passes the sparse-binding check too: the suite's sparse rules run
// in CI, where lavapipe has no sparse binding.
func TestCPUDeviceWithSparseResidencyConforms(t *testing.T) {
	open := onSparseCPU()
	conformance.TestDevice(t, open)
	rep := conformance.RunDevice(context.Background(), open, conformance.Options{})
	require.Empty(t, rep.Failed())
	r, ok := rep.Result("storage/sparse-binding")
	require.True(t, ok)
	require.Equal(t, conformance.Pass, r.Status)
}

// The same device with the Virtual layout as the client's layout: every
// pool is one virtual range whose granules are bound as reservations need
// them, and the suite holds there too — a dry run reports the granules and
// chunks the real run binds and allocates (device/dryrun-fidelity) while
// holding none of them (device/dryrun-holds-nothing), and a plan measured
// from it fits the real run.
func TestCPUDeviceWithSparseResidencyConformsUnderTheVirtualLayout(t *testing.T) {
	onDevice := onSparseCPU()
	open := func(ctx context.Context, cfg conformance.DeviceConfig) (*client.Client, error) {
		cfg.Options = append(slices.Clone(cfg.Options), client.WithLayout(memory.VirtualLayout(memory.VirtualPlan{})))
		return onDevice(ctx, cfg)
	}
	cl, err := open(context.Background(), conformance.DeviceConfig{})
	require.NoError(t, err)
	_, virtual := cl.DefaultStream().Report().Dynamic[0].Kind.(memory.VirtualKind)
	require.NoError(t, cl.Close())
	require.True(t, virtual, "the client's pools are virtual on a device with sparse residency")
	conformance.TestDevice(t, open)
}
