#version 450
#extension GL_GOOGLE_include_directive : require
#include "common.glsl"
#include "rows.glsl"
// Sum of x[0..n) (f32): work group g writes the sum of its grid-strided
// share to out[g], so a grid of one work group leaves the total in out[0].
layout(std430, binding = 0) readonly buffer X { float x[]; };
layout(std430, binding = 1) writeonly buffer Out { float dst[]; };
layout(push_constant) uniform Push { uint n; } p;
void main() {
	float s = 0.0;
	for (uint i = global_index(); i < p.n; i += global_stride()) s += x[i];
	s = group_sum(s);
	if (gl_LocalInvocationID.x == 0) dst[group_index()] = s;
}
