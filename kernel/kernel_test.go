package kernel

import (
	"encoding/binary"
	"fmt"
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
	// A work group takes output tiles with the grid's stride: a grid of
	// fewer work groups than tiles is correct, each looping over more.
	require.NoError(t, Validate(mm.Kernel, [3]uint32{2, 2, 1}, mmBindings, mm.Push, testLimits))
	require.EqualValues(t, 2*(2+2*(2+2)), LoopTrips(mm.Kernel, [3]uint32{2, 1, 1}, mm.Push), "2 rows of 2 tiles a work group, of the 2 x 3 tiles, K = 10 in 2 steps")
	require.Equal(t, [3]uint32{65535, 1, 1}, MatMul(1, 1<<23+1, 1).Grid, "past 65535 tiles the grid stops there")
	err := Validate(mm.Kernel, [3]uint32{0, 2, 1}, mmBindings, mm.Push, testLimits)
	require.ErrorContains(t, err, "runs no work group")

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
	require.ErrorContains(t, err, "runs no work group (a dimension is 0), which leaves the work the push constants {rows=40 cols=50} call for undone")

	// An empty matrix needs no work group at all.
	empty := Transpose(0, 50)
	require.Equal(t, uint32(0), empty.Grid[1])
	require.NoError(t, Validate(empty.Kernel, empty.Grid, []vkruntime.StorageHandle{{}, {}}, empty.Push, testLimits))
}

// wideLimits are a device's whose bindings reach 4 GiB and whose grids
// reach 65535 work groups a dimension, as the cpu device's.
var wideLimits = Limits{
	Alignment:                16,
	MaxStorageBufferRange:    1<<32 - 1,
	MaxPushConstantsSize:     128,
	MaxComputeWorkGroupCount: [3]uint32{65535, 65535, 65535},
}

// requireRefused checks err is a classified refusal of kernel name that
// says what.
func requireRefused(t *testing.T, err error, name, what string) {
	t.Helper()
	require.ErrorIs(t, err, ErrInvalidDispatch)
	var de *DispatchError
	require.ErrorAs(t, err, &de)
	require.Equal(t, name, de.Kernel)
	require.ErrorContains(t, err, what)
}

// A kernel of the catalogue renamed, or given other bindings or push
// constants, is not checked by the rules of the kernel it was copied from:
// the devices would run the shader its name picks.
func TestValidateRefusesAlteredKernels(t *testing.T) {
	words := func(id vkruntime.StorageID, n uint64) vkruntime.StorageHandle { return handle(id, 0, 4*n) }
	// relu's sizes (n=1: 4 B a binding) under transpose's name and push
	// constants rows=1, cols=65536: the transpose shader would read and
	// write 256 KiB of 4 B bindings.
	renamed := ReLU(1).Kernel
	renamed.Name = "transpose"
	renamed.Push = Transpose(1, 1).Kernel.Push
	push := pack(1, 65536)
	requireRefused(t, Validate(renamed, [3]uint32{1, 1, 1}, []vkruntime.StorageHandle{words(1, 1), words(2, 1)}, push, testLimits),
		"transpose", "not a kernel of the catalogue")

	fewer := Add(4)
	fewer.Kernel.Bindings = fewer.Kernel.Bindings[:2]
	requireRefused(t, Validate(fewer.Kernel, fewer.Grid, []vkruntime.StorageHandle{words(1, 4), words(2, 4)}, fewer.Push, testLimits),
		"add", "not a kernel of the catalogue")

	wider := Scale(4, 2)
	wider.Kernel.Push = append(slices.Clone(wider.Kernel.Push), PushField{Name: "pad", Type: "u32", Offset: 8})
	requireRefused(t, Validate(wider.Kernel, wider.Grid, []vkruntime.StorageHandle{words(1, 4), words(2, 4)}, append(slices.Clone(wider.Push), 0, 0, 0, 0), testLimits),
		"scale", "not a kernel of the catalogue")

	// The kernels as the catalogue has them pass.
	for _, k := range All() {
		found, err := ByName(k.Name)
		require.NoError(t, err)
		require.True(t, sameKernel(&k, &found))
	}
	require.NoError(t, Validate(ReLU(1).Kernel, ReLU(1).Grid, []vkruntime.StorageHandle{words(1, 1), words(2, 1)}, ReLU(1).Push, testLimits))
}

// The shaders index with 32-bit unsigned integers, and a grid can wrap
// them: a step of 2^32 wraps to 0 and loops forever, the copy's unrolled
// step runs past its bindings, and elements (or rows) are taken twice, which
// reduce_sum sums twice and a kernel in place computes on its own output
// unless it is idempotent. Such grids are refused, however small the
// bindings; a grid that only writes some elements twice with the same
// value is not.
func TestValidateRefusesGridsThatWrapTheShadersIndices(t *testing.T) {
	words := func(id vkruntime.StorageID, n uint64) vkruntime.StorageHandle { return handle(id, 0, 4*n) }
	same := func(n uint64) []vkruntime.StorageHandle { return []vkruntime.StorageHandle{words(1, n), words(1, n)} }
	// A device with NVIDIA's limits: 2^31 - 1 work groups in x.
	wideX := wideLimits
	wideX.MaxComputeWorkGroupCount[0] = 1<<31 - 1
	const huge = 65535
	cases := []struct {
		name   string
		l      Launch
		grid   [3]uint32
		hs     []vkruntime.StorageHandle
		limits Limits
		want   string
	}{
		// 2048 x 2049 groups: 3 strides past an invocation near the end of
		// the grid wrap to an index below n / 4, so that invocation copies
		// 16-byte words about 16 GiB past both bindings.
		{"copy past its bindings", CopyWords(1<<23 + 4), [3]uint32{2049, 2048, 1}, []vkruntime.StorageHandle{words(1, 1<<23+4), words(2, 1<<23+4)}, wideLimits, "past its bindings"},
		{"copy of a few words", CopyWords(5), [3]uint32{huge, huge, 1}, []vkruntime.StorageHandle{words(1, 5), words(2, 5)}, wideLimits, "past its bindings"},
		// 4096 x 4096 groups of 256: a stride of 2^32, which wraps to 0.
		{"fill looping forever", FillWords(1, 7), [3]uint32{4096, 4096, 1}, []vkruntime.StorageHandle{words(1, 1)}, wideLimits, "loop forever"},
		{"relu looping forever", ReLU(10), [3]uint32{1 << 24, 1, 1}, []vkruntime.StorageHandle{words(1, 10), words(2, 10)}, wideX, "loop forever"},
		{"softmax looping forever", Softmax(1, 1), [3]uint32{1 << 30, 4, 1}, []vkruntime.StorageHandle{words(1, 1), words(2, 1)}, wideX, "loop forever"},
		// Groups g and g + 2^24 both sum the first block.
		{"reduce_sum twice", ReduceSum(256), [3]uint32{huge, 257, 1}, []vkruntime.StorageHandle{words(1, 256), words(2, huge*257)}, wideLimits, "summed twice"},
		// 256 invocations scale element 0 in turn.
		{"scale in place", Scale(1, 2), [3]uint32{huge, huge, 1}, same(1), wideLimits, "takes some elements twice"},
		{"add in place", Add(1000), [3]uint32{huge, huge, 1}, []vkruntime.StorageHandle{words(1, 1000), words(2, 1000), words(1, 1000)}, wideLimits, "takes some elements twice"},
		// Rows past 131071 wrap back onto earlier ones, which a second work
		// group then normalises again.
		{"softmax in place", Softmax(200000, 1), [3]uint32{huge, huge, 1}, same(200000), wideLimits, "takes some elements twice"},
		{"layernorm in place", LayerNorm(200000, 1, 1e-5), [3]uint32{huge, huge, 1},
			[]vkruntime.StorageHandle{words(1, 200000), words(2, 1), words(3, 1), words(1, 200000)}, wideLimits, "takes some elements twice"},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			requireRefused(t, Validate(c.l.Kernel, c.grid, c.hs, c.l.Push, c.limits), c.l.Kernel.Name, c.want)
		})
	}

	accepted := []struct {
		name string
		l    Launch
		grid [3]uint32
		hs   []vkruntime.StorageHandle
	}{
		{"an empty fill", FillWords(0, 7), [3]uint32{4096, 4096, 1}, []vkruntime.StorageHandle{{}}},
		// Elements taken twice are written twice with the same value.
		{"relu apart", ReLU(1000), [3]uint32{huge, huge, 1}, []vkruntime.StorageHandle{words(1, 1000), words(2, 1000)}},
		{"relu in place", ReLU(1), [3]uint32{huge, huge, 1}, same(1)},
		{"fill", FillWords(1000, 7), [3]uint32{huge, huge, 1}, []vkruntime.StorageHandle{words(1, 1000)}},
		{"softmax apart", Softmax(200000, 1), [3]uint32{huge, huge, 1}, []vkruntime.StorageHandle{words(1, 200000), words(2, 200000)}},
		{"scale in place on a grid that does not wrap", Scale(1000, 2), [3]uint32{huge, 256, 1}, same(1000)},
	}
	for _, c := range accepted {
		t.Run(c.name, func(t *testing.T) {
			require.NoError(t, Validate(c.l.Kernel, c.grid, c.hs, c.l.Push, wideLimits))
		})
	}

	// A device that allows 2^32 - 1 work groups in x and y: grids whose
	// invocation count passes 2^64. 2^28 x 2^28 groups of 256 is a step of
	// 2^64, which wrapped to 0 in the check and passed as no step at all,
	// and with a loop limit divided the elements by 0 (a panic).
	widest := wideLimits
	widest.MaxComputeWorkGroupCount = [3]uint32{math.MaxUint32, math.MaxUint32, 1}
	looping := widest
	looping.MaxLoopIterations = 65535
	for _, limits := range []Limits{widest, looping} {
		fill := FillWords(1, 7)
		requireRefused(t, Validate(fill.Kernel, [3]uint32{1 << 28, 1 << 28, 1}, []vkruntime.StorageHandle{words(1, 1)}, fill.Push, limits), "fill", "loop forever")
		scale := Scale(1, 2)
		requireRefused(t, Validate(scale.Kernel, [3]uint32{math.MaxUint32, math.MaxUint32, 1}, same(1), scale.Push, limits), "scale", "takes some elements twice")
	}
	// Loop trips of such grids are counted, not divided by a wrapped 0.
	require.Equal(t, uint64(1+1+9), LoopTrips(FillWords(1, 7).Kernel, [3]uint32{1 << 28, 1 << 28, 1}, FillWords(1, 7).Push))
	require.Equal(t, uint64(1+1+9), LoopTrips(FillWords(1, 7).Kernel, [3]uint32{1 << 22, 1 << 22, 1 << 22}, FillWords(1, 7).Push))

	// The typed launches of the largest bindings pass, in place too.
	const most = (1<<32 - 1) / 4 // words in a 4 GiB binding
	big := func(id vkruntime.StorageID) vkruntime.StorageHandle { return words(id, most) }
	for _, l := range []Launch{Add(most), CopyWords(most), FillWords(most, 1), GELU(most), ReduceSum(most), Softmax(most, 1)} {
		hs := []vkruntime.StorageHandle{big(1), big(1), big(1)}[:len(l.Kernel.Bindings)]
		if l.Kernel.Name == "reduce_sum" {
			hs[1] = words(2, 1)
		}
		require.NoError(t, Validate(l.Kernel, l.Grid, hs, l.Push, wideLimits), l.Kernel.Name)
	}
	// ElementGrid covers a 4 GiB copy with more than 2^22 work groups,
	// which would wrap; CopyWords' grid does not.
	copyAll := CopyWords(most)
	requireRefused(t, Validate(copyAll.Kernel, ElementGrid(most), []vkruntime.StorageHandle{big(1), big(2)}, copyAll.Push, wideLimits), "copy", "past its bindings")
}

// Work groups run in no set order: a written binding may share bytes with
// another only where the kernel reads each element in the invocation that
// writes it, and then only exactly (same storage, same offset).
func TestValidateRefusesOverlappingOutputs(t *testing.T) {
	at := func(id vkruntime.StorageID, offset, n uint64) vkruntime.StorageHandle { return handle(id, offset, 4*n) }
	refused := []struct {
		name string
		l    Launch
		hs   []vkruntime.StorageHandle
	}{
		{"transpose in place", Transpose(64, 64), []vkruntime.StorageHandle{at(1, 0, 4096), at(1, 0, 4096)}},
		{"transpose into the input's tail", Transpose(64, 64), []vkruntime.StorageHandle{at(1, 0, 4096), at(1, 8192, 4096)}},
		{"matmul into a", MatMul(16, 16, 16), []vkruntime.StorageHandle{at(1, 0, 256), at(2, 0, 256), at(1, 0, 256)}},
		{"matmul into b", MatMul(16, 16, 16), []vkruntime.StorageHandle{at(1, 0, 256), at(2, 0, 256), at(2, 0, 256)}},
		{"reduce_sum into x", ReduceSum(1000), []vkruntime.StorageHandle{at(1, 0, 1000), at(1, 16, 1)}},
		{"layernorm into gamma", LayerNorm(4, 64, 1e-5), []vkruntime.StorageHandle{at(1, 0, 256), at(2, 0, 64), at(3, 0, 64), at(2, 0, 256)}},
		{"relu shifted by 16 B", ReLU(1000), []vkruntime.StorageHandle{at(1, 0, 1000), at(1, 16, 1000)}},
		{"relu shifted back", ReLU(1000), []vkruntime.StorageHandle{at(1, 16, 1000), at(1, 0, 1000)}},
		{"copy shifted", CopyWords(1000), []vkruntime.StorageHandle{at(1, 0, 1000), at(1, 256, 1000)}},
		{"softmax shifted by a row", Softmax(4, 64), []vkruntime.StorageHandle{at(1, 0, 256), at(1, 256, 256)}},
	}
	for _, c := range refused {
		t.Run(c.name, func(t *testing.T) {
			requireRefused(t, Validate(c.l.Kernel, c.l.Grid, c.hs, c.l.Push, testLimits), c.l.Kernel.Name, "share bytes")
		})
	}
	accepted := []struct {
		name string
		l    Launch
		hs   []vkruntime.StorageHandle
	}{
		{"relu in place", ReLU(1000), []vkruntime.StorageHandle{at(1, 0, 1000), at(1, 0, 1000)}},
		{"add into a and b", Add(1000), []vkruntime.StorageHandle{at(1, 0, 1000), at(1, 0, 1000), at(1, 0, 1000)}},
		{"copy onto itself", CopyWords(1000), []vkruntime.StorageHandle{at(1, 0, 1000), at(1, 0, 1000)}},
		{"softmax in place", Softmax(4, 64), []vkruntime.StorageHandle{at(1, 0, 256), at(1, 0, 256)}},
		{"layernorm in place", LayerNorm(4, 64, 1e-5), []vkruntime.StorageHandle{at(1, 0, 256), at(2, 0, 64), at(2, 256, 64), at(1, 0, 256)}},
		{"transpose into the same page", Transpose(64, 64), []vkruntime.StorageHandle{at(1, 0, 4096), at(1, 4*4096, 4096)}},
		// A binding larger than its kernel needs: the bytes past what the
		// push constants call for are not touched.
		{"matmul beside a in one handle's slack", MatMul(16, 16, 16), []vkruntime.StorageHandle{at(1, 0, 1024), at(2, 0, 256), at(1, 1024, 256)}},
		{"empty output", Transpose(0, 64), []vkruntime.StorageHandle{at(1, 0, 0), at(1, 0, 0)}},
		// Sizes alone, as a check before storage exists.
		{"storage 0", MatMul(16, 16, 16), []vkruntime.StorageHandle{at(0, 0, 256), at(0, 0, 256), at(0, 0, 256)}},
	}
	for _, c := range accepted {
		t.Run(c.name, func(t *testing.T) {
			require.NoError(t, Validate(c.l.Kernel, c.l.Grid, c.hs, c.l.Push, testLimits))
		})
	}
}

// A grid of no layer in z runs no work group, which leaves the output of
// matmul and transpose undone as surely as one of no column does.
func TestValidateRefusesFlatGridsWhereWorkIsDue(t *testing.T) {
	words := func(id vkruntime.StorageID, n uint64) vkruntime.StorageHandle { return handle(id, 0, 4*n) }
	mm := MatMul(200, 300, 10)
	requireRefused(t, Validate(mm.Kernel, [3]uint32{3, 2, 0}, []vkruntime.StorageHandle{words(1, 2000), words(2, 3000), words(3, 60000)}, mm.Push, testLimits),
		"matmul", "undone")
	tr := Transpose(40, 50)
	requireRefused(t, Validate(tr.Kernel, [3]uint32{2, 2, 0}, []vkruntime.StorageHandle{words(1, 2000), words(2, 2000)}, tr.Push, testLimits),
		"transpose", "runs no work group")
}

// LoopTrips bounds what one invocation loops over, and Validate refuses a
// launch past a device's MaxLoopIterations, naming both.
func TestValidateRefusesLoopsPastTheDevicesLimit(t *testing.T) {
	l := ReduceSum(1 << 24)
	require.EqualValues(t, 1<<24/256+10, LoopTrips(l.Kernel, l.Grid, l.Push))
	wide := l
	wide.Grid = [3]uint32{4, 1, 1}
	require.EqualValues(t, 1<<22/256+10, LoopTrips(wide.Kernel, wide.Grid, wide.Push))
	require.Zero(t, LoopTrips(l.Kernel, [3]uint32{0, 1, 1}, l.Push), "no work group, no loop")

	limits := Limits{Alignment: 4, MaxStorageBufferRange: 1 << 32, MaxPushConstantsSize: 128,
		MaxComputeWorkGroupCount: [3]uint32{65535, 65535, 65535}, MaxLoopIterations: 65535}
	bindings := []vkruntime.StorageHandle{{ID: 1, Size: 4 << 24}, {ID: 2, Size: 16}}
	err := Validate(l.Kernel, l.Grid, bindings, l.Push, limits)
	require.ErrorIs(t, err, ErrInvalidDispatch)
	require.ErrorContains(t, err, "65546 loop iterations")
	require.NoError(t, Validate(wide.Kernel, wide.Grid, bindings, wide.Push, limits))
	limits.MaxLoopIterations = 0
	require.NoError(t, Validate(l.Kernel, l.Grid, bindings, l.Push, limits), "no limit, no refusal")
}

// One rule for every kernel of the catalogue: a launch with no work (no
// element, row or output value to compute) succeeds on any grid within the
// limits, and a grid that runs no work group (a dimension of 0) is refused
// for a launch with work, whose output it would leave unwritten.
func TestEmptyLaunchesPassAndGridsOfNoWorkGroupWithWorkAreRefused(t *testing.T) {
	empty := []Launch{FillWords(0, 7), CopyWords(0), Add(0), Mul(0), Scale(0, 2), ReLU(0), GELU(0),
		Softmax(0, 4), Softmax(4, 0), LayerNorm(0, 4, 1e-5), LayerNorm(4, 0, 1e-5), ReduceSum(0),
		MatMul(0, 4, 4), MatMul(4, 0, 4), Transpose(0, 4), Transpose(4, 0)}
	work := []Launch{FillWords(10, 7), CopyWords(10), Add(10), Mul(10), Scale(10, 2), ReLU(10), GELU(10),
		Softmax(4, 4), LayerNorm(4, 4, 1e-5), ReduceSum(10), MatMul(4, 4, 4), MatMul(4, 4, 0), Transpose(4, 4)}
	var names []string
	for _, k := range All() {
		names = append(names, k.Name)
	}
	for _, ls := range [][]Launch{empty, work} {
		var covered []string
		for _, l := range ls {
			if !slices.Contains(covered, l.Kernel.Name) {
				covered = append(covered, l.Kernel.Name)
			}
		}
		require.ElementsMatch(t, names, covered, "every kernel is checked")
	}
	// Bindings apart, of the bytes the launch needs on the grid.
	bindings := func(l Launch, grid [3]uint32) []vkruntime.StorageHandle {
		sizes := BindingSizes(l.Kernel, grid, l.Push)
		hs := make([]vkruntime.StorageHandle, len(sizes))
		for i, n := range sizes {
			hs[i] = handle(vkruntime.StorageID(i+1), 0, max(n, 16))
		}
		return hs
	}
	noGroup := [][3]uint32{{0, 1, 1}, {1, 0, 1}, {1, 1, 0}, {0, 0, 0}}
	for _, l := range empty {
		for _, grid := range append([][3]uint32{l.Grid, {1, 1, 1}, {7, 3, 1}}, noGroup...) {
			require.NoError(t, Validate(l.Kernel, grid, bindings(l, grid), l.Push, testLimits), "%s %s on grid %v", l.Kernel.Name, pushString(l.Kernel, l.Push), grid)
		}
	}
	for _, l := range work {
		require.NoError(t, Validate(l.Kernel, l.Grid, bindings(l, l.Grid), l.Push, testLimits), l.Kernel.Name)
		for _, grid := range noGroup {
			err := Validate(l.Kernel, grid, bindings(l, grid), l.Push, testLimits)
			requireRefused(t, err, l.Kernel.Name, "runs no work group")
			require.ErrorContains(t, err, "undone")
		}
	}
}

// An empty launch has no output for a device that ends a shader's loops
// early to leave unwritten, so the loop limit does not refuse it: a softmax
// of 2^20 rows of no column on one work group (23,068,672 loop iterations
// by LoopTrips), a transpose of 2^20 x 0 and a matmul of M = 0 or N = 0
// with K = 2^24 were refused on lavapipe's limits, though the package
// documentation says an empty launch succeeds on any grid.
func TestEmptyLaunchesPassTheLoopLimit(t *testing.T) {
	limits := testLimits
	limits.MaxStorageBufferRange = 1 << 32
	limits.MaxLoopIterations = 65535
	one := [3]uint32{1, 1, 1}
	for _, l := range []Launch{Softmax(1<<20, 0), LayerNorm(1<<20, 0, 1e-5), Transpose(1<<20, 0), MatMul(0, 0, 1<<24), MatMul(0, 4, 1<<24), MatMul(4, 0, 1<<24)} {
		// matmul's loops run over output tiles, of which there are none
		// when M or N is 0; LoopTrips counts them so.
		if l.Kernel.Name != "matmul" {
			require.Greater(t, LoopTrips(l.Kernel, one, l.Push), limits.MaxLoopIterations, "%s %s", l.Kernel.Name, pushString(l.Kernel, l.Push))
		}
		sizes := BindingSizes(l.Kernel, one, l.Push)
		hs := make([]vkruntime.StorageHandle, len(sizes))
		for i, n := range sizes {
			hs[i] = handle(vkruntime.StorageID(i+1), 0, max(n, 16))
		}
		require.NoError(t, Validate(l.Kernel, one, hs, l.Push, limits), "%s %s", l.Kernel.Name, pushString(l.Kernel, l.Push))
	}
	// A launch with work past the limit is still refused.
	l := Softmax(1<<12, 1)
	hs := []vkruntime.StorageHandle{handle(1, 0, 4<<12), handle(2, 0, 4<<12)}
	requireRefused(t, Validate(l.Kernel, one, hs, l.Push, limits), "softmax", "loop iterations")
}

// Push constants are counted in full: 4 GiB + 12 B of them passed as
// matmul's 12 B, their length cut to 32 bits, in Validate and in
// BindingSizes alike.
func TestPushConstantsPastFourGiBAreRefused(t *testing.T) {
	size := uint64(1)<<32 + 12
	if size > math.MaxInt {
		t.Skip("int is 32 bits")
	}
	mm := MatMul(4, 4, 4)
	push := make([]byte, int(size)) // untouched past its first page
	copy(push, mm.Push)
	hs := []vkruntime.StorageHandle{handle(1, 0, 64), handle(2, 0, 64), handle(3, 0, 64)}
	requireRefused(t, Validate(mm.Kernel, mm.Grid, hs, push, testLimits), "matmul", "B of push constants given")
	require.Nil(t, BindingSizes(mm.Kernel, mm.Grid, push))
}

// The grid helpers give grids every device allows: past 65535 x 65535 work
// groups RowGrid spilled 65536 or more into y, so Softmax(2^32 - 1, 0), an
// empty launch, came with grid (65535, 65537, 1) and was refused, and
// ElementGrid's rounding wrapped to no work group past 2^64 - 256 elements.
func TestGridHelpersFitEveryDevice(t *testing.T) {
	for _, groups := range []uint64{1, portableGroups, portableGroups + 1, portableGroups * portableGroups, portableGroups*portableGroups + 1, math.MaxUint32, math.MaxUint64} {
		grid := RowGrid(groups)
		require.LessOrEqual(t, grid[0], uint32(portableGroups), "RowGrid(%d)", groups)
		require.LessOrEqual(t, grid[1], uint32(portableGroups), "RowGrid(%d)", groups)
		require.GreaterOrEqual(t, uint64(grid[0])*uint64(grid[1]), min(groups, portableGroups*portableGroups), "RowGrid(%d)", groups)
	}
	for _, n := range []uint64{1, math.MaxUint32, math.MaxUint64 - 255, math.MaxUint64} {
		grid := ElementGrid(n)
		require.NotZero(t, grid[0], "ElementGrid(%d)", n)
		require.LessOrEqual(t, grid[1], uint32(portableGroups), "ElementGrid(%d)", n)
	}
	require.Equal(t, [3]uint32{portableGroups, 257, 1}, ElementGrid(math.MaxUint32), "as before up to 2^32 elements")
	for _, l := range []Launch{Softmax(math.MaxUint32, 0), LayerNorm(math.MaxUint32, 0, 1e-5)} {
		hs := make([]vkruntime.StorageHandle, len(l.Kernel.Bindings))
		require.NoError(t, Validate(l.Kernel, l.Grid, hs, l.Push, testLimits), "%s %s on %v", l.Kernel.Name, pushString(l.Kernel, l.Push), l.Grid)
	}
}

// The typed launches' grids keep every work group they run busy, as far as
// RowGrid's spill into y allows, so CheckIdleGroups passes them at every
// size, up to the 32-bit push constants' largest.
func TestTypedLaunchesPassTheIdleGroupCheck(t *testing.T) {
	sizes := []uint32{1, 2, 255, 256, 257, 4096, 65535, 65536, 256*65535 + 1, 1 << 24, 1<<32 - 1}
	for _, n := range sizes {
		for _, l := range []Launch{FillWords(n, 7), CopyWords(n), Add(n), Mul(n), Scale(n, 2), ReLU(n), GELU(n), ReduceSum(n)} {
			require.NoError(t, CheckIdleGroups(l.Kernel, l.Grid, l.Push), "%s(%d), grid %v", l.Kernel.Name, n, l.Grid)
		}
		for _, m := range []uint32{1, 3, 200} {
			for _, l := range []Launch{Softmax(n, m), LayerNorm(n, m, 1e-5), Softmax(m, n), MatMul(n, m, 5), MatMul(m, n, 0), Transpose(n, m), Transpose(m, n)} {
				require.NoError(t, CheckIdleGroups(l.Kernel, l.Grid, l.Push), "%s %s, grid %v", l.Kernel.Name, pushString(l.Kernel, l.Push), l.Grid)
			}
		}
	}
}

// A grid of more work groups than the launch keeps busy is refused by
// CheckIdleGroups (not by Validate, whose contract takes any grid), with
// the counts; an empty launch passes on any grid.
func TestAGridOfIdleWorkGroupsIsRefused(t *testing.T) {
	for _, c := range []struct {
		l    Launch
		grid [3]uint32
		busy uint64
	}{
		{FillWords(1, 7), [3]uint32{65535, 1024, 1}, 1},
		{FillWords(257, 7), [3]uint32{3, 1, 1}, 2},
		{ReduceSum(1), [3]uint32{2, 1, 1}, 1},
		{Softmax(4, 8), [3]uint32{5, 1, 1}, 4},
		{MatMul(128, 129, 3), [3]uint32{2, 2, 1}, 2},
		{Transpose(32, 32), [3]uint32{1, 2, 1}, 1},
	} {
		require.Equal(t, c.busy, BusyGroups(c.l.Kernel, c.l.Push), c.l.Kernel.Name)
		err := CheckIdleGroups(c.l.Kernel, c.grid, c.l.Push)
		require.ErrorIs(t, err, ErrInvalidDispatch, "%s on grid %v", c.l.Kernel.Name, c.grid)
		require.ErrorContains(t, err, fmt.Sprintf("runs %d work groups, and at most %d of them find work", groups(c.grid), c.busy))
	}
	for _, l := range []Launch{FillWords(0, 7), Softmax(5, 0), MatMul(0, 9, 9), Transpose(9, 0)} {
		require.Zero(t, BusyGroups(l.Kernel, l.Push), l.Kernel.Name)
		require.True(t, NoOp(l.Kernel, [3]uint32{65535, 65535, 1}, l.Push), l.Kernel.Name)
		require.NoError(t, CheckIdleGroups(l.Kernel, [3]uint32{65535, 65535, 1}, l.Push), "%s: an empty launch passes on any grid", l.Kernel.Name)
	}
	// reduce_sum of no element is run, not a no-op: its groups write their
	// sums of nothing, and a grid past one group's held the device idle.
	empty := ReduceSum(0)
	require.NoError(t, CheckIdleGroups(empty.Kernel, empty.Grid, empty.Push))
	err := CheckIdleGroups(empty.Kernel, [3]uint32{32768, 32, 1}, empty.Push)
	require.ErrorIs(t, err, ErrInvalidDispatch)
	require.ErrorContains(t, err, "runs 1048576 work groups, and at most 1 of them find work")
	// Push constants not of the kernel's size are Validate's to refuse.
	require.NoError(t, CheckIdleGroups(FillWords(1, 7).Kernel, [3]uint32{65535, 65535, 1}, []byte{1}))
}

// An empty launch writes nothing, so a device need not run it, but for
// reduce_sum's sums of no element; a grid with a dimension of 0 runs no
// work group at all.
func TestNoOpLaunches(t *testing.T) {
	big := [3]uint32{65535, 65535, 1}
	require.True(t, NoOp(FillWords(0, 7).Kernel, big, FillWords(0, 7).Push))
	require.True(t, NoOp(MatMul(0, 4, 4).Kernel, big, MatMul(0, 4, 4).Push))
	require.False(t, NoOp(MatMul(4, 4, 0).Kernel, big, MatMul(4, 4, 0).Push), "K = 0 writes M x N zeros")
	require.False(t, NoOp(ReduceSum(0).Kernel, big, ReduceSum(0).Push), "reduce_sum writes each group's sum of nothing")
	require.False(t, NoOp(FillWords(1, 7).Kernel, [3]uint32{1, 1, 1}, FillWords(1, 7).Push))
	require.True(t, NoOp(FillWords(1, 7).Kernel, [3]uint32{1, 0, 1}, FillWords(1, 7).Push))
}

// Cost is the larger of the invocations a grid runs and the launch's
// arithmetic, saturating.
func TestCostCountsInvocationsAndArithmetic(t *testing.T) {
	fill := FillWords(1000, 0)
	require.Equal(t, uint64(1024), Cost(fill.Kernel, fill.Grid, fill.Push), "4 groups of 256 invocations for 1000 elements")
	mm := MatMul(128, 64, 32)
	require.Equal(t, uint64(128*64*32), Cost(mm.Kernel, mm.Grid, mm.Push), "M x N x K multiply-adds on one tile's 256 invocations")
	noK := MatMul(128, 64, 0)
	require.Equal(t, uint64(128*64), Cost(noK.Kernel, noK.Grid, noK.Push), "K = 0 still writes M x N zeros")
	idle := ReLU(1)
	require.Equal(t, uint64(65535*16*256), Cost(idle.Kernel, [3]uint32{65535, 16, 1}, idle.Push), "idle work groups cost their invocations")
	huge := MatMul(math.MaxUint32, math.MaxUint32, math.MaxUint32)
	require.Equal(t, uint64(math.MaxUint64), Cost(huge.Kernel, huge.Grid, huge.Push), "saturates")
	sm := Softmax(100, 300)
	require.Equal(t, uint64(100*300), Cost(sm.Kernel, sm.Grid, sm.Push), "rows x cols")
	odd := Kernel{Name: "unknown", WorkGroup: [3]uint32{64, 1, 1}}
	require.Equal(t, uint64(3*64), Cost(odd, [3]uint32{3, 1, 1}, nil), "a kernel not of the catalogue costs its invocations")
}

// The kernels ByName, All and the typed launches hand out are the
// caller's own: changing one's bindings or push constants leaves the
// catalogue, which Validate checks every launch by, as it was. They shared
// its arrays, so marking transpose's out as read made Validate pass a
// transpose in place, which gives wrong results.
func TestHandedOutKernelsAreTheCallersOwn(t *testing.T) {
	h := vkruntime.StorageHandle{ID: 1, Size: 4096}
	inPlace := func() error {
		l := Transpose(32, 32)
		return Validate(l.Kernel, l.Grid, []vkruntime.StorageHandle{h, h}, l.Push, testLimits)
	}
	require.ErrorIs(t, inPlace(), ErrInvalidDispatch)
	k, err := ByName("transpose")
	require.NoError(t, err)
	k.Bindings[1].Access = "read"
	k.Push[0].Name = "changed"
	for _, k := range All() {
		k.Bindings[len(k.Bindings)-1].Access = "read"
	}
	Transpose(32, 32).Kernel.Bindings[1].Access = "read"
	require.ErrorIs(t, inPlace(), ErrInvalidDispatch, "a caller's copy changed the catalogue")
	for _, k := range All() {
		require.Equal(t, "write", k.Bindings[len(k.Bindings)-1].Access, "%s", k.Name)
		require.NotEqual(t, "changed", k.Push[0].Name, "%s", k.Name)
	}
}

// CheckIdleGroups of a kernel built by hand, with the catalogue's name and
// push size but push fields of its own, refuses an idle grid as it does
// the catalogue's kernel: it read the push constants by the hand-built
// fields for its message, and one past the push constants panicked.
func TestCheckIdleGroupsOfAHandBuiltKernelDoesNotPanic(t *testing.T) {
	l := FillWords(1, 0)
	k := l.Kernel
	k.Push = []PushField{{Name: "n", Type: "u32", Offset: 4096}, {Name: "value", Type: "f32", Offset: 4}}
	grid := [3]uint32{1000, 1, 1}
	want := CheckIdleGroups(l.Kernel, grid, l.Push)
	require.ErrorIs(t, want, ErrInvalidDispatch)
	var got error
	require.NotPanics(t, func() { got = CheckIdleGroups(k, grid, l.Push) })
	require.Equal(t, want, got)
}

// OwnOps's copy shares nothing with the ops it copies, nor one op's slices
// with another's.
func TestOwnOpsSharesNothing(t *testing.T) {
	// What a device reads of an op (Kernel holds functions, which do not
	// compare).
	type seen struct {
		name     string
		grid     [3]uint32
		bindings []vkruntime.StorageHandle
		push     []byte
		kernel   []Binding
		fields   []PushField
	}
	see := func(o OwnedOps) []seen {
		s := make([]seen, o.Len())
		for i := range s {
			op := o.Op(i)
			s[i] = seen{op.Kernel.Name, op.Grid, op.Bindings, op.Push, op.Kernel.Bindings, op.Kernel.Push}
		}
		return s
	}
	a, b := vkruntime.StorageHandle{ID: 1, Size: 64}, vkruntime.StorageHandle{ID: 2, Size: 64}
	renamed := FillWords(16, 7)
	renamed.Kernel.Name = "copy"
	fresh := func() []Op {
		return []Op{FillWords(16, 7).With(a), CopyWords(16).With(a, b), FillWords(16, 7).With(b), renamed.With(a)}
	}
	ops := fresh()
	own := OwnOps(ops)
	want := see(OwnOps(fresh()))
	require.Equal(t, want, see(own))
	require.Equal(t, "fill", want[0].name)
	require.Equal(t, renamed.Kernel.Bindings, want[3].kernel, "a kernel not of the catalogue is kept as it is")

	ops[0].Bindings[0].Offset = 256
	ops[0].Push[4] = 9
	ops[1].Kernel.Bindings[1].Access = "read"
	ops[1].Kernel.Push[0].Offset = 4
	ops[1].Grid[0] = 7
	ops[2].Kernel = renamed.Kernel
	ops[3].Kernel.Bindings[0].Access = "read"
	require.Equal(t, want, see(own))

	first := own.Op(0)
	first.Bindings = append(first.Bindings, b)
	first.Push = append(first.Push, 1)
	first.Kernel.Bindings = append(first.Kernel.Bindings, Binding{})
	first.Kernel.Push = append(first.Kernel.Push, PushField{})
	require.Equal(t, want, see(own), "appending to one op's slices leaves the others'")
	require.Zero(t, OwnOps(nil).Len())
}
