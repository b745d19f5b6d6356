// Package cpuref holds the CPU references of vkrt's kernels, computed in
// float64 and rounded once to float32, and the float32 byte conversions:
// what the pure-Go cpu device runs, and what the tests of every device (and
// the example guests) check their results against. It is pure Go and builds
// for wasip1.
package cpuref

import (
	"encoding/binary"
	"math"
)

// Bytes is v as little-endian float32 bytes, the layout kernels read.
func Bytes(v []float32) []byte {
	b := make([]byte, 4*len(v))
	for i, x := range v {
		binary.LittleEndian.PutUint32(b[4*i:], math.Float32bits(x))
	}
	return b
}

// Floats reads little-endian float32 bytes; a trailing partial word is dropped.
func Floats(b []byte) []float32 {
	v := make([]float32, len(b)/4)
	for i := range v {
		v[i] = math.Float32frombits(binary.LittleEndian.Uint32(b[4*i:]))
	}
	return v
}

// Softmax of each row of a rows×cols matrix.
func Softmax(x []float32, rows, cols int) []float32 {
	out := make([]float32, len(x))
	for r := range rows {
		row := x[r*cols : (r+1)*cols]
		m := math.Inf(-1)
		for _, v := range row {
			m = max(m, float64(v))
		}
		var s float64
		for _, v := range row {
			s += math.Exp(float64(v) - m)
		}
		for c, v := range row {
			out[r*cols+c] = float32(math.Exp(float64(v)-m) / s)
		}
	}
	return out
}

// LayerNorm of each row of a rows×cols matrix, scaled by gamma and shifted
// by beta (one value per column).
func LayerNorm(x, gamma, beta []float32, rows, cols int, eps float64) []float32 {
	out := make([]float32, len(x))
	for r := range rows {
		row := x[r*cols : (r+1)*cols]
		var mean, q float64
		for _, v := range row {
			mean += float64(v)
		}
		mean /= float64(cols)
		for _, v := range row {
			q += (float64(v) - mean) * (float64(v) - mean)
		}
		inv := 1 / math.Sqrt(q/float64(cols)+eps)
		for c, v := range row {
			out[r*cols+c] = float32((float64(v)-mean)*inv*float64(gamma[c]) + float64(beta[c]))
		}
	}
	return out
}

// Transpose of a rows×cols matrix.
func Transpose(x []float32, rows, cols int) []float32 {
	out := make([]float32, len(x))
	for r := range rows {
		for c := range cols {
			out[c*rows+r] = x[r*cols+c]
		}
	}
	return out
}

// MatMul is a b for a row-major a (m×k) and b (k×n).
func MatMul(a, b []float32, m, n, k int) []float32 {
	out := make([]float32, m*n)
	row := make([]float64, n)
	for i := range m {
		clear(row)
		for x := range k {
			av := float64(a[i*k+x])
			for j, bv := range b[x*n : (x+1)*n] {
				row[j] += av * float64(bv)
			}
		}
		for j, v := range row {
			out[i*n+j] = float32(v)
		}
	}
	return out
}

// GELU of each element, the tanh approximation the kernel computes.
func GELU(x []float32) []float32 {
	out := make([]float32, len(x))
	for i, f := range x {
		v := float64(f)
		out[i] = float32(0.5 * v * (1 + math.Tanh(math.Sqrt(2/math.Pi)*(v+0.044715*v*v*v))))
	}
	return out
}

// ReLU of each element.
func ReLU(x []float32) []float32 {
	out := make([]float32, len(x))
	for i, v := range x {
		out[i] = max(v, 0)
	}
	return out
}

// Add is a + b element by element.
func Add(a, b []float32) []float32 {
	out := make([]float32, len(a))
	for i := range a {
		out[i] = a[i] + b[i]
	}
	return out
}

// Scale is alpha x element by element.
func Scale(x []float32, alpha float32) []float32 {
	out := make([]float32, len(x))
	for i, v := range x {
		out[i] = float32(float64(alpha) * float64(v))
	}
	return out
}

// MaxRelError is the largest |want - got| / (1 + |want|) over the
// elements, and its index; lengths that differ are an infinite error, and
// so is a NaN or an infinity against anything but the same. Equal values
// (the same infinity, or NaN against NaN) are none, where the formula
// gives NaN.
func MaxRelError(want, got []float32) (float64, int) {
	if len(want) != len(got) {
		return math.Inf(1), -1
	}
	worst, at := 0.0, -1
	for i := range want {
		if want[i] == got[i] || math.IsNaN(float64(want[i])) && math.IsNaN(float64(got[i])) {
			continue
		}
		d := math.Abs(float64(want[i])-float64(got[i])) / (1 + math.Abs(float64(want[i])))
		if d > worst || math.IsNaN(d) {
			worst, at = d, i
			if math.IsNaN(d) {
				return math.Inf(1), i
			}
		}
	}
	return worst, at
}
