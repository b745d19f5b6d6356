//go:build cgo

package vk

import (
	"fmt"
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/vkrt/vkrt/internal/cpuref"
	"github.com/vkrt/vkrt/kernel"
	vkruntime "github.com/vkrt/vkrt/runtime"
)

// runTranspose transposes x (rows x cols) with launch l into a page that
// starts out holding other values and has one guard word past the output,
// and returns the output and the guard.
func runTranspose(t *testing.T, d *Device, l kernel.Launch, x []float32, rows, cols int) ([]float32, float32) {
	t.Helper()
	n := rows * cols
	dst := floatBuffer(t, d, append(pseudoRandom(n, 98, 5), 42))
	out := vkruntime.StorageHandle{ID: dst.ID, Offset: dst.Offset, Size: uint64(4 * n)}
	require.NoError(t, run(t, d, l, floatBuffer(t, d, x), out))
	got := readFloats(t, d, dst)
	return got[:n], got[n]
}

// Shapes around the 32 x 32 tile: empty either way, one element, a lone row
// or column, one short of, exactly and one past a tile, and several tiles
// with ragged edges.
var transposeShapes = [][2]int{
	{0, 0}, {0, 7}, {7, 0}, {1, 1}, {1, 33}, {33, 1}, {31, 31}, {32, 32}, {33, 31},
	{64, 96}, {65, 100}, {3, 257}, {257, 3},
}

func TestTransposeMatchesTheCPU(t *testing.T) {
	d := openTestDevice(t)
	for _, s := range transposeShapes {
		rows, cols := s[0], s[1]
		t.Run(fmt.Sprintf("%dx%d", rows, cols), func(t *testing.T) {
			x := pseudoRandom(rows*cols, uint32(rows*cols)+3, 10)
			got, guard := runTranspose(t, d, kernel.Transpose(uint32(rows), uint32(cols)), x, rows, cols)
			require.Equal(t, cpuref.Transpose(x, rows, cols), got)
			require.Equal(t, float32(42), guard, "the kernel wrote past the output")
		})
	}
}

// Work groups take tiles with the grid's stride, so a grid smaller than the
// tile count still covers the matrix.
func TestTransposeSmallGridsCoverAllTiles(t *testing.T) {
	d := openTestDevice(t)
	const rows, cols = 100, 70 // 4 x 3 tiles
	x := pseudoRandom(rows*cols, 17, 3)
	for _, grid := range [][3]uint32{{1, 1, 1}, {2, 3, 1}, {1, 5, 1}} {
		t.Run(fmt.Sprint(grid), func(t *testing.T) {
			l := kernel.Transpose(rows, cols)
			l.Grid = grid
			got, guard := runTranspose(t, d, l, x, rows, cols)
			require.Equal(t, cpuref.Transpose(x, rows, cols), got)
			require.Equal(t, float32(42), guard)
		})
	}
}

// Past 65535 tiles in a dimension the helper's grid stops at the portable
// limit and the work groups loop over the rest.
func TestTransposeOfAWideRow(t *testing.T) {
	if testing.Short() {
		t.Skip("a 2-million-column row: the full pass runs it")
	}
	d := openTestDevice(t)
	const cols = portableGroups*transposeTile + 33
	l := kernel.Transpose(2, cols)
	require.Equal(t, [3]uint32{portableGroups, 1, 1}, l.Grid)
	x := pseudoRandom(2*cols, 23, 7)
	got, guard := runTranspose(t, d, l, x, 2, cols)
	require.Equal(t, cpuref.Transpose(x, 2, cols), got)
	require.Equal(t, float32(42), guard)
}
