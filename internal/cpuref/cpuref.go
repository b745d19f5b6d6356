// Package cpuref holds the CPU references vkrt's kernels are checked
// against, computed in float64, and the float32 byte conversions the tests
// of vk/ and client/ share. It is pure Go and test support only.
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
