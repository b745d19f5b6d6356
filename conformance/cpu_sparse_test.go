package conformance_test

import (
	"context"
	"errors"
	"regexp"
	"slices"
	"strings"
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/vkrt/vkrt/client"
	"github.com/vkrt/vkrt/conformance"
	"github.com/vkrt/vkrt/device"
	"github.com/vkrt/vkrt/device/cpu"
	"github.com/vkrt/vkrt/memory"
	vkruntime "github.com/vkrt/vkrt/runtime"
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

// sparseClosedDevice is the sparse pure-Go device whose storage answers
// ReserveVirtual and Bind after Close with plain errors: the device's own
// calls stay classified, so only the sparse part of the rule is broken.
type sparseClosedDevice struct{ *cpu.Device }

type sparseClosedStorage struct{ *cpu.Storage }

func (d sparseClosedDevice) Storage() device.Storage {
	return sparseClosedStorage{d.Device.Storage().(*cpu.Storage)}
}

func plainClosed(err error) error {
	if errors.Is(err, vkruntime.ErrClosed) {
		return errors.New(err.Error())
	}
	return err
}

func (s sparseClosedStorage) ReserveVirtual(size uint64) (vkruntime.StorageHandle, error) {
	h, err := s.Storage.ReserveVirtual(size)
	return h, plainClosed(err)
}

func (s sparseClosedStorage) Bind(virtual vkruntime.StorageID, binds []vkruntime.SparseBind) error {
	return plainClosed(s.Storage.Bind(virtual, binds))
}

// The closed-device check reaches a sparse storage's own calls: plain
// errors from ReserveVirtual and Bind after Close are caught, each named.
func TestSparseStorageUnclassifiedAfterCloseIsCaught(t *testing.T) {
	open := conformance.OnDevice(func(_ context.Context, cfg device.Config) (device.Device, error) {
		d, err := cpu.New(cpu.WithMemoryLimit(cfg.MemoryLimit), cpu.WithSparseGranule(64<<10))
		if err != nil {
			return nil, err
		}
		return sparseClosedDevice{d}, nil
	})
	rep := conformance.RunDevice(context.Background(), open, conformance.Options{Run: regexp.MustCompile(`^device/closed-classified$`)})
	r, ok := rep.Result("device/closed-classified")
	require.True(t, ok)
	require.Equal(t, conformance.Fail, r.Status)
	evidence := strings.Join(r.Evidence, "\n")
	require.Contains(t, evidence, "ReserveVirtual(65536) after Close")
	require.Contains(t, evidence, "Bind of an unbinding")
	require.NotContains(t, evidence, "Upload")
	require.Len(t, r.Evidence, 2, "the device's own calls are classified")
}
