#version 450
#extension GL_GOOGLE_include_directive : require
#include "common.glsl"
#include "rows.glsl"
// Row-wise softmax of a rows x cols row-major f32 matrix:
// out[r][c] = exp(x[r][c] - max_r) / sum_c exp(x[r][c] - max_r).
// One work group per row.
layout(std430, binding = 0) readonly buffer X { float x[]; };
layout(std430, binding = 1) writeonly buffer Out { float dst[]; };
layout(push_constant) uniform Push { uint rows; uint cols; } p;
void main() {
	uint l = gl_LocalInvocationID.x;
	for (uint r = group_index(); r < p.rows; r += group_count()) {
		uint base = r * p.cols;
		float m = -3.402823466e38;
		for (uint c = l; c < p.cols; c += WG) m = max(m, x[base + c]);
		m = group_max(m);
		float s = 0.0;
		for (uint c = l; c < p.cols; c += WG) s += exp(x[base + c] - m);
		s = group_sum(s);
		for (uint c = l; c < p.cols; c += WG) dst[base + c] = exp(x[base + c] - m) / s;
	}
}
