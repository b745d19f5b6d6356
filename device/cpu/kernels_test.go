package cpu_test

import (
	"runtime"
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/vkrt/vkrt/kernel"
	vkruntime "github.com/vkrt/vkrt/runtime"
)

// reduceGrid is reduce_sum over n floats with a grid of gx × gy work groups.
func reduceGrid(n uint32, gx, gy uint32, x, out vkruntime.StorageHandle) kernel.Op {
	l := kernel.ReduceSum(n)
	return kernel.Op{Kernel: l.Kernel, Grid: [3]uint32{gx, gy, 1}, Bindings: []vkruntime.StorageHandle{x, out}, Push: l.Push}
}

// groupSums is what the shader leaves: group g sums, in order, the
// 256-element blocks b with b mod groups == g.
func groupSums(x []float32, groups int) []float32 {
	sums := make([]float64, groups)
	for i, v := range x {
		sums[(i/256)%groups] += float64(v)
	}
	out := make([]float32, groups)
	for g, s := range sums {
		out[g] = float32(s)
	}
	return out
}

// Every grid leaves each group's sum exactly as one pass over the input
// would, whether the groups are fewer than the blocks, more, or too many to
// sum at once.
func TestReduceSumPartialSumsOfEveryGrid(t *testing.T) {
	d := newDevice(t)
	// 32,785 blocks, the last one short: more than twice 16,390 groups.
	n := 32785*256 - 100
	x := ramp(n, 3)
	for i := range x {
		x[i] += float32(i%1000) / 7 // sums that rounding in another order would change
	}
	xh := floatsOn(t, d, x)
	for _, grid := range [][2]uint32{{1, 1}, {3, 1}, {7, 5}, {1000, 1}, {16384, 1}, {16385, 1}, {16390, 1}, {8197, 3}, {32784, 1}, {32785, 1}, {300, 200}} {
		groups := int(grid[0] * grid[1])
		out := floatsOn(t, d, make([]float32, groups))
		fill := kernel.FillWords(uint32(groups), 0x7fc00001) // NaN: every group must be written
		require.NoError(t, d.Dispatch(t.Context(), []kernel.Op{fill.With(out), reduceGrid(uint32(n), grid[0], grid[1], xh, out)}))
		require.Equal(t, groupSums(x, groups), read(t, d, out), "grid %v", grid)
		d.Storage().Dealloc(out.ID)
		d.Storage().Flush()
	}
}

// A launch's host scratch does not grow with its grid: reduce_sum over a
// few floats with 2^22 work groups (a hostile grid of 2^30 would otherwise
// take 8 GiB of partial sums) allocates next to nothing beyond its bindings,
// and still writes every group's sum.
func TestReduceSumOfAHugeGridAllocatesLittle(t *testing.T) {
	d := newDevice(t)
	const n, gx, gy = 1000, 2048, 2048
	x := ramp(n, 3)
	xh := floatsOn(t, d, x)
	out := floatsOn(t, d, make([]float32, gx*gy))
	fill := kernel.FillWords(gx*gy, 0x7fc00001)
	run(t, d, fill, out)

	var before, after runtime.MemStats
	runtime.GC()
	runtime.ReadMemStats(&before)
	require.NoError(t, d.Dispatch(t.Context(), []kernel.Op{reduceGrid(n, gx, gy, xh, out)}))
	runtime.ReadMemStats(&after)
	require.Less(t, after.TotalAlloc-before.TotalAlloc, uint64(1<<20), "bytes allocated by one launch")

	require.Equal(t, groupSums(x, gx*gy), read(t, d, out))
}
