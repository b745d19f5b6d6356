package conformance

import (
	"fmt"
	"math"
	"slices"

	"github.com/vkrt/vkrt/client"
	"github.com/vkrt/vkrt/internal/cpuref"
	"github.com/vkrt/vkrt/kernel"
)

// floats is n deterministic values in [-2, 2).
func floats(n uint32, seed uint64) []float32 {
	b := pattern(seed, 4*uint64(n))
	v := make([]float32, n)
	for i := range v {
		w := uint32(b[4*i]) | uint32(b[4*i+1])<<8 | uint32(b[4*i+2])<<16
		v[i] = float32(w)/float32(1<<22) - 2
	}
	return v
}

func bytesOf(v []float32) []byte  { return cpuref.Bytes(v) }
func floatsOf(b []byte) []float32 { return cpuref.Floats(b) }

// closeFloats reports the elements of got further than tol (relative past
// magnitude 1) from want: their count and the first. An infinity wanted is
// wanted exactly (the difference of two was NaN, and passed).
func closeFloats(c *checkState, want, got []float32, tol float64, what string) {
	if len(got) != len(want) {
		c.Errorf("%s: %d values, want %d", what, len(got), len(want))
		return
	}
	bad, first := 0, -1
	for i := range want {
		w, g := float64(want[i]), float64(got[i])
		if math.IsNaN(g) || (math.IsInf(w, 0) && g != w) || math.Abs(w-g) > tol*math.Max(1, math.Abs(w)) {
			if first < 0 {
				first = i
			}
			bad++
		}
	}
	if bad > 0 {
		c.Errorf("%s: %d of %d values off by more than %g, the first at %d (want %g, got %g)", what, bad, len(want), tol, first, want[first], got[first])
	}
}

// kernelCase runs one launch on fresh buffers holding inputs and an output
// of outLen floats, and compares the output with want. Buffers of the
// output's size made just before and after it (beside it in the pools, as
// a run's neighbouring buffers are) and the inputs keep their bytes: a
// kernel writes its output only.
func kernelCase(c *checkState, cl *client.Client, what string, l kernel.Launch, inputs [][]float32, outLen int, want []float32, tol float64) {
	// A case whose buffers a device's largest allocation cannot hold is
	// not one for that device (the larger sizes are for the others).
	largest := 4 * uint64(max(outLen, 1))
	for _, in := range inputs {
		largest = max(largest, 4*uint64(len(in)))
	}
	if p := cl.Properties().MaxPageSize; p != 0 && largest > p {
		return
	}
	ctx := c.Context()
	var bufs []*client.Buffer
	defer func() { freeAll(c, bufs) }()
	// kept are the buffers the kernel must leave as they were, with their
	// bytes and what they are.
	type keptBuffer struct {
		b          *client.Buffer
		data       []byte
		what, role string
	}
	var kept []keptBuffer
	create := func(data []byte, what string) *client.Buffer {
		b, err := cl.Create(ctx, data)
		if err != nil {
			c.Errorf("%s: %v", what, err)
			return nil
		}
		bufs = append(bufs, b)
		return b
	}
	keep := func(data []byte, what, role string) *client.Buffer {
		b := create(data, what)
		if b != nil {
			kept = append(kept, keptBuffer{b, data, what, role})
		}
		return b
	}
	var bindings []*client.Buffer
	for _, in := range inputs {
		data := bytesOf(in)
		if len(in) == 0 {
			data = make([]byte, 4)
		}
		b := keep(data, fmt.Sprintf("%s: an input of %d floats", what, len(in)), "an input")
		if b == nil {
			return
		}
		bindings = append(bindings, b)
	}
	size := uint32(max(outLen, 1))
	if keep(bytesOf(floats(size, 78)), what+": the buffer before the output", "a buffer beside the output") == nil {
		return
	}
	// The output starts dirty: the kernel must write every element.
	out := create(bytesOf(floats(size, 77)), fmt.Sprintf("%s: an output of %d floats", what, outLen))
	if out == nil {
		return
	}
	if keep(bytesOf(floats(size, 79)), what+": the buffer after the output", "a buffer beside the output") == nil {
		return
	}
	if err := cl.Run(ctx, l, append(bindings, out)...); err != nil {
		c.Errorf("%s: %v", what, err)
		return
	}
	got, err := out.Read(ctx)
	if err != nil {
		c.Errorf("%s: reading the output: %v", what, err)
		return
	}
	closeFloats(c, want, floatsOf(got)[:outLen], tol, what)
	for _, k := range kept {
		now, err := k.b.Read(ctx)
		if err != nil {
			c.Errorf("%s: reading it back: %v", k.what, err)
			continue
		}
		compareBytes(c, k.data, now, fmt.Sprintf("%s: %s, which the kernel must not write,", what, k.role))
	}
}

// elementSizes are around the 256-invocation work group, and past the
// 65536 elements of 256 work groups (a kernel wrong only past 4099
// elements passed).
var elementSizes = []uint32{1, 3, 255, 257, 1000, 4099, 65537}

// Every element kernel is also run over a grid of two dimensions it is
// given (grid2D), grid2DElements elements striding over it more than three
// times: a device whose kernel (add alone, say) ignored the grid's y passed
// every size above, whose grids have one row. The sizes stop short of the
// 65535 work groups of 256 that one row holds, past which ElementGrid
// takes two rows: a case there (16,777,960 elements, 64 MiB a buffer)
// added 1.1–3 s a kernel to the suite on lavapipe, and kept one pass under
// the race detector running for over nine minutes.
var grid2D = [3]uint32{2, 3, 1}

const grid2DElements = 3*2*3*256 + 77

// onGrid is l over grid.
func onGrid(l kernel.Launch, grid [3]uint32) kernel.Launch {
	l.Grid = grid
	return l
}

type kernelCheck struct {
	kernel string
	rule   string
	run    func(c *checkState, cl *client.Client)
}

func unaryCase(l func(n uint32) kernel.Launch, ref func([]float32) []float32, tol float64) func(c *checkState, cl *client.Client) {
	return func(c *checkState, cl *client.Client) {
		for _, n := range elementSizes {
			x := floats(n, uint64(n))
			kernelCase(c, cl, fmt.Sprintf("n=%d", n), l(n), [][]float32{x}, int(n), ref(x), tol)
		}
		x := floats(grid2DElements, 2)
		kernelCase(c, cl, fmt.Sprintf("n=%d over grid %v", grid2DElements, grid2D), onGrid(l(grid2DElements), grid2D),
			[][]float32{x}, grid2DElements, ref(x), tol)
	}
}

// binaryCase checks an exact element kernel at every size, and on
// operands whose results overflow or are infinite, signed zeros among them
// (none is subnormal, which a device may flush, or NaN, which it need not
// keep): with every operand in [-2, 2), a device turning infinities into
// the largest float passed.
func binaryCase(l func(n uint32) kernel.Launch, ref func(a, b float32) float32) func(c *checkState, cl *client.Client) {
	return func(c *checkState, cl *client.Client) {
		runOn := func(what string, launch func(n uint32) kernel.Launch, a, b []float32) {
			want := make([]float32, len(a))
			for i := range want {
				want[i] = ref(a[i], b[i])
			}
			n := uint32(len(a))
			kernelCase(c, cl, what, launch(n), [][]float32{a, b}, int(n), want, 0)
		}
		run := func(what string, a, b []float32) { runOn(what, l, a, b) }
		for _, n := range elementSizes {
			run(fmt.Sprintf("n=%d", n), floats(n, uint64(n)), floats(n, uint64(n)+1))
		}
		runOn(fmt.Sprintf("n=%d over grid %v", grid2DElements, grid2D), func(n uint32) kernel.Launch { return onGrid(l(n), grid2D) },
			floats(grid2DElements, 3), floats(grid2DElements, 4))
		inf := float32(math.Inf(1))
		run("infinities and overflow",
			[]float32{3e38, -3e38, inf, -inf, 1.5, float32(math.Copysign(0, -1)), 1e-10, 2, inf},
			[]float32{3e38, 2, 1, 2, -1.5, 0, 1e-10, -0.5, 3})
	}
}

func kernelCatalogueChecks() []kernelCheck {
	return []kernelCheck{
		{"fill", "fill sets exactly n 32-bit words to the value at every n, over grids of one row of work groups and of two", func(c *checkState, cl *client.Client) {
			for _, n := range elementSizes {
				v := float32(-1.25) + float32(n)
				want := make([]float32, n)
				for i := range want {
					want[i] = v
				}
				kernelCase(c, cl, fmt.Sprintf("n=%d", n), kernel.FillWords(n, math.Float32bits(v)), nil, int(n), want, 0)
			}
			want := make([]float32, grid2DElements)
			for i := range want {
				want[i] = 6.5
			}
			kernelCase(c, cl, fmt.Sprintf("n=%d over grid %v", grid2DElements, grid2D),
				onGrid(kernel.FillWords(grid2DElements, math.Float32bits(6.5)), grid2D), nil, grid2DElements, want, 0)
		}},
		{"copy", "copy moves exactly n 32-bit words at every n, over grids of one row of work groups and of two", unaryCase(kernel.CopyWords, slices.Clone[[]float32], 0)},
		{"add", "add matches a + b on the CPU exactly at every n, over grids of one row of work groups and of two, infinities and overflow included, and writes its output only", binaryCase(kernel.Add, func(a, b float32) float32 { return a + b })},
		{"mul", "mul matches a * b on the CPU exactly at every n, over grids of one row of work groups and of two, infinities and overflow included, and writes its output only", binaryCase(kernel.Mul, func(a, b float32) float32 { return a * b })},
		{"scale", "scale matches alpha * x on the CPU exactly at every n, over grids of one row of work groups and of two", unaryCase(func(n uint32) kernel.Launch { return kernel.Scale(n, -2.5) }, func(x []float32) []float32 { return cpuref.Scale(x, -2.5) }, 0)},
		{"relu", "relu matches max(x, 0) on the CPU at every n, over grids of one row of work groups and of two", unaryCase(kernel.ReLU, cpuref.ReLU, 0)},
		{"gelu", "gelu matches the tanh approximation on the CPU within 1e-5 at every n, over grids of one row of work groups and of two", unaryCase(kernel.GELU, cpuref.GELU, 1e-5)},
		{"softmax", "softmax matches a float64 CPU softmax within 1e-5 per row at ragged shapes", func(c *checkState, cl *client.Client) {
			for _, s := range [][2]uint32{{1, 1}, {3, 257}, {17, 5}, {2, 1000}, {300, 33}} {
				x := floats(s[0]*s[1], uint64(s[1]))
				kernelCase(c, cl, fmt.Sprintf("%dx%d", s[0], s[1]), kernel.Softmax(s[0], s[1]), [][]float32{x}, int(s[0]*s[1]),
					cpuref.Softmax(x, int(s[0]), int(s[1])), 1e-5)
			}
		}},
		{"layernorm", "layernorm matches a float64 CPU layer norm within 1e-4 at ragged shapes, eps included (a constant row gives beta)", func(c *checkState, cl *client.Client) {
			for _, s := range [][2]uint32{{1, 3}, {5, 257}, {3, 1000}, {300, 17}} {
				x, g, b := floats(s[0]*s[1], 1), floats(s[1], 2), floats(s[1], 3)
				kernelCase(c, cl, fmt.Sprintf("%dx%d", s[0], s[1]), kernel.LayerNorm(s[0], s[1], 1e-5), [][]float32{x, g, b}, int(s[0]*s[1]),
					cpuref.LayerNorm(x, g, b, int(s[0]), int(s[1]), 1e-5), 1e-4)
			}
			// A row of one value has no variance: eps alone keeps its
			// normalisation finite (0 / sqrt(eps), so beta); a device
			// ignoring eps gives NaN there and passed the random rows.
			const rows, cols = 3, 64
			x, g, b := floats(rows*cols, 5), floats(cols, 6), floats(cols, 7)
			for i := cols; i < 2*cols; i++ {
				x[i] = 1.25
			}
			kernelCase(c, cl, "a constant row", kernel.LayerNorm(rows, cols, 1e-3), [][]float32{x, g, b}, rows*cols,
				cpuref.LayerNorm(x, g, b, rows, cols, 1e-3), 1e-4)
		}},
		{"reduce_sum", "reduce_sum matches a float64 CPU sum within 1e-5 of the sum of magnitudes at every n", func(c *checkState, cl *client.Client) {
			for _, n := range append(slices.Clone(elementSizes), 10007, 300007) {
				x := floats(n, uint64(n)+9)
				var sum, mag float64
				for _, v := range x {
					sum += float64(v)
					mag += math.Abs(float64(v))
				}
				kernelCase(c, cl, fmt.Sprintf("n=%d", n), kernel.ReduceSum(n), [][]float32{x}, 1, []float32{float32(sum)}, 1e-5*max(mag, 1))
			}
		}},
		{"matmul", "matmul matches a float64 CPU product within 1e-5 per term at shapes off the 128 tile", func(c *checkState, cl *client.Client) {
			for _, s := range [][3]uint32{{1, 1, 1}, {3, 129, 5}, {130, 7, 129}, {33, 257, 9}, {300, 70, 300}} {
				m, n, k := s[0], s[1], s[2]
				a, b := floats(m*k, 1), floats(k*n, 2)
				kernelCase(c, cl, fmt.Sprintf("%dx%dx%d", m, n, k), kernel.MatMul(m, n, k), [][]float32{a, b}, int(m*n),
					cpuref.MatMul(a, b, int(m), int(n), int(k)), 1e-5*float64(k)*4)
			}
		}},
		{"transpose", "transpose matches the CPU exactly at shapes off the 32 tile", func(c *checkState, cl *client.Client) {
			for _, s := range [][2]uint32{{1, 1}, {1, 100}, {33, 65}, {100, 3}, {300, 257}} {
				x := floats(s[0]*s[1], 4)
				kernelCase(c, cl, fmt.Sprintf("%dx%d", s[0], s[1]), kernel.Transpose(s[0], s[1]), [][]float32{x}, int(s[0]*s[1]),
					cpuref.Transpose(x, int(s[0]), int(s[1])), 0)
			}
		}},
	}
}

func kernelChecks(open OpenClient) []Check {
	cases := kernelCatalogueChecks()
	checks := []Check{{
		Name: "kernel/catalogue-covered",
		Rule: "Every built-in kernel of the catalogue has a CPU reference in this suite",
		run: func(c *checkState) {
			covered := map[string]bool{}
			for _, k := range cases {
				covered[k.kernel] = true
			}
			for _, k := range kernel.All() {
				if !covered[k.Name] {
					c.Errorf("kernel %q has no reference check", k.Name)
				}
			}
		},
	}}
	for _, k := range cases {
		checks = append(checks, Check{
			Name: "kernel/" + k.kernel,
			Rule: k.rule,
			run:  func(c *checkState) { k.run(c, openClient(c, open, DeviceConfig{})) },
		})
	}
	return checks
}
