package cpu_test

import (
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/vkrt/vkrt/device"
	"github.com/vkrt/vkrt/internal/cpuref"
	"github.com/vkrt/vkrt/internal/devtest"
	"github.com/vkrt/vkrt/kernel"
	vkruntime "github.com/vkrt/vkrt/runtime"
)

// openVulkan, set where the test binary links Vulkan in, opens the first
// Vulkan device (lavapipe where there is no GPU).
var openVulkan func(t *testing.T) device.Device

// onDevices runs f on the cpu device and, where Vulkan is linked in, on the
// first Vulkan device, so that both are held to the same semantics.
func onDevices(t *testing.T, f func(t *testing.T, d device.Device)) {
	t.Run("cpu", func(t *testing.T) { f(t, newDevice(t)) })
	if openVulkan != nil {
		t.Run("vulkan", func(t *testing.T) { f(t, openVulkan(t)) })
	}
}

func put(t *testing.T, d device.Device, v []float32) vkruntime.StorageHandle {
	t.Helper()
	h, err := d.Storage().Alloc(max(4, uint64(4*len(v))))
	require.NoError(t, err)
	h.Size = uint64(4 * len(v))
	require.NoError(t, d.Upload(t.Context(), h, cpuref.Bytes(v)))
	return h
}

func get(t *testing.T, d device.Device, h vkruntime.StorageHandle) []float32 {
	t.Helper()
	b := make([]byte, h.Size)
	require.NoError(t, d.Download(t.Context(), h, b))
	return cpuref.Floats(b)
}

// A catalogue kernel renamed, with the push constants of the kernel it is
// renamed to, is refused: checked by relu's rules (n=1: 4 B a binding) it
// would run transpose over 1 x 65536 floats, which panicked the cpu device
// and ran the shader 256 KiB past 4 B bindings.
func TestRenamedKernelsAreRefused(t *testing.T) {
	onDevices(t, func(t *testing.T, d device.Device) {
		k := kernel.ReLU(1).Kernel
		k.Name = "transpose"
		k.Push = kernel.Transpose(1, 1).Kernel.Push
		x, out := put(t, d, []float32{7}), put(t, d, []float32{0})
		op := kernel.Op{Kernel: k, Grid: [3]uint32{1, 1, 1}, Bindings: []vkruntime.StorageHandle{x, out}, Push: kernel.Transpose(1, 65536).Push}
		err := d.Dispatch(t.Context(), []kernel.Op{op})
		require.ErrorIs(t, err, kernel.ErrInvalidDispatch)
		require.ErrorContains(t, err, "not a kernel of the catalogue")
		require.Equal(t, []float32{0}, get(t, d, out))
	})
}

// Work groups run in no set order: an output that shares bytes with an
// input another work group reads is refused (a transpose in place came out
// right on the cpu device and wrong in 1024 of 4096 elements on lavapipe),
// and the exact in-place launches the kernels allow give the reference's
// results on every device.
func TestOverlappingOutputs(t *testing.T) {
	onDevices(t, func(t *testing.T, d device.Device) {
		const rows, cols = 64, 64
		x := ramp(rows*cols, 3)
		for i := range x {
			x[i] += float32(i) / 64
		}
		for _, c := range []struct {
			name string
			l    kernel.Launch
			bind func(h vkruntime.StorageHandle) []vkruntime.StorageHandle
		}{
			{"transpose in place", kernel.Transpose(rows, cols), func(h vkruntime.StorageHandle) []vkruntime.StorageHandle { return []vkruntime.StorageHandle{h, h} }},
			{"relu shifted by 64 words", kernel.ReLU(rows*cols - 256), func(h vkruntime.StorageHandle) []vkruntime.StorageHandle {
				return []vkruntime.StorageHandle{{ID: h.ID, Size: h.Size - 1024}, {ID: h.ID, Offset: 256, Size: h.Size - 1024}}
			}},
			{"matmul into a", kernel.MatMul(rows, cols, cols), func(h vkruntime.StorageHandle) []vkruntime.StorageHandle { return []vkruntime.StorageHandle{h, h, h} }},
		} {
			h := put(t, d, x)
			err := d.Dispatch(t.Context(), []kernel.Op{c.l.With(c.bind(h)...)})
			require.ErrorIs(t, err, kernel.ErrInvalidDispatch, c.name)
			require.ErrorContains(t, err, "share bytes", c.name)
			require.Equal(t, x, get(t, d, h), "%s: a refused launch changes nothing", c.name)
		}

		gamma, beta := ramp(cols, 1), ramp(cols, 0.5)
		for _, c := range []struct {
			l    kernel.Launch
			want []float32
			tol  float64
			more []vkruntime.StorageHandle
		}{
			{kernel.ReLU(rows * cols), cpuref.ReLU(x), 0, nil},
			{kernel.Scale(rows*cols, -1.5), cpuref.Scale(x, -1.5), 0, nil},
			{kernel.CopyWords(rows*cols - 3), x, 0, nil},
			{kernel.Softmax(rows, cols), cpuref.Softmax(x, rows, cols), 1e-6, nil},
			{kernel.LayerNorm(rows, cols, 1e-5), cpuref.LayerNorm(x, gamma, beta, rows, cols, 1e-5), 1e-5, []vkruntime.StorageHandle{put(t, d, gamma), put(t, d, beta)}},
		} {
			h := put(t, d, x)
			if c.l.Kernel.Name == "copy" {
				h.Size -= 12
			}
			hs := append(append([]vkruntime.StorageHandle{h}, c.more...), h)
			require.NoError(t, d.Dispatch(t.Context(), []kernel.Op{c.l.With(hs...)}), c.l.Kernel.Name)
			want := c.want[:h.Size/4]
			devtest.RequireClose(t, want, get(t, d, h), c.tol, c.l.Kernel.Name+" in place")
		}
	})
}

// A copy over 2049 x 2048 work groups (more than 2^30 invocations) wrapped
// the shader's index arithmetic: invocations near the end of the grid took
// an index three strides on, wrapped below n / 4, for one in range and
// copied 16-byte words about 16 GiB past both bindings. Such grids are
// refused on every device.
func TestCopyGridsThatWrapAreRefused(t *testing.T) {
	onDevices(t, func(t *testing.T, d device.Device) {
		const n = 1<<23 + 4
		src, dst := put(t, d, make([]float32, n)), put(t, d, make([]float32, n))
		l := kernel.CopyWords(n)
		l.Grid = [3]uint32{2049, 2048, 1}
		err := d.Dispatch(t.Context(), []kernel.Op{l.With(src, dst)})
		require.ErrorIs(t, err, kernel.ErrInvalidDispatch)
		require.ErrorContains(t, err, "past its bindings")
	})
}

// A refused batch is refused for its first op at fault, named, whichever
// check refuses it: vk checked every op's launch before any op's bindings,
// and the bindings of ops that run no work group before the others', so a
// binding released in op 0 came back as op 1's invalid grid, and a
// refused binding without its op, where the cpu device named op 0.
func TestRefusedBatchNamesItsFirstOpAtFault(t *testing.T) {
	onDevices(t, func(t *testing.T, d device.Device) {
		const n = 64
		x, out := put(t, d, make([]float32, n)), put(t, d, make([]float32, n))
		gone := put(t, d, make([]float32, n))
		d.Storage().Dealloc(gone.ID)
		past := out
		past.Size += 4096

		for _, c := range []struct {
			ops  []kernel.Op
			want error
			op   string
		}{
			{[]kernel.Op{kernel.ReLU(n).With(gone, out), kernel.ReLU(n+1).With(x, out)}, vkruntime.ErrNotFound, "op 0 of 2: "},
			{[]kernel.Op{kernel.ReLU(n).With(x, out), kernel.ReLU(n+1).With(x, out), kernel.ReLU(n).With(gone, out)}, kernel.ErrInvalidDispatch, "op 1 of 3: "},
			{[]kernel.Op{kernel.ReLU(n).With(x, past), kernel.ReLU(0).With(gone, gone)}, vkruntime.ErrOutOfRange, "op 0 of 2: "},
			{[]kernel.Op{kernel.ReLU(n).With(x, out), kernel.ReLU(0).With(gone, gone)}, vkruntime.ErrNotFound, "op 1 of 2: "},
			{[]kernel.Op{kernel.ReLU(n).With(x, out), kernel.ReLU(n).With(x, gone)}, vkruntime.ErrNotFound, "op 1 of 2: "},
		} {
			err := d.Dispatch(t.Context(), c.ops)
			require.ErrorIs(t, err, c.want)
			require.ErrorIs(t, err, device.ErrNothingRan)
			require.ErrorContains(t, err, c.op)
		}
	})
}

// A sparse bind on a device without sparse residency names a range that
// cannot be: not found, on every device. The cpu device's refusal matched
// no error kind where vk's matched runtime.ErrNotFound.
func TestBindWithoutSparseResidencyIsNotFound(t *testing.T) {
	onDevices(t, func(t *testing.T, d device.Device) {
		s, ok := d.Storage().(vkruntime.SparseStorage)
		if !ok || s.SparseGranule() != 0 {
			t.Skipf("%s has sparse residency", d.Name())
		}
		page := put(t, d, make([]float32, 16))
		for _, id := range []vkruntime.StorageID{page.ID, page.ID + 1<<40} {
			err := s.Bind(id, []vkruntime.SparseBind{{Size: 4096, Memory: page.ID}})
			require.ErrorIs(t, err, vkruntime.ErrNotFound)
			require.ErrorContains(t, err, "virtual range")
		}
	})
}

// A virtual range asked of a device without sparse residency is refused
// as unsupported, on every device, whatever the size; the refusals
// matched no error kind.
func TestReserveVirtualWithoutSparseResidencyIsUnsupported(t *testing.T) {
	onDevices(t, func(t *testing.T, d device.Device) {
		s, ok := d.Storage().(vkruntime.SparseStorage)
		if !ok || s.SparseGranule() != 0 {
			t.Skipf("%s has sparse residency", d.Name())
		}
		for _, size := range []uint64{1, 1 << 20} {
			_, err := s.ReserveVirtual(size)
			require.ErrorIs(t, err, vkruntime.ErrUnsupported)
			require.ErrorContains(t, err, "no sparse residency")
			require.NotErrorIs(t, err, vkruntime.ErrNotFound)
		}
	})
}
