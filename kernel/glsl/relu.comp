#version 450
#extension GL_GOOGLE_include_directive : require
#include "common.glsl"
// out[i] = max(x[i], 0) for i < n (f32); NaN stays NaN and -0 gives +0.
// Not GLSL's max, whose result for a NaN operand is undefined (lavapipe
// gives 0): a NaN fails the comparison and passes through.
layout(std430, binding = 0) readonly buffer X { float x[]; };
layout(std430, binding = 1) writeonly buffer Out { float dst[]; };
layout(push_constant) uniform Push { uint n; } p;
void main() {
	for (uint i = global_index(); i < p.n; i += global_stride()) {
		float v = x[i];
		dst[i] = v <= 0.0 ? 0.0 : v;
	}
}
