package vk

import (
	"encoding/binary"
	"math"
	"slices"
	"testing"

	"github.com/stretchr/testify/require"

	vkruntime "github.com/vkrt/vkrt/runtime"
)

// spirvFacts reads a module's local size and descriptor bindings.
func spirvFacts(t *testing.T, code []byte) (local [3]uint32, bindings []uint32) {
	t.Helper()
	require.Zero(t, len(code)%4)
	words := make([]uint32, len(code)/4)
	for i := range words {
		words[i] = binary.LittleEndian.Uint32(code[4*i:])
	}
	require.Equal(t, uint32(0x07230203), words[0], "SPIR-V magic")
	for i := 5; i < len(words); {
		n, op := int(words[i]>>16), words[i]&0xffff
		require.NotZero(t, n)
		switch {
		case op == 16 && words[i+2] == 17: // OpExecutionMode LocalSize
			local = [3]uint32{words[i+3], words[i+4], words[i+5]}
		case op == 71 && words[i+2] == 33: // OpDecorate Binding
			if !slices.Contains(bindings, words[i+3]) {
				bindings = append(bindings, words[i+3])
			}
		}
		i += n
	}
	slices.Sort(bindings)
	return local, bindings
}

// The catalogue says what the compiled kernels are: work-group size and
// bindings 0..n-1, read from the SPIR-V itself.
func TestCatalogueDescribesTheSPIRV(t *testing.T) {
	ks := Kernels()
	names := make([]string, len(ks))
	for i, k := range ks {
		names[i] = k.Name
	}
	for _, want := range []string{"fill", "copy", "add", "mul", "scale", "relu", "gelu", "softmax", "layernorm", "reduce_sum", "matmul", "transpose"} {
		require.Contains(t, names, want)
	}
	require.True(t, slices.IsSorted(names))
	for _, k := range ks {
		code, err := k.SPIRV()
		require.NoError(t, err, k.Name)
		local, bindings := spirvFacts(t, code)
		require.Equal(t, k.WorkGroup, local, "%s: work-group size", k.Name)
		want := make([]uint32, len(k.Bindings))
		for i := range want {
			want[i] = uint32(i)
		}
		require.Equal(t, want, bindings, "%s: bindings", k.Name)
		require.NotEmpty(t, k.Doc)
		for i, f := range k.Push {
			require.Equal(t, uint32(4*i), f.Offset, "%s: push field %s", k.Name, f.Name)
		}
		found, err := KernelByName(k.Name)
		require.NoError(t, err)
		require.Equal(t, k.Name, found.Name)
	}
	_, err := KernelByName("conv2d")
	require.ErrorIs(t, err, vkruntime.ErrNotFound)
	require.ErrorContains(t, err, `no kernel "conv2d"`)
}

var testLimits = DispatchLimits{
	Alignment:                16,
	MaxStorageBufferRange:    1 << 20,
	MaxPushConstantsSize:     128,
	MaxComputeWorkGroupCount: [3]uint32{65535, 65535, 65535},
}

func handle(id vkruntime.StorageID, offset, size uint64) vkruntime.StorageHandle {
	return vkruntime.StorageHandle{ID: id, Offset: offset, Size: size}
}

// ValidateDispatch needs no device: the checks a dry run relies on.
func TestValidateDispatchWithoutADevice(t *testing.T) {
	add := Add(100)
	ok := []vkruntime.StorageHandle{handle(1, 0, 400), handle(1, 400, 400), handle(2, 16, 400)}
	require.NoError(t, ValidateDispatch(add.Kernel, add.Grid, ok, add.Push, testLimits))

	cases := []struct {
		name     string
		grid     [3]uint32
		bindings []vkruntime.StorageHandle
		push     []byte
		want     string
	}{
		{"too few bindings", add.Grid, ok[:2], add.Push, "2 bindings given, the kernel has 3 (a read f32, b read f32, out write f32)"},
		{"short push constants", add.Grid, ok, add.Push[:2], "2 B of push constants given, the kernel takes 4 B (n u32)"},
		{"binding too small", add.Grid, []vkruntime.StorageHandle{ok[0], handle(1, 400, 396), ok[2]}, add.Push,
			"binding 1 (b): storage 1 [400, 796) holds 396 B, the push constants {n=100} call for 400 B"},
		{"misaligned offset", add.Grid, []vkruntime.StorageHandle{handle(1, 4, 400), ok[1], ok[2]}, add.Push, "not a multiple of the device's 16 B alignment"},
		{"range past the device's", add.Grid, []vkruntime.StorageHandle{handle(1, 0, 2<<20), ok[1], ok[2]}, add.Push, "exceed the device's storage-buffer range"},
		{"grid past the device's", [3]uint32{70000, 1, 1}, ok, add.Push, "dimension 0 exceeds the device's 65535 work groups"},
		{"three-dimensional grid", [3]uint32{1, 1, 2}, ok, add.Push, "z must be 1"},
		{"overflowing handle", add.Grid, []vkruntime.StorageHandle{handle(1, math.MaxUint64-15, 400), ok[1], ok[2]}, add.Push, "overflows"},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			err := ValidateDispatch(add.Kernel, c.grid, c.bindings, c.push, testLimits)
			require.ErrorIs(t, err, ErrInvalidDispatch)
			var de *DispatchError
			require.ErrorAs(t, err, &de)
			require.Equal(t, "add", de.Kernel)
			require.ErrorContains(t, err, c.want)
		})
	}

	mm := MatMul(200, 300, 10)
	require.Equal(t, [3]uint32{3, 2, 1}, mm.Grid)
	mmBindings := []vkruntime.StorageHandle{handle(1, 0, 8000), handle(2, 0, 12000), handle(3, 0, 240000)}
	require.NoError(t, ValidateDispatch(mm.Kernel, mm.Grid, mmBindings, mm.Push, testLimits))
	err := ValidateDispatch(mm.Kernel, [3]uint32{2, 2, 1}, mmBindings, mm.Push, testLimits)
	require.ErrorContains(t, err, "needs at least (3, 2, 1)")

	// Hostile push constants cannot wrap the size arithmetic.
	huge := Softmax(math.MaxUint32, math.MaxUint32)
	err = ValidateDispatch(huge.Kernel, [3]uint32{1, 1, 1}, []vkruntime.StorageHandle{handle(1, 0, 16), handle(2, 0, 16)}, huge.Push, testLimits)
	require.ErrorIs(t, err, ErrInvalidDispatch)

	var foreign Kernel
	foreign.Name = "mine"
	require.ErrorContains(t, ValidateDispatch(foreign, [3]uint32{1, 1, 1}, nil, nil, testLimits), "not a kernel of the catalogue")
}

// Dispatch adds the storage's own checks; a refused dispatch changes nothing.
func TestDispatchChecksHandlesAndChangesNothingOnError(t *testing.T) {
	d := openTestDevice(t)
	const n = 64
	x := floatBuffer(t, d, pseudoRandom(n, 1, 1))
	out := floatBuffer(t, d, make([]float32, n))
	require.NoError(t, d.Fill(out, math.Float32bits(7)))

	gone := alloc(t, d, 4*n)
	d.Storage().Dealloc(gone.ID)
	err := d.Run(ReLU(n), gone, out)
	require.ErrorIs(t, err, vkruntime.ErrNotFound)

	page := d.Storage().pages[out.ID].size
	err = d.Run(ReLU(n), x, handle(out.ID, 0, page+16))
	require.ErrorContains(t, err, "outside its page")

	err = d.Run(ReLU(n+1), x, out)
	require.ErrorIs(t, err, ErrInvalidDispatch)

	err = d.DispatchBatch([]Op{ReLU(n).With(x, out), ReLU(n+4).With(x, out)})
	require.ErrorContains(t, err, "op 1 of 2")

	for i, v := range readFloats(t, d, out) {
		require.Equal(t, float32(7), v, "element %d untouched", i)
	}
	require.NoError(t, d.ValidateDispatch(ReLU(n).Kernel, ReLU(n).Grid, []vkruntime.StorageHandle{gone, out}, ReLU(n).Push),
		"ValidateDispatch does not look the handles up")
	d.Storage().Flush()
}
