package cpuref

import (
	"math"
	"testing"
)

// Equal results are no error, infinities and NaNs included: an infinity
// against the same infinity came out as an infinite error (|Inf - Inf| is
// NaN), and so did NaN against NaN, so an example guest whose result held
// one reported a mismatch against a reference that agreed with it.
func TestMaxRelErrorOfEqualResultsIsZero(t *testing.T) {
	inf, nan := float32(math.Inf(1)), float32(math.NaN())
	same := []float32{1, inf, -inf, nan, 0}
	if e, at := MaxRelError(same, same); e != 0 {
		t.Fatalf("MaxRelError of %v against itself = %g at %d, want 0", same, e, at)
	}
	for _, c := range []struct{ want, got float32 }{{inf, -inf}, {inf, 1}, {1, inf}, {nan, 1}, {1, nan}, {nan, inf}} {
		if e, at := MaxRelError([]float32{0, c.want}, []float32{0, c.got}); !math.IsInf(e, 1) || at != 1 {
			t.Errorf("MaxRelError(want %v, got %v) = %g at %d, want +Inf at 1", c.want, c.got, e, at)
		}
	}
	if e, at := MaxRelError([]float32{1, 2}, []float32{1, 2.5}); e != 0.5/3 || at != 1 {
		t.Errorf("MaxRelError(1 2, 1 2.5) = %g at %d, want %g at 1", e, at, 0.5/3)
	}
}
