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
		return softmax(ctx, int(push(0)), int(push(1)), mem[0], mem[1])
	case "layernorm":
		return layerNorm(ctx, int(push(0)), int(push(1)), pushF(2), mem)
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

// pacer paces loops over elements, looking at ctx once a chunk of them is
// done however the loops split the work, so that a kernel stops within a
// row: the row kernels and matmul ran a whole row (or matmul's row of
// N x K multiply-adds) through the reference between looks, over half a
// second for a softmax row of 2^24 columns.
type pacer struct {
	ctx  context.Context
	done int // elements since the last look, under chunk
}

// add counts n more elements (at most what a chunk has left) and, once a
// chunk is done, says whether ctx has ended.
func (p *pacer) add(n int) error {
	if p.done += n; p.done < chunk {
		return nil
	}
	p.done = 0
	return p.ctx.Err()
}

// over runs f on [0, n) in pieces [lo, hi) that end where a chunk does.
func (p *pacer) over(n int, f func(lo, hi int)) error {
	for lo := 0; lo < n; {
		hi := min(n, lo+chunk-p.done)
		f(lo, hi)
		if err := p.add(hi - lo); err != nil {
			return err
		}
		lo = hi
	}
	return nil
}

// floats reads n floats of b, paced.
func (p *pacer) floats(b []byte, n int) ([]float32, error) {
	v := make([]float32, n)
	err := p.over(n, func(lo, hi int) {
		for i := lo; i < hi; i++ {
			v[i] = getFloat(b, i)
		}
	})
	return v, err
}

// softmax is cpuref.Softmax's arithmetic, a row at a time; each row is read
// whole before its output is written, so in and out may be one buffer.
func softmax(ctx context.Context, rows, cols int, in, out []byte) error {
	if err := ctx.Err(); err != nil || cols == 0 {
		// Rows of no columns write nothing, as on a GPU; walking up to 2^32
		// of them took over a minute for a launch with empty bindings.
		return err
	}
	p := pacer{ctx: ctx}
	for r := range rows {
		x := in[4*r*cols:]
		m := math.Inf(-1)
		err := p.over(cols, func(lo, hi int) {
			for c := lo; c < hi; c++ {
				m = max(m, float64(getFloat(x, c)))
			}
		})
		if err != nil {
			return err
		}
		var s float64
		err = p.over(cols, func(lo, hi int) {
			for c := lo; c < hi; c++ {
				s += math.Exp(float64(getFloat(x, c)) - m)
			}
		})
		if err != nil {
			return err
		}
		y := out[4*r*cols:]
		err = p.over(cols, func(lo, hi int) {
			for c := lo; c < hi; c++ {
				putFloat(y, c, float32(math.Exp(float64(getFloat(x, c))-m)/s))
			}
		})
		if err != nil {
			return err
		}
	}
	return nil
}

// layerNorm is cpuref.LayerNorm's arithmetic, a row at a time over x =
// mem[0] with gamma and beta (mem[1], mem[2]) into mem[3], which may be x.
func layerNorm(ctx context.Context, rows, cols int, eps float64, mem [][]byte) error {
	if err := ctx.Err(); err != nil || cols == 0 {
		return err
	}
	p := pacer{ctx: ctx}
	gamma, err := p.floats(mem[1], cols)
	if err != nil {
		return err
	}
	beta, err := p.floats(mem[2], cols)
	if err != nil {
		return err
	}
	for r := range rows {
		x := mem[0][4*r*cols:]
		var mean, q float64
		err := p.over(cols, func(lo, hi int) {
			for c := lo; c < hi; c++ {
				mean += float64(getFloat(x, c))
			}
		})
		if err != nil {
			return err
		}
		mean /= float64(cols)
		err = p.over(cols, func(lo, hi int) {
			for c := lo; c < hi; c++ {
				v := float64(getFloat(x, c))
				q += (v - mean) * (v - mean)
			}
		})
		if err != nil {
			return err
		}
		inv := 1 / math.Sqrt(q/float64(cols)+eps)
		y := mem[3][4*r*cols:]
		err = p.over(cols, func(lo, hi int) {
			for c := lo; c < hi; c++ {
				v := float64(getFloat(x, c))
				putFloat(y, c, float32((v-mean)*inv*float64(gamma[c])+float64(beta[c])))
			}
		})
		if err != nil {
			return err
		}
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
	if err := ctx.Err(); err != nil || m == 0 || n == 0 {
		// No output to write: walking 2^32 - 1 rows of none took 25 s
		// over bindings of 0 B.
		return err
	}
	// cpuref.MatMul's arithmetic, each row written as it is done; a and b
	// are read paced too, a 2^13 x 2^12 b being a tenth of a second.
	p := pacer{ctx: ctx}
	a, err := p.floats(mem[0], m*k)
	if err != nil {
		return err
	}
	b, err := p.floats(mem[1], k*n)
	if err != nil {
		return err
	}
	row := make([]float64, n)
	for i := range m {
		clear(row)
		for x := range k {
			av := float64(a[i*k+x])
			for j, bv := range b[x*n : (x+1)*n] {
				row[j] += av * float64(bv)
			}
			if err := p.add(min(n, chunk-p.done)); err != nil {
				return err
			}
		}
		for j, v := range row {
			putFloat(mem[2], i*n+j, float32(v))
		}
		if err := p.add(min(n, chunk-p.done)); err != nil {
			return err
		}
	}
	return nil
}
