#version 450
// C = A B for row-major f32 matrices A (M x K), B (K x N), C (M x N).
// Each work group of 256 invocations computes a 128 x 128 tile of C, each
// invocation an 8 x 8 block of it (two 4-row by two 4-column strips, so
// neighbouring invocations read neighbouring shared-memory words), over
// K in steps of 8 staged through shared memory. Edges are zero-padded on
// load and masked on store. Grid: (ceil(N / 128), ceil(M / 128), 1).
layout(local_size_x = 256, local_size_y = 1, local_size_z = 1) in;
layout(std430, binding = 0) readonly buffer A { float a[]; };
layout(std430, binding = 1) readonly buffer B { float b[]; };
layout(std430, binding = 2) writeonly buffer C { float c[]; };
layout(push_constant) uniform Push { uint M; uint N; uint K; } p;

#define BM 128
#define BN 128
#define BK 8

shared float As[BK][BM]; // A tile, transposed: As[k][m]
shared float Bs[BK][BN];

void main() {
	uint tid = gl_LocalInvocationID.x;
	uint row0 = gl_WorkGroupID.y * BM;
	uint col0 = gl_WorkGroupID.x * BN;
	uint ty = tid / 16; // 16 x 16 invocations
	uint tx = tid % 16;

	float acc[8][8];
	for (int i = 0; i < 8; i++)
		for (int j = 0; j < 8; j++) acc[i][j] = 0.0;

	for (uint k0 = 0; k0 < p.K; k0 += BK) {
		for (uint s = 0; s < 4; s++) {
			uint idx = tid + s * 256;
			uint m = idx / BK, k = idx % BK;
			uint gm = row0 + m, gk = k0 + k;
			As[k][m] = (gm < p.M && gk < p.K) ? a[gm * p.K + gk] : 0.0;
			uint kb = idx / BN, n = idx % BN;
			uint gkb = k0 + kb, gn = col0 + n;
			Bs[kb][n] = (gkb < p.K && gn < p.N) ? b[gkb * p.N + gn] : 0.0;
		}
		barrier();
		for (uint k = 0; k < BK; k++) {
			float ra[8], rb[8];
			for (uint i = 0; i < 4; i++) {
				ra[i] = As[k][ty * 4 + i];
				ra[i + 4] = As[k][64 + ty * 4 + i];
				rb[i] = Bs[k][tx * 4 + i];
				rb[i + 4] = Bs[k][64 + tx * 4 + i];
			}
			for (int i = 0; i < 8; i++)
				for (int j = 0; j < 8; j++) acc[i][j] = fma(ra[i], rb[j], acc[i][j]);
		}
		barrier();
	}

	for (uint i = 0; i < 8; i++) {
		uint gm = row0 + (i < 4 ? ty * 4 + i : 64 + ty * 4 + i - 4);
		if (gm >= p.M) continue;
		for (uint j = 0; j < 8; j++) {
			uint gn = col0 + (j < 4 ? tx * 4 + j : 64 + tx * 4 + j - 4);
			if (gn < p.N) c[gm * p.N + gn] = acc[i][j];
		}
	}
}
