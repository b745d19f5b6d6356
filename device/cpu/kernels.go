package cpu

import (
	"context"
	"encoding/binary"
	"fmt"
	"math"

	"github.com/vkrt/vkrt/internal/cpuref"
	"github.com/vkrt/vkrt/kernel"
)

// chunk is how many elements run between looks at the context.
const chunk = 1 << 16

// workGroup is the work-group size of every kernel of the catalogue.
const workGroup = 256

// run computes one checked op over its resolved bindings (mem[i] is binding
// i's bytes, the first kernel.BindingSizes of the handle).
func run(ctx context.Context, op kernel.Op, mem [][]byte) error {
	push := func(i int) uint32 { return binary.LittleEndian.Uint32(op.Push[4*i:]) }
	pushF := func(i int) float64 { return float64(math.Float32frombits(push(i))) }
	switch op.Kernel.Name {
	case "fill":
		value := push(1)
		return elements(ctx, int(push(0)), func(i int) { putWord(mem[0], i, value) })
	case "copy":
		return elements(ctx, int(push(0)), func(i int) { putWord(mem[1], i, word(mem[0], i)) })
	case "add":
		return elements(ctx, int(push(0)), func(i int) { putFloat(mem[2], i, getFloat(mem[0], i)+getFloat(mem[1], i)) })
	case "mul":
		return elements(ctx, int(push(0)), func(i int) { putFloat(mem[2], i, getFloat(mem[0], i)*getFloat(mem[1], i)) })
	case "scale":
		alpha := float32(pushF(1))
		return unary(ctx, mem, int(push(0)), func(x []float32) []float32 { return cpuref.Scale(x, alpha) })
	case "relu":
		return unary(ctx, mem, int(push(0)), cpuref.ReLU)
	case "gelu":
		return unary(ctx, mem, int(push(0)), cpuref.GELU)
	case "softmax":
		rows, cols := int(push(0)), int(push(1))
		return byRows(ctx, rows, cols, mem[0], mem[1], func(x []float32) []float32 { return cpuref.Softmax(x, 1, cols) })
	case "layernorm":
		rows, cols, eps := int(push(0)), int(push(1)), pushF(2)
		gamma, beta := floats(mem[1], cols), floats(mem[2], cols)
		return byRows(ctx, rows, cols, mem[0], mem[3], func(x []float32) []float32 {
			return cpuref.LayerNorm(x, gamma, beta, 1, cols, eps)
		})
	case "reduce_sum":
		return reduceSum(ctx, int(push(0)), op.Grid, mem[0], mem[1])
	case "matmul":
		return matMul(ctx, int(push(0)), int(push(1)), int(push(2)), mem)
	case "transpose":
		return transpose(ctx, int(push(0)), int(push(1)), mem[0], mem[1])
	}
	return fmt.Errorf("cpu: kernel %q has no CPU implementation", op.Kernel.Name)
}

func word(b []byte, i int) uint32       { return binary.LittleEndian.Uint32(b[4*i:]) }
func putWord(b []byte, i int, v uint32) { binary.LittleEndian.PutUint32(b[4*i:], v) }
func getFloat(b []byte, i int) float32  { return math.Float32frombits(word(b, i)) }
func putFloat(b []byte, i int, v float32) {
	putWord(b, i, math.Float32bits(v))
}

func floats(b []byte, n int) []float32 { return cpuref.Floats(b[:4*n]) }

func putFloats(b []byte, v []float32) {
	for i, x := range v {
		putFloat(b, i, x)
	}
}

// elements runs f for i in [0, n), looking at ctx every chunk.
func elements(ctx context.Context, n int, f func(i int)) error {
	for start := 0; start < n; start += chunk {
		if err := ctx.Err(); err != nil {
			return err
		}
		for i := start; i < min(n, start+chunk); i++ {
			f(i)
		}
	}
	return nil
}

// unary applies a reference to x = mem[0] into mem[1], a chunk at a time.
func unary(ctx context.Context, mem [][]byte, n int, f func(x []float32) []float32) error {
	for start := 0; start < n; start += chunk {
		if err := ctx.Err(); err != nil {
			return err
		}
		end := min(n, start+chunk)
		putFloats(mem[1][4*start:], f(cpuref.Floats(mem[0][4*start:4*end])))
	}
	return nil
}

// byRows applies f to each row of a rows×cols matrix; a row is read whole
// before its output is written, so in and out may be the same buffer.
func byRows(ctx context.Context, rows, cols int, in, out []byte, f func(row []float32) []float32) error {
	if cols == 0 {
		// Rows of no columns write nothing, as on a GPU; walking up to 2^32
		// of them took over a minute for a launch with empty bindings.
		return ctx.Err()
	}
	rowBytes := 4 * cols
	for r := range rows {
		if r%max(1, chunk/max(1, cols)) == 0 {
			if err := ctx.Err(); err != nil {
				return err
			}
		}
		putFloats(out[r*rowBytes:], f(cpuref.Floats(in[r*rowBytes:(r+1)*rowBytes])))
	}
	return nil
}

// transposeTile is the side of the square tiles transpose moves, so that
// both sides are walked a few cache lines at a time.
const transposeTile = 32

// transpose moves the words of a rows×cols x to out, cols×rows, a tile at
// a time, looking at ctx every chunk: as one call to the reference it ran
// to its end (over a second for 8192 x 8192) whenever ctx ended.
func transpose(ctx context.Context, rows, cols int, x, out []byte) error {
	if err := ctx.Err(); err != nil {
		return err
	}
	if rows == 0 || cols == 0 {
		return nil // nothing to move, however many tiles of nothing
	}
	moved := 0
	for r0 := 0; r0 < rows; r0 += transposeTile {
		for c0 := 0; c0 < cols; c0 += transposeTile {
			if moved >= chunk {
				if err := ctx.Err(); err != nil {
					return err
				}
				moved = 0
			}
			for r := r0; r < min(rows, r0+transposeTile); r++ {
				for c := c0; c < min(cols, c0+transposeTile); c++ {
					putWord(out, c*rows+r, word(x, r*cols+c))
				}
			}
			moved += transposeTile * transposeTile
		}
	}
	return nil
}

// sumWindow is how many work groups' partial sums reduceSum holds at once,
// so the host memory of a launch is bounded however large its grid.
const sumWindow = 1 << 14

// reduceSum follows the shader: element i belongs to work group
// (i / 256) mod groups, and group g's sum goes to out[g]. Groups are summed
// sumWindow at a time, each group's elements in order as a whole pass
// would; groups past the last 256-element block sum nothing.
func reduceSum(ctx context.Context, n int, grid [3]uint32, x, out []byte) error {
	groups := int(grid[0]) * int(grid[1])
	blocks := (n + workGroup - 1) / workGroup
	used := min(groups, blocks)
	sums := make([]float64, min(used, sumWindow))
	for g0 := 0; g0 < used; g0 += len(sums) {
		window := sums[:min(len(sums), used-g0)]
		clear(window)
		if len(window) == groups {
			err := elements(ctx, n, func(i int) { window[(i/workGroup)%groups] += float64(getFloat(x, i)) })
			if err != nil {
				return err
			}
		} else {
			// Round r holds blocks [r, r+groups); the window's groups take
			// blocks [r+g0, r+g0+len(window)) of it.
			for r := 0; r+g0 < blocks; r += groups {
				first := r + g0
				start, end := first*workGroup, min(n, (first+len(window))*workGroup)
				err := elements(ctx, end-start, func(j int) {
					i := start + j
					window[i/workGroup-first] += float64(getFloat(x, i))
				})
				if err != nil {
					return err
				}
			}
		}
		for g, s := range window {
			putFloat(out, g0+g, float32(s))
		}
	}
	if groups > used {
		clear(out[4*used : 4*groups])
	}
	return nil
}

func matMul(ctx context.Context, m, n, k int, mem [][]byte) error {
	if m == 0 || n == 0 {
		// No output to write: walking 2^32 - 1 rows of none took 25 s
		// over bindings of 0 B.
		return ctx.Err()
	}
	a, b := floats(mem[0], m*k), floats(mem[1], k*n)
	c := make([]float32, 0, m*n)
	rowsPerLook := max(1, chunk/max(1, n*k))
	for r := 0; r < m; r += rowsPerLook {
		if err := ctx.Err(); err != nil {
			return err
		}
		rows := min(rowsPerLook, m-r)
		c = append(c, cpuref.MatMul(a[r*k:(r+rows)*k], b, rows, n, k)...)
	}
	putFloats(mem[2], c)
	return nil
}
