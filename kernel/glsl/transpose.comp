#version 450
// out = transpose(x) for a rows x cols row-major f32 matrix x; out is
// cols x rows and must not overlap x. A work group of 256 invocations moves
// one 32 x 32 tile at a time through shared memory: it reads the tile along
// x's rows and writes it along out's rows, so consecutive invocations touch
// consecutive words on both sides; the shared rows are padded to 33 words
// so reading a column of the tile hits 32 different banks. Tiles are taken
// with the grid's stride in both dimensions, so any grid of at least one
// work group is correct; edges are masked.
layout(local_size_x = 256, local_size_y = 1, local_size_z = 1) in;
layout(std430, binding = 0) readonly buffer X { float x[]; };
layout(std430, binding = 1) writeonly buffer Out { float dst[]; };
layout(push_constant) uniform Push { uint rows; uint cols; } p;

#define TILE 32
#define STEP 8 // 256 invocations cover a tile in 32 / 8 = 4 rows each

shared float tile[TILE][TILE + 1];

uint tiles(uint n) { return n / TILE + (n % TILE != 0 ? 1 : 0); }

void main() {
	uint tx = gl_LocalInvocationID.x % TILE;
	uint ty = gl_LocalInvocationID.x / TILE;
	for (uint by = gl_WorkGroupID.y; by < tiles(p.rows); by += gl_NumWorkGroups.y) {
		for (uint bx = gl_WorkGroupID.x; bx < tiles(p.cols); bx += gl_NumWorkGroups.x) {
			uint r0 = by * TILE, c0 = bx * TILE;
			for (uint i = ty; i < TILE; i += STEP) {
				uint r = r0 + i, c = c0 + tx;
				if (r < p.rows && c < p.cols) tile[i][tx] = x[r * p.cols + c];
			}
			barrier();
			// out[c][r] = x[r][c] for c = c0 + i, r = r0 + tx.
			for (uint i = ty; i < TILE; i += STEP) {
				uint c = c0 + i, r = r0 + tx;
				if (c < p.cols && r < p.rows) dst[c * p.rows + r] = tile[tx][i];
			}
			barrier(); // the tile is read before the next one overwrites it
		}
	}
}
