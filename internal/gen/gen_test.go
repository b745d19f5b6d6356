package gen

import (
	"bytes"
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/vkrt/vkrt/dryrun/trace"
)

func TestTraceIsReproducibleAndWellFormed(t *testing.T) {
	for _, shape := range Shapes() {
		for seed := range uint64(6) {
			a := Trace(seed, shape)
			require.Equal(t, a, Trace(seed, shape), "%s seed %d is reproducible", shape, seed)

			// Every free names a live allocation: the text form parses back.
			var buf bytes.Buffer
			_, err := a.WriteTo(&buf)
			require.NoError(t, err)
			back, err := trace.Read(a.Name, &buf)
			require.NoError(t, err, "%s seed %d", shape, seed)
			require.Equal(t, a.Allocations, back.Allocations)
		}
		require.NotEqual(t, Trace(1, shape).Events, Trace(2, shape).Events, "seeds differ")
	}
}

// TestTraceReusesMemoryLikeAModel pins what makes a generated stream worth
// planning: a size the doc promises (thousands to tens of thousands of
// allocations), most allocations freed before the stream ends, and a peak
// of live bytes well under what the stream allocates in all, so that where
// an allocation goes decides how much is reserved.
func TestTraceReusesMemoryLikeAModel(t *testing.T) {
	for _, shape := range Shapes() {
		for seed := range uint64(6) {
			tr := Trace(seed, shape)
			var total uint64
			freed := 0
			for _, e := range tr.Events {
				if e.Op == trace.OpAlloc {
					total += e.Size
				} else {
					freed++
				}
			}
			t.Logf("%s: %d allocations, %d freed, peak live %d of %d allocated", tr.Name, tr.Allocations, freed, tr.PeakLiveBytes(), total)
			require.GreaterOrEqual(t, tr.Allocations, 100, tr.Name)
			require.LessOrEqual(t, tr.Allocations, 100_000, tr.Name)
			require.Greater(t, freed, tr.Allocations/2, "%s frees most of what it allocates", tr.Name)
			require.Less(t, tr.PeakLiveBytes(), 2*total/3, "%s reuses memory over time", tr.Name)
		}
	}
}

func TestShapeNames(t *testing.T) {
	seen := map[string]bool{}
	for _, shape := range Shapes() {
		require.NotContains(t, shape.String(), "Shape(", "every shape has a name")
		require.False(t, seen[shape.String()], "names are distinct")
		seen[shape.String()] = true
	}
	require.Equal(t, "Shape(99)", Shape(99).String())
	require.Panics(t, func() { Trace(1, Shape(99)) })
}
