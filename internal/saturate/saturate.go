// Package saturate adds and multiplies byte counts that stop at 2^64 - 1
// rather than wrap: sums of sizes from made-up reports, layouts and plans
// that would otherwise read as small.
package saturate

import (
	"math"
	"math/bits"
)

// Add is a+b, or 2^64 - 1 past it.
func Add(a, b uint64) uint64 {
	if sum, carry := bits.Add64(a, b, 0); carry == 0 {
		return sum
	}
	return math.MaxUint64
}

// Mul is a*b, or 2^64 - 1 past it.
func Mul(a, b uint64) uint64 {
	if hi, lo := bits.Mul64(a, b); hi == 0 {
		return lo
	}
	return math.MaxUint64
}
