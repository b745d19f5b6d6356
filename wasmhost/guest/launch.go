package guest

import (
	"encoding/binary"
	"fmt"
	"math"
)

// Launch is one kernel of the host's catalogue with its grid, push
// constants and buffers (binding i is Buffers[i]). The typed constructors
// (Add, MatMul, …) fill it in the way the host's own typed launches do.
type Launch struct {
	Kernel  string
	Grid    [3]uint32
	Push    []byte
	Buffers []*Buffer
}

// The descriptor's limits (wasmhost/ABI.md).
const (
	descriptorVersion = 1
	maxBatch          = 256
	maxKernelName     = 64
	maxPush           = 128
	maxBindings       = 16
)

// AppendDescriptor appends the launch descriptor of a batch (format in
// wasmhost/ABI.md) to dst.
func AppendDescriptor(dst []byte, launches ...Launch) ([]byte, error) {
	if len(launches) == 0 || len(launches) > maxBatch {
		return nil, fmt.Errorf("vkrt: a batch holds 1 to %d launches, not %d: %w", maxBatch, len(launches), EINVAL)
	}
	le := binary.LittleEndian
	dst = le.AppendUint32(dst, descriptorVersion)
	dst = le.AppendUint32(dst, uint32(len(launches)))
	for i, l := range launches {
		switch {
		case len(l.Kernel) == 0 || len(l.Kernel) > maxKernelName:
			return nil, fmt.Errorf("vkrt: launch %d: kernel name %q: %w", i, l.Kernel, EINVAL)
		case len(l.Push) > maxPush || len(l.Push)%4 != 0:
			return nil, fmt.Errorf("vkrt: launch %d (%s): %d B of push constants: %w", i, l.Kernel, len(l.Push), EINVAL)
		case len(l.Buffers) > maxBindings:
			return nil, fmt.Errorf("vkrt: launch %d (%s): %d bindings: %w", i, l.Kernel, len(l.Buffers), EINVAL)
		}
		dst = le.AppendUint16(dst, uint16(len(l.Kernel)))
		dst = le.AppendUint16(dst, uint16(len(l.Push)))
		dst = le.AppendUint16(dst, uint16(len(l.Buffers)))
		dst = le.AppendUint16(dst, 0)
		for _, g := range l.Grid {
			dst = le.AppendUint32(dst, g)
		}
		dst = append(dst, l.Kernel...)
		dst = append(dst, l.Push...)
		for j, b := range l.Buffers {
			if b == nil {
				return nil, fmt.Errorf("vkrt: launch %d (%s): binding %d is nil: %w", i, l.Kernel, j, EBADF)
			}
			dst = le.AppendUint32(dst, b.handle)
		}
	}
	return dst, nil
}

// The grids, as the host's typed launches size them.
const (
	elementGroup   = 256
	portableGroups = 65535
	matmulTile     = 128
	transposeTile  = 32
)

// ElementGrid covers n elements with one invocation each, 256 per work
// group, spilling into y past 65535 work groups.
func ElementGrid(n uint64) [3]uint32 { return RowGrid((n + elementGroup - 1) / elementGroup) }

// RowGrid is a grid of groups work groups, spilling into y past 65535.
func RowGrid(groups uint64) [3]uint32 {
	if groups <= portableGroups {
		return [3]uint32{uint32(groups), 1, 1}
	}
	return [3]uint32{portableGroups, uint32((groups + portableGroups - 1) / portableGroups), 1}
}

func pack(values ...uint32) []byte {
	b := make([]byte, 0, 4*len(values))
	for _, v := range values {
		b = binary.LittleEndian.AppendUint32(b, v)
	}
	return b
}

func elementwise(kernel string, n uint32, buffers []*Buffer, extra ...uint32) Launch {
	return Launch{Kernel: kernel, Grid: ElementGrid(uint64(n)), Push: pack(append([]uint32{n}, extra...)...), Buffers: buffers}
}

// Fill sets n 32-bit words of out to value.
func Fill(n, value uint32, out *Buffer) Launch { return elementwise("fill", n, []*Buffer{out}, value) }

// FillFloat32 sets n floats of out to v.
func FillFloat32(n uint32, v float32, out *Buffer) Launch { return Fill(n, math.Float32bits(v), out) }

// copyPerInvocation is how many 16-byte words one invocation of the copy
// kernel moves.
const copyPerInvocation = 2

// Copy copies n 32-bit words from src to out.
func Copy(n uint32, src, out *Buffer) Launch {
	l := elementwise("copy", n, []*Buffer{src, out})
	per := uint64(elementGroup * copyPerInvocation)
	l.Grid = RowGrid(((uint64(n)+3)/4 + per - 1) / per)
	return l
}

// Add is out = a + b over n floats.
func Add(n uint32, a, b, out *Buffer) Launch { return elementwise("add", n, []*Buffer{a, b, out}) }

// Mul is out = a * b over n floats.
func Mul(n uint32, a, b, out *Buffer) Launch { return elementwise("mul", n, []*Buffer{a, b, out}) }

// Scale is out = alpha * x over n floats.
func Scale(n uint32, alpha float32, x, out *Buffer) Launch {
	return elementwise("scale", n, []*Buffer{x, out}, math.Float32bits(alpha))
}

// ReLU is out = max(x, 0) over n floats.
func ReLU(n uint32, x, out *Buffer) Launch { return elementwise("relu", n, []*Buffer{x, out}) }

// GELU is out = gelu(x), tanh approximation, over n floats.
func GELU(n uint32, x, out *Buffer) Launch { return elementwise("gelu", n, []*Buffer{x, out}) }

// Softmax is the row-wise softmax of a rows x cols matrix.
func Softmax(rows, cols uint32, x, out *Buffer) Launch {
	return Launch{Kernel: "softmax", Grid: RowGrid(uint64(rows)), Push: pack(rows, cols), Buffers: []*Buffer{x, out}}
}

// LayerNorm normalises each row of a rows x cols matrix, then scales by
// gamma and shifts by beta (cols each).
func LayerNorm(rows, cols uint32, eps float32, x, gamma, beta, out *Buffer) Launch {
	return Launch{Kernel: "layernorm", Grid: RowGrid(uint64(rows)), Push: pack(rows, cols, math.Float32bits(eps)),
		Buffers: []*Buffer{x, gamma, beta, out}}
}

// ReduceSum sums n floats of x into out[0].
func ReduceSum(n uint32, x, out *Buffer) Launch {
	return Launch{Kernel: "reduce_sum", Grid: [3]uint32{1, 1, 1}, Push: pack(n), Buffers: []*Buffer{x, out}}
}

// MatMul is c = a b for row-major a (m x k), b (k x n), c (m x n).
func MatMul(m, n, k uint32, a, b, c *Buffer) Launch {
	grid := [3]uint32{(n + matmulTile - 1) / matmulTile, (m + matmulTile - 1) / matmulTile, 1}
	return Launch{Kernel: "matmul", Grid: grid, Push: pack(m, n, k), Buffers: []*Buffer{a, b, c}}
}

// Transpose is out = transpose(x) for a rows x cols x; out must not
// overlap x.
func Transpose(rows, cols uint32, x, out *Buffer) Launch {
	tiles := func(n uint32) uint32 { return min(n/transposeTile+min(n%transposeTile, 1), portableGroups) }
	return Launch{Kernel: "transpose", Grid: [3]uint32{tiles(cols), tiles(rows), 1}, Push: pack(rows, cols), Buffers: []*Buffer{x, out}}
}
