//go:build cgo

package vk

import (
	"os"
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/vkrt/vkrt/internal/cpuref"
	"github.com/vkrt/vkrt/internal/devtest"
	"github.com/vkrt/vkrt/kernel"
	vkruntime "github.com/vkrt/vkrt/runtime"
)

// openTestDevice opens device 0 with the validation layer on; Close at the
// end of the test must report no validation error (leaks included). Without
// Vulkan the test is skipped, unless VKRT_REQUIRE_DEVICE=1 makes it fail.
func openTestDevice(t testing.TB, opts ...Option) *Device {
	t.Helper()
	d, err := Open(0, append([]Option{WithValidation(validationWanted())}, opts...)...)
	devtest.SkipUnavailable(t, err)
	t.Cleanup(func() { require.NoError(t, d.Close(), "closing the device: validation errors or leaks") })
	return d
}

// validationWanted: tests run under the validation layer unless
// VKRT_TEST_VALIDATION=0 (machines without the layer installed).
func validationWanted() bool { return os.Getenv("VKRT_TEST_VALIDATION") != "0" }

// transferModes runs f once on a device whose transfers map the memory
// (where the driver allows) and once on one that stages them.
func transferModes(t *testing.T, f func(t *testing.T, d *Device)) {
	t.Run("mapped", func(t *testing.T) { f(t, openTestDevice(t)) })
	t.Run("staged", func(t *testing.T) { f(t, openTestDevice(t, WithStagedTransfers())) })
}

func alloc(t testing.TB, d *Device, size uint64) vkruntime.StorageHandle {
	t.Helper()
	h, err := d.Storage().Alloc(size)
	require.NoError(t, err)
	return h
}

// floatBuffer allocates a page holding v (at least 4 bytes, so empty inputs
// still have a page) and returns the handle of exactly v's bytes.
func floatBuffer(t testing.TB, d *Device, v []float32) vkruntime.StorageHandle {
	t.Helper()
	h := alloc(t, d, max(4, uint64(4*len(v))))
	require.NoError(t, d.Zero(t.Context(), h))
	h.Size = uint64(4 * len(v))
	require.NoError(t, d.Upload(t.Context(), h, cpuref.Bytes(v)))
	return h
}

func readFloats(t testing.TB, d *Device, h vkruntime.StorageHandle) []float32 {
	t.Helper()
	b := make([]byte, h.Size)
	require.NoError(t, d.Download(t.Context(), h, b))
	return cpuref.Floats(b)
}

// pseudoRandom is a deterministic sequence in [-scale, scale).
func pseudoRandom(n int, seed uint32, scale float32) []float32 {
	v := make([]float32, n)
	x := seed*2654435761 + 1
	for i := range v {
		x ^= x << 13
		x ^= x >> 17
		x ^= x << 5
		v[i] = (float32(x%20001)/10000 - 1) * scale
	}
	return v
}

// run dispatches one typed launch with its bindings and waits for it.
func run(t testing.TB, d *Device, l kernel.Launch, bindings ...vkruntime.StorageHandle) error {
	t.Helper()
	return d.Dispatch(t.Context(), []kernel.Op{l.With(bindings...)})
}

// The kernel package's sizes the tests reach across: the work groups every
// device allows per dimension, the elementwise work group, the transpose tile.
const (
	portableGroups = 65535
	elementGroup   = 256
	transposeTile  = 32
)

func handle(id vkruntime.StorageID, offset, size uint64) vkruntime.StorageHandle {
	return vkruntime.StorageHandle{ID: id, Offset: offset, Size: size}
}
