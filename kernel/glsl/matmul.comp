#version 450
#extension GL_GOOGLE_include_directive : require
#extension GL_EXT_control_flow_attributes : require
// C = A B for row-major f32 matrices A (M x K), B (K x N), C (M x N).
// Each work group of 256 invocations computes a 128 x 128 tile of C, each
// invocation an 8 x 8 block of it: rows {4ty..4ty+3, 64+4ty..64+4ty+3} and
// the same pattern of columns, so neighbouring invocations read neighbouring
// 16-byte words of shared memory. K advances in steps of 8 through two
// shared-memory stages: while one is multiplied, the next tile is already
// loaded into registers. When K and N are multiples of 4 the tiles come in
// 16-byte loads; otherwise element by element. Edges are zero-padded on
// load and masked on store. A work group takes output tiles with the grid's
// stride in both dimensions, so any grid of at least one work group is
// correct: (ceil(N / 128), ceil(M / 128), 1) up to 65535 in x and y.
layout(local_size_x = 256, local_size_y = 1, local_size_z = 1) in;
layout(std430, binding = 0) readonly buffer A { float a[]; };
layout(std430, binding = 0) readonly buffer A4 { vec4 a4[]; };
layout(std430, binding = 1) readonly buffer B { float b[]; };
layout(std430, binding = 1) readonly buffer B4 { vec4 b4[]; };
layout(std430, binding = 2) writeonly buffer C { float c[]; };
layout(push_constant) uniform Push { uint M; uint N; uint K; } p;

#define BM 128
#define BN 128
#define BK 8

shared vec4 As[2][BK][BM / 4]; // A tile, transposed: As[s][k][m / 4][m % 4]
shared vec4 Bs[2][BK][BN / 4];

// This invocation's share of a tile: A rows m = tid / 2, k = 4 (tid % 2) ..
// +3; B row k = tid / 32, columns n = 4 (tid % 32) .. +3.
vec4 load_a(uint row0, uint k0, uint tid, bool vec) {
	uint m = row0 + tid / 2, k = k0 + 4 * (tid % 2);
	if (m >= p.M) return vec4(0.0);
	if (vec) return k < p.K ? a4[(m * p.K + k) / 4] : vec4(0.0);
	vec4 v;
	[[unroll]] for (uint i = 0; i < 4; i++) v[i] = k + i < p.K ? a[m * p.K + k + i] : 0.0;
	return v;
}

vec4 load_b(uint col0, uint k0, uint tid, bool vec) {
	uint k = k0 + tid / 32, n = col0 + 4 * (tid % 32);
	if (k >= p.K) return vec4(0.0);
	if (vec) return n < p.N ? b4[(k * p.N + n) / 4] : vec4(0.0);
	vec4 v;
	[[unroll]] for (uint i = 0; i < 4; i++) v[i] = n + i < p.N ? b[k * p.N + n + i] : 0.0;
	return v;
}

void store_tiles(uint s, uint tid, vec4 va, vec4 vb) {
	uint m = tid / 2, k = 4 * (tid % 2);
	[[unroll]] for (uint i = 0; i < 4; i++) As[s][k + i][m / 4][m % 4] = va[i];
	Bs[s][tid / 32][tid % 32] = vb;
}

uint tiles_of(uint n, uint tile) { return n / tile + (n % tile != 0 ? 1 : 0); }

// mul_tile computes the output tile at (row0, col0).
void mul_tile(uint row0, uint col0, uint tid, bool vec) {
	uint ty = tid / 16; // 16 x 16 invocations
	uint tx = tid % 16;

	float acc[8][8];
	[[unroll]] for (uint i = 0; i < 8; i++)
		[[unroll]] for (uint j = 0; j < 8; j++) acc[i][j] = 0.0;

	uint tiles = (p.K + BK - 1) / BK;
	if (tiles > 0) store_tiles(0, tid, load_a(row0, 0, tid, vec), load_b(col0, 0, tid, vec));
	barrier();
	for (uint t = 0; t < tiles; t++) {
		uint s = t % 2;
		vec4 na = vec4(0.0), nb = vec4(0.0);
		bool more = t + 1 < tiles;
		if (more) {
			na = load_a(row0, (t + 1) * BK, tid, vec);
			nb = load_b(col0, (t + 1) * BK, tid, vec);
		}
		[[unroll]] for (uint k = 0; k < BK; k++) {
			vec4 a0 = As[s][k][ty], a1 = As[s][k][16 + ty];
			vec4 b0 = Bs[s][k][tx], b1 = Bs[s][k][16 + tx];
			float ra[8] = float[8](a0.x, a0.y, a0.z, a0.w, a1.x, a1.y, a1.z, a1.w);
			float rb[8] = float[8](b0.x, b0.y, b0.z, b0.w, b1.x, b1.y, b1.z, b1.w);
			[[unroll]] for (uint i = 0; i < 8; i++)
				[[unroll]] for (uint j = 0; j < 8; j++) acc[i][j] = fma(ra[i], rb[j], acc[i][j]);
		}
		// The last barrier also keeps the next output tile's first
		// store from overwriting a stage still being read.
		if (more) store_tiles(1 - s, tid, na, nb);
		barrier();
	}

	[[unroll]] for (uint i = 0; i < 8; i++) {
		uint gm = row0 + (i < 4 ? ty * 4 + i : 64 + ty * 4 + i - 4);
		if (gm >= p.M) continue;
		[[unroll]] for (uint j = 0; j < 8; j++) {
			uint gn = col0 + (j < 4 ? tx * 4 + j : 64 + tx * 4 + j - 4);
			if (gn < p.N) c[gm * p.N + gn] = acc[i][j];
		}
	}
}

void main() {
	uint tid = gl_LocalInvocationID.x;
	bool vec = p.K % 4 == 0 && p.N % 4 == 0;
	for (uint by = gl_WorkGroupID.y; by < tiles_of(p.M, BM); by += gl_NumWorkGroups.y)
		for (uint bx = gl_WorkGroupID.x; bx < tiles_of(p.N, BN); bx += gl_NumWorkGroups.x)
			mul_tile(by * BM, bx * BN, tid, vec);
}
