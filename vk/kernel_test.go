//go:build cgo

package vk

import (
	"encoding/binary"
	"fmt"
	"math"
	"strings"
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/vkrt/vkrt/internal/cpuref"
	"github.com/vkrt/vkrt/internal/devtest"
	"github.com/vkrt/vkrt/kernel"
	vkruntime "github.com/vkrt/vkrt/runtime"
)

// Sizes around the 256-invocation work group: empty, one element, one short
// of and one past a work group, and a few work groups plus a ragged tail.
var elementSizes = []int{0, 1, 3, 255, 256, 257, 1000, 4099}

func TestElementwiseKernelsMatchTheCPU(t *testing.T) {
	d := openTestDevice(t)
	gelu := func(x float32) float32 { return cpuref.GELU([]float32{x})[0] }
	unary := []struct {
		name   string
		launch func(n uint32) kernel.Launch
		ref    func(float32) float32
	}{
		{"relu", kernel.ReLU, func(x float32) float32 { return max(x, 0) }},
		{"gelu", kernel.GELU, gelu},
		{"scale", func(n uint32) kernel.Launch { return kernel.Scale(n, -2.5) }, func(x float32) float32 { return -2.5 * x }},
	}
	binaryOps := []struct {
		name   string
		launch func(n uint32) kernel.Launch
		ref    func(a, b float32) float32
	}{
		{"add", kernel.Add, func(a, b float32) float32 { return a + b }},
		{"mul", kernel.Mul, func(a, b float32) float32 { return a * b }},
	}
	for _, n := range elementSizes {
		x := pseudoRandom(n, uint32(n)+1, 6)
		y := pseudoRandom(n, uint32(n)+2, 3)
		xh, yh := floatBuffer(t, d, x), floatBuffer(t, d, y)
		for _, op := range unary {
			t.Run(fmt.Sprintf("%s/%d", op.name, n), func(t *testing.T) {
				out := floatBuffer(t, d, make([]float32, n))
				require.NoError(t, run(t, d, op.launch(uint32(n)), xh, out))
				want := make([]float32, n)
				for i := range want {
					want[i] = op.ref(x[i])
				}
				devtest.RequireClose(t, want, readFloats(t, d, out), 1e-5, op.name)
			})
		}
		for _, op := range binaryOps {
			t.Run(fmt.Sprintf("%s/%d", op.name, n), func(t *testing.T) {
				out := floatBuffer(t, d, make([]float32, n))
				require.NoError(t, run(t, d, op.launch(uint32(n)), xh, yh, out))
				want := make([]float32, n)
				for i := range want {
					want[i] = op.ref(x[i], y[i])
				}
				devtest.RequireClose(t, want, readFloats(t, d, out), 0, op.name)
			})
		}
	}
}

func TestFillAndCopyKernels(t *testing.T) {
	d := openTestDevice(t)
	for _, n := range append(elementSizes, 5, 6, 7, 1023) {
		t.Run(fmt.Sprint(n), func(t *testing.T) {
			// One guard word after each output shows the kernel stops at n.
			dst := floatBuffer(t, d, make([]float32, n+1))
			body := vkruntime.StorageHandle{ID: dst.ID, Size: uint64(4 * n)}
			require.NoError(t, run(t, d, kernel.FillWords(uint32(n), math.Float32bits(1.5)), body))
			got := readFloats(t, d, dst)
			for i := range n {
				require.Equal(t, float32(1.5), got[i], "fill element %d", i)
			}
			require.Zero(t, got[n], "fill wrote past n")

			src := pseudoRandom(n, 77, 100)
			sh := floatBuffer(t, d, src)
			copyDst := floatBuffer(t, d, make([]float32, n+1))
			require.NoError(t, run(t, d, kernel.CopyWords(uint32(n)), sh, vkruntime.StorageHandle{ID: copyDst.ID, Size: uint64(4 * n)}))
			got = readFloats(t, d, copyDst)
			require.Equal(t, src, got[:n])
			require.Zero(t, got[n], "copy wrote past n")
		})
	}
}

// Element counts past 65535 work groups spill into the grid's y dimension.
func TestElementGridSpillsIntoY(t *testing.T) {
	d := openTestDevice(t)
	n := uint32(portableGroups*elementGroup + 1000)
	grid := kernel.ElementGrid(uint64(n))
	require.Equal(t, [3]uint32{portableGroups, 2, 1}, grid)
	h := alloc(t, d, uint64(4*n))
	require.NoError(t, d.Zero(t.Context(), h))
	require.NoError(t, run(t, d, kernel.FillWords(n, 0xdeadbeef), h))
	for _, i := range []uint32{0, portableGroups*elementGroup - 1, portableGroups * elementGroup, n - 1} {
		w := make([]byte, 4)
		require.NoError(t, d.Download(t.Context(), vkruntime.StorageHandle{ID: h.ID, Offset: uint64(4 * i), Size: 4}, w))
		require.Equal(t, uint32(0xdeadbeef), binary.LittleEndian.Uint32(w), "word %d", i)
	}
}

var rowShapes = [][2]int{{0, 5}, {1, 1}, {1, 255}, {3, 257}, {5, 1000}, {2, 3}, {7, 64}}

func TestSoftmaxAndLayerNormMatchTheCPU(t *testing.T) {
	d := openTestDevice(t)
	for _, shape := range rowShapes {
		rows, cols := shape[0], shape[1]
		x := pseudoRandom(rows*cols, uint32(rows*cols)+5, 8)
		xh := floatBuffer(t, d, x)
		t.Run(fmt.Sprintf("softmax/%dx%d", rows, cols), func(t *testing.T) {
			out := floatBuffer(t, d, make([]float32, rows*cols))
			require.NoError(t, run(t, d, kernel.Softmax(uint32(rows), uint32(cols)), xh, out))
			devtest.RequireClose(t, cpuref.Softmax(x, rows, cols), readFloats(t, d, out), 1e-5, "softmax")
		})
		t.Run(fmt.Sprintf("layernorm/%dx%d", rows, cols), func(t *testing.T) {
			gamma := pseudoRandom(cols, 11, 2)
			beta := pseudoRandom(cols, 12, 1)
			out := floatBuffer(t, d, make([]float32, rows*cols))
			require.NoError(t, run(t, d, kernel.LayerNorm(uint32(rows), uint32(cols), 1e-5),
				xh, floatBuffer(t, d, gamma), floatBuffer(t, d, beta), out))
			devtest.RequireClose(t, cpuref.LayerNorm(x, gamma, beta, rows, cols, 1e-5), readFloats(t, d, out), 1e-4, "layernorm")
		})
	}
}

func TestReduceSumMatchesTheCPU(t *testing.T) {
	d := openTestDevice(t)
	for _, n := range elementSizes {
		t.Run(fmt.Sprint(n), func(t *testing.T) {
			x := pseudoRandom(n, uint32(n)+9, 4)
			var want float64
			for _, v := range x {
				want += float64(v)
			}
			out := floatBuffer(t, d, []float32{123})
			require.NoError(t, run(t, d, kernel.ReduceSum(uint32(n)), floatBuffer(t, d, x), out))
			got := readFloats(t, d, out)[0]
			require.InDelta(t, want, float64(got), 1e-4*math.Max(1, float64(n)))
		})
	}
	// A grid of several work groups leaves one partial sum per group.
	x := pseudoRandom(3000, 3, 1)
	out := floatBuffer(t, d, make([]float32, 4))
	l := kernel.ReduceSum(3000)
	l.Grid = [3]uint32{4, 1, 1}
	require.NoError(t, run(t, d, l, floatBuffer(t, d, x), out))
	var want, got float64
	for _, v := range x {
		want += float64(v)
	}
	for _, v := range readFloats(t, d, out) {
		got += float64(v)
	}
	require.InDelta(t, want, got, 1e-3)
}

func TestMatMulMatchesTheCPU(t *testing.T) {
	d := openTestDevice(t)
	for _, s := range [][3]int{{1, 1, 1}, {0, 4, 4}, {4, 0, 4}, {3, 5, 0}, {2, 3, 4}, {130, 67, 129}, {33, 257, 9}, {128, 128, 16}, {1, 300, 17}, {130, 260, 36}, {67, 132, 20}, {256, 8, 8}} {
		m, n, k := s[0], s[1], s[2]
		t.Run(fmt.Sprintf("%dx%dx%d", m, n, k), func(t *testing.T) {
			a := pseudoRandom(m*k, uint32(m*k)+1, 1)
			b := pseudoRandom(k*n, uint32(k*n)+2, 1)
			c := floatBuffer(t, d, pseudoRandom(m*n, 99, 5)) // not zero: the kernel must overwrite it
			require.NoError(t, run(t, d, kernel.MatMul(uint32(m), uint32(n), uint32(k)), floatBuffer(t, d, a), floatBuffer(t, d, b), c))
			devtest.RequireClose(t, cpuref.MatMul(a, b, m, n, k), readFloats(t, d, c), 1e-5*float64(max(k, 1)), "matmul")
		})
	}
}

// A work group takes matmul's output tiles with the grid's stride: a grid
// of fewer work groups than tiles gives the same product.
func TestMatMulTakesTilesWithTheGridsStride(t *testing.T) {
	d := openTestDevice(t)
	m, n, k := 300, 260, 12
	a, b := pseudoRandom(m*k, 5, 1), pseudoRandom(k*n, 6, 1)
	for _, grid := range [][3]uint32{{1, 1, 1}, {2, 1, 1}, {1, 2, 1}, {3, 3, 1}} {
		c := floatBuffer(t, d, pseudoRandom(m*n, 7, 5))
		l := kernel.MatMul(uint32(m), uint32(n), uint32(k))
		l.Grid = grid
		require.NoError(t, run(t, d, l, floatBuffer(t, d, a), floatBuffer(t, d, b), c), "grid %v", grid)
		devtest.RequireClose(t, cpuref.MatMul(a, b, m, n, k), readFloats(t, d, c), 1e-5*float64(k), fmt.Sprintf("matmul on grid %v", grid))
	}
}

// A product of more than 65,535 tiles in a row (N past 8,388,480, which no
// grid holds at one work group a tile) runs, some work groups taking two.
func TestMatMulPastTheGridsTiles(t *testing.T) {
	if testing.Short() {
		t.Skip("16.8 million invocations: seconds on lavapipe")
	}
	d := openTestDevice(t)
	wide := 1<<23 + 300 // 65,538 tiles of 128 columns
	row := pseudoRandom(wide, 8, 1)
	l := kernel.MatMul(1, uint32(wide), 1)
	require.Equal(t, [3]uint32{65535, 1, 1}, l.Grid)
	c := floatBuffer(t, d, make([]float32, wide))
	require.NoError(t, run(t, d, l, floatBuffer(t, d, []float32{2}), floatBuffer(t, d, row), c))
	got := readFloats(t, d, c)
	for i, v := range row {
		if got[i] != 2*v {
			t.Fatalf("column %d of %d: %v, want %v", i, wide, got[i], 2*v)
		}
	}
}

// A batch runs in order, each op seeing the one before: relu(a + b) * 2.
func TestBatchOrdersItsOps(t *testing.T) {
	d := openTestDevice(t)
	const n = 1001
	a, b := pseudoRandom(n, 1, 1), pseudoRandom(n, 2, 1)
	ah, bh := floatBuffer(t, d, a), floatBuffer(t, d, b)
	sum, act, out := floatBuffer(t, d, make([]float32, n)), floatBuffer(t, d, make([]float32, n)), floatBuffer(t, d, make([]float32, n))
	require.NoError(t, d.Dispatch(t.Context(), []kernel.Op{
		kernel.Add(n).With(ah, bh, sum),
		kernel.ReLU(n).With(sum, act),
		kernel.Scale(n, 2).With(act, out),
	}))
	want := make([]float32, n)
	for i := range want {
		want[i] = 2 * max(a[i]+b[i], 0)
	}
	devtest.RequireClose(t, want, readFloats(t, d, out), 0, "batch")
}

// kernel.Kernels loop with the grid's stride, so grids smaller than the data are
// correct too (the copy then keeps four loads in flight per invocation).
func TestSmallGridsCoverAllElements(t *testing.T) {
	d := openTestDevice(t)
	const n = 5003
	src := pseudoRandom(n, 5, 10)
	sh := floatBuffer(t, d, src)
	for _, grid := range [][3]uint32{{1, 1, 1}, {3, 1, 1}, {2, 2, 1}} {
		t.Run(fmt.Sprint(grid), func(t *testing.T) {
			dst := floatBuffer(t, d, make([]float32, n+1))
			body := vkruntime.StorageHandle{ID: dst.ID, Size: 4 * n}
			cp := kernel.CopyWords(n)
			cp.Grid = grid
			require.NoError(t, run(t, d, cp, sh, body))
			got := readFloats(t, d, dst)
			require.Equal(t, src, got[:n])
			require.Zero(t, got[n])

			relu := kernel.ReLU(n)
			relu.Grid = grid
			require.NoError(t, run(t, d, relu, sh, body))
			got = readFloats(t, d, dst)
			for i := range n {
				require.Equal(t, max(src[i], 0), got[i], "relu element %d", i)
			}
		})
	}
}

// Several goroutines dispatch at once: each submission has its own command
// buffer, fence and descriptors.
func TestConcurrentDispatches(t *testing.T) {
	d := openTestDevice(t)
	const n, workers = 777, 6
	errs := make(chan error, workers)
	outs := make([]vkruntime.StorageHandle, workers)
	ins := make([][]float32, workers)
	for w := range workers {
		ins[w] = pseudoRandom(n, uint32(w)+40, 3)
		outs[w] = floatBuffer(t, d, make([]float32, n))
	}
	handles := make([]vkruntime.StorageHandle, workers)
	for w := range workers {
		handles[w] = floatBuffer(t, d, ins[w])
	}
	for w := range workers {
		go func() {
			for range 10 {
				if err := d.Dispatch(t.Context(), []kernel.Op{kernel.Scale(n, float32(w)).With(handles[w], outs[w]), kernel.ReLU(n).With(outs[w], outs[w])}); err != nil {
					errs <- err
					return
				}
			}
			errs <- nil
		}()
	}
	for range workers {
		require.NoError(t, <-errs)
	}
	for w := range workers {
		want := make([]float32, n)
		for i, x := range ins[w] {
			want[i] = max(float32(w)*x, 0)
		}
		devtest.RequireClose(t, want, readFloats(t, d, outs[w]), 0, fmt.Sprintf("worker %d", w))
	}
}

// On lavapipe a shader leaves its loops after 65,535 iterations, so a
// ReduceSum of 2^24 elements by its one work group would sum part of
// them: it is refused there, while one of 2^23 sums all. A device without
// the limit runs both.
func TestLoopsPastTheDevicesLimitAreRefused(t *testing.T) {
	d := openTestDevice(t)
	ones := func(n int) vkruntime.StorageHandle {
		x := make([]float32, n)
		for i := range x {
			x[i] = 1
		}
		return floatBuffer(t, d, x)
	}
	for _, n := range []int{1 << 23, 1 << 24} {
		out := floatBuffer(t, d, []float32{0})
		err := run(t, d, kernel.ReduceSum(uint32(n)), ones(n), out)
		if limit := d.Limits().MaxLoopIterations; limit != 0 && kernel.LoopTrips(kernel.ReduceSum(uint32(n)).Kernel, [3]uint32{1, 1, 1}, kernel.ReduceSum(uint32(n)).Push) > limit {
			require.ErrorIs(t, err, kernel.ErrInvalidDispatch, "%d elements", n)
			require.ErrorContains(t, err, "loop iterations")
			require.Equal(t, []float32{0}, readFloats(t, d, out), "a refused launch writes nothing")
			continue
		}
		require.NoError(t, err)
		require.Equal(t, []float32{float32(n)}, readFloats(t, d, out), "%d ones", n)
	}
	if strings.Contains(d.Name(), "llvmpipe") {
		require.EqualValues(t, 65535, d.Limits().MaxLoopIterations)
	}
}

// A tall transpose by a small grid leaves each invocation thousands of
// tiles: lavapipe cut one of 894,535 x 1 by a (39, 6) grid, which the
// estimate must refuse there; elsewhere it transposes all of it.
func TestTallTransposePastTheLoopLimitIsRefused(t *testing.T) {
	d := openTestDevice(t)
	const rows, cols = 894535, 1
	x := pseudoRandom(rows*cols, 11, 1)
	out := floatBuffer(t, d, make([]float32, rows*cols))
	l := kernel.Transpose(rows, cols)
	l.Grid = [3]uint32{39, 6, 1}
	err := run(t, d, l, floatBuffer(t, d, x), out)
	if d.Limits().MaxLoopIterations != 0 && err != nil {
		require.ErrorIs(t, err, kernel.ErrInvalidDispatch)
		return
	}
	require.NoError(t, err)
	require.Equal(t, x, readFloats(t, d, out), "a rows x 1 matrix transposes to itself")
}
