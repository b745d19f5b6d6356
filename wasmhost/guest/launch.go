package guest

import (
	"encoding/binary"
	"math"

	"github.com/vkrt/vkrt/kernel"
)

// Launch is one kernel of the host's catalogue (package kernel, which
// guests share with the host) with its grid, push constants and buffers
// (binding i is Buffers[i]).
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
// wasmhost/ABI.md) to dst. It refuses what the host would refuse as
// malformed, as an *Error of op "launch" (EINVAL; EBADF for a nil
// binding), and then returns dst as it was.
func AppendDescriptor(dst []byte, launches ...Launch) ([]byte, error) {
	d, err := appendDescriptor(dst, launches)
	if err != nil {
		return dst, err
	}
	return d, nil
}

func appendDescriptor(dst []byte, launches []Launch) ([]byte, error) {
	if len(launches) == 0 || len(launches) > maxBatch {
		return nil, refuse("launch", EINVAL, "a batch holds 1 to %d launches, not %d", maxBatch, len(launches))
	}
	le := binary.LittleEndian
	dst = le.AppendUint32(dst, descriptorVersion)
	dst = le.AppendUint32(dst, uint32(len(launches)))
	// The host reads the whole descriptor before it looks at a handle: a
	// nil binding (EBADF) is told once every launch is well formed, so a
	// malformed launch after it is EINVAL, as the host says.
	var nilBinding error
	for i, l := range launches {
		switch {
		case len(l.Kernel) == 0 || len(l.Kernel) > maxKernelName:
			return nil, refuse("launch", EINVAL, "launch %d: a kernel name is 1 to %d B, got %d B", i, maxKernelName, len(l.Kernel))
		case len(l.Push) > maxPush || len(l.Push)%4 != 0:
			return nil, refuse("launch", EINVAL, "launch %d (%s): %d B of push constants, want a multiple of 4 up to %d", i, l.Kernel, len(l.Push), maxPush)
		case len(l.Buffers) > maxBindings:
			return nil, refuse("launch", EINVAL, "launch %d (%s): %d bindings, at most %d", i, l.Kernel, len(l.Buffers), maxBindings)
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
				if nilBinding == nil {
					nilBinding = refuse("launch", EBADF, "launch %d (%s): binding %d is a nil *Buffer", i, l.Kernel, j)
				}
				continue
			}
			dst = le.AppendUint32(dst, b.handle)
		}
	}
	if nilBinding != nil {
		return nil, nilBinding
	}
	return dst, nil
}

// Of is a launch of the kernel package's (kernel.Add(n), kernel.MatMul(m,
// n, k), …) on buffers, binding i first: the typed launches below are Of
// the host's own, so grids and push constants are sized the same way.
func Of(l kernel.Launch, buffers ...*Buffer) Launch {
	return Launch{Kernel: l.Kernel.Name, Grid: l.Grid, Push: l.Push, Buffers: buffers}
}

// Fill sets n 32-bit words of out to value.
func Fill(n, value uint32, out *Buffer) Launch { return Of(kernel.FillWords(n, value), out) }

// FillFloat32 sets n floats of out to v.
func FillFloat32(n uint32, v float32, out *Buffer) Launch { return Fill(n, math.Float32bits(v), out) }

// Copy copies n 32-bit words from src to out.
func Copy(n uint32, src, out *Buffer) Launch { return Of(kernel.CopyWords(n), src, out) }

// Add is out = a + b over n floats.
func Add(n uint32, a, b, out *Buffer) Launch { return Of(kernel.Add(n), a, b, out) }

// Mul is out = a * b over n floats.
func Mul(n uint32, a, b, out *Buffer) Launch { return Of(kernel.Mul(n), a, b, out) }

// Scale is out = alpha * x over n floats.
func Scale(n uint32, alpha float32, x, out *Buffer) Launch { return Of(kernel.Scale(n, alpha), x, out) }

// ReLU is out = max(x, 0) over n floats.
func ReLU(n uint32, x, out *Buffer) Launch { return Of(kernel.ReLU(n), x, out) }

// GELU is out = gelu(x), tanh approximation, over n floats.
func GELU(n uint32, x, out *Buffer) Launch { return Of(kernel.GELU(n), x, out) }

// Softmax is the row-wise softmax of a rows x cols matrix.
func Softmax(rows, cols uint32, x, out *Buffer) Launch { return Of(kernel.Softmax(rows, cols), x, out) }

// LayerNorm normalises each row of a rows x cols matrix, then scales by
// gamma and shifts by beta (cols each).
func LayerNorm(rows, cols uint32, eps float32, x, gamma, beta, out *Buffer) Launch {
	return Of(kernel.LayerNorm(rows, cols, eps), x, gamma, beta, out)
}

// ReduceSum sums n floats of x into out[0].
func ReduceSum(n uint32, x, out *Buffer) Launch { return Of(kernel.ReduceSum(n), x, out) }

// MatMul is c = a b for row-major a (m x k), b (k x n), c (m x n).
func MatMul(m, n, k uint32, a, b, c *Buffer) Launch { return Of(kernel.MatMul(m, n, k), a, b, c) }

// Transpose is out = transpose(x) for a rows x cols x; out must not
// overlap x.
func Transpose(rows, cols uint32, x, out *Buffer) Launch {
	return Of(kernel.Transpose(rows, cols), x, out)
}
