package kernel

// LoopTrips estimates, from above, the most loop iterations one invocation
// of a launch of k runs: the rows, tiles or elements its grid leaves to
// each invocation, times the loops over them, and the work-group
// reductions. It is 0 for a kernel outside the catalogue, push constants
// too short for it, or a grid with a zero dimension. A device that ends a
// shader's loops after so many iterations (lavapipe: 65,535 over all the
// loops of an invocation, LP_MAX_TGSI_LOOP_ITERATIONS) must refuse a
// launch past it, or it leaves part of the output silently unwritten.
func LoopTrips(k Kernel, grid [3]uint32, push []byte) uint64 {
	canon, ok := catalogueKernel(k.Name)
	// Saturated, not wrapped: a product of three dimensions may pass 2^64,
	// and one that wrapped to 0 divided by it below.
	groups := product(product(uint64(grid[0]), uint64(grid[1])), uint64(grid[2]))
	if !ok || groups == 0 || uint64(len(push)) < uint64(canon.PushSize()) {
		return 0
	}
	p := pushValues(push)
	ceil := ceilDiv     // (a + b - 1) / b wrapped for a saturated b
	const reduction = 9 // a work group's sum or max: log2(256) steps and one more
	switch canon.Name {
	case "softmax", "layernorm":
		rows, cols := p.u32(0), p.u32(1)
		return ceil(rows, groups) * (1 + 3*(ceil(cols, elementGroup)+1) + 2*reduction)
	case "matmul":
		// Per output tile the K loop and its exit; per row of tiles the
		// column loop's entry and exit.
		by := ceil(ceil(p.u32(0), matmulTile), uint64(grid[1]))
		bx := ceil(ceil(p.u32(1), matmulTile), uint64(grid[0]))
		return by * (2 + bx*(ceil(p.u32(2), 8)+2))
	case "transpose":
		rows, cols := p.u32(0), p.u32(1)
		by := ceil(ceil(rows, transposeTile), uint64(grid[1]))
		bx := ceil(ceil(cols, transposeTile), uint64(grid[0]))
		// Per tile: the column loop's step and test and two loops of four
		// rows with their tests; per row of tiles the row loop's step and
		// the column loop's entry and exit. lavapipe cut a transpose of
		// 894,535 x 1 by a (39, 6) grid after 15 a row of tiles, where
		// 1 + 11 a tile had been estimated.
		return by * (4 + bx*13)
	default: // the element kernels and reduce_sum
		return ceilDiv(p.u32(0), product(elementGroup, groups)) + 1 + reduction
	}
}
