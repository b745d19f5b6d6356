#version 450
#extension GL_GOOGLE_include_directive : require
#include "common.glsl"
#include "rows.glsl"
// Row-wise layer normalisation of a rows x cols row-major f32 matrix:
// out[r][c] = (x[r][c] - mean_r) / sqrt(var_r + eps) * gamma[c] + beta[c],
// var_r the biased variance. One work group per row.
layout(std430, binding = 0) readonly buffer X { float x[]; };
layout(std430, binding = 1) readonly buffer Gamma { float gamma[]; };
layout(std430, binding = 2) readonly buffer Beta { float beta[]; };
layout(std430, binding = 3) writeonly buffer Out { float dst[]; };
layout(push_constant) uniform Push { uint rows; uint cols; float eps; } p;
void main() {
	uint l = gl_LocalInvocationID.x;
	for (uint r = group_index(); r < p.rows; r += group_count()) {
		uint base = r * p.cols;
		float s = 0.0;
		for (uint c = l; c < p.cols; c += WG) s += x[base + c];
		float mean = group_sum(s) / float(p.cols);
		float q = 0.0;
		for (uint c = l; c < p.cols; c += WG) {
			float d = x[base + c] - mean;
			q += d * d;
		}
		float inv = inversesqrt(group_sum(q) / float(p.cols) + p.eps);
		for (uint c = l; c < p.cols; c += WG) dst[base + c] = (x[base + c] - mean) * inv * gamma[c] + beta[c];
	}
}
