package kernel

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
	ks := All()
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
		found, err := ByName(k.Name)
		require.NoError(t, err)
		require.Equal(t, k.Name, found.Name)
	}
	_, err := ByName("conv2d")
	require.ErrorIs(t, err, vkruntime.ErrNotFound)
	require.ErrorContains(t, err, `no kernel "conv2d"`)
}

var testLimits = Limits{
	Alignment:                16,
	MaxStorageBufferRange:    1 << 20,
	MaxPushConstantsSize:     128,
	MaxComputeWorkGroupCount: [3]uint32{65535, 65535, 65535},
}

func handle(id vkruntime.StorageID, offset, size uint64) vkruntime.StorageHandle {
	return vkruntime.StorageHandle{ID: id, Offset: offset, Size: size}
}

// Validate needs no device: the checks a dry run relies on.
func TestValidateDispatchWithoutADevice(t *testing.T) {
	add := Add(100)
	ok := []vkruntime.StorageHandle{handle(1, 0, 400), handle(1, 400, 400), handle(2, 16, 400)}
	require.NoError(t, Validate(add.Kernel, add.Grid, ok, add.Push, testLimits))

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
			err := Validate(add.Kernel, c.grid, c.bindings, c.push, testLimits)
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
	require.NoError(t, Validate(mm.Kernel, mm.Grid, mmBindings, mm.Push, testLimits))
	err := Validate(mm.Kernel, [3]uint32{2, 2, 1}, mmBindings, mm.Push, testLimits)
	require.ErrorContains(t, err, "needs at least (3, 2, 1)")

	// Hostile push constants cannot wrap the size arithmetic.
	huge := Softmax(math.MaxUint32, math.MaxUint32)
	err = Validate(huge.Kernel, [3]uint32{1, 1, 1}, []vkruntime.StorageHandle{handle(1, 0, 16), handle(2, 0, 16)}, huge.Push, testLimits)
	require.ErrorIs(t, err, ErrInvalidDispatch)

	var foreign Kernel
	foreign.Name = "mine"
	require.ErrorContains(t, Validate(foreign, [3]uint32{1, 1, 1}, nil, nil, testLimits), "not a kernel of the catalogue")
}

func TestTransposeRefusesWhatItCannotRun(t *testing.T) {
	l := Transpose(40, 50)
	words := func(n uint64) vkruntime.StorageHandle { return vkruntime.StorageHandle{Size: 4 * n} }

	err := Validate(l.Kernel, l.Grid, []vkruntime.StorageHandle{words(2000), words(1999)}, l.Push, testLimits)
	require.ErrorIs(t, err, ErrInvalidDispatch)
	require.ErrorContains(t, err, "binding 1 (out)")
	require.ErrorContains(t, err, "call for 8000 B")

	err = Validate(l.Kernel, [3]uint32{0, 1, 1}, []vkruntime.StorageHandle{words(2000), words(2000)}, l.Push, testLimits)
	require.ErrorIs(t, err, ErrInvalidDispatch)
	require.ErrorContains(t, err, "runs no work group over the 40 x 50 input")

	// An empty matrix needs no work group at all.
	empty := Transpose(0, 50)
	require.Equal(t, uint32(0), empty.Grid[1])
	require.NoError(t, Validate(empty.Kernel, empty.Grid, []vkruntime.StorageHandle{{}, {}}, empty.Push, testLimits))
}
