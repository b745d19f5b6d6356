package dryrun

import (
	"bytes"
	"testing"

	"github.com/stretchr/testify/require"
)

func TestGenerateIsReproducibleAndWellFormed(t *testing.T) {
	for _, shape := range Shapes() {
		for seed := range uint64(6) {
			a := Generate(seed, shape)
			require.Equal(t, a, Generate(seed, shape), "%s seed %d is reproducible", shape, seed)
			require.Greater(t, a.Allocations, 100, "%s seed %d", shape, seed)

			// Every free names a live allocation: the text form parses back.
			var buf bytes.Buffer
			_, err := a.WriteTo(&buf)
			require.NoError(t, err)
			back, err := ReadTrace(a.Name, &buf)
			require.NoError(t, err, "%s seed %d", shape, seed)
			require.Equal(t, a.Allocations, back.Allocations)

			// Memory is reused over time: frees happen before the last allocation.
			lifetimes := Lifetimes(a, 16)
			short := 0
			for _, l := range lifetimes {
				if int(l.End) < a.Allocations {
					short++
				}
			}
			require.Greater(t, short, a.Allocations/2, "%s seed %d frees most of what it allocates", shape, seed)
			require.Less(t, PeakOverlap(lifetimes), 2*sumSizes(lifetimes)/3)
		}
		require.NotEqual(t, Generate(1, shape).Events, Generate(2, shape).Events, "seeds differ")
	}
}

func sumSizes(lifetimes []Lifetime) uint64 {
	var s uint64
	for _, l := range lifetimes {
		s += l.Size
	}
	return s
}

func TestGenerateStreamStatistics(t *testing.T) {
	for _, shape := range Shapes() {
		for seed := range uint64(3) {
			tr := Generate(seed, shape)
			t.Logf("%s: %d allocations, peak live %d", tr.Name, tr.Allocations, tr.PeakLiveBytes())
		}
	}
}
