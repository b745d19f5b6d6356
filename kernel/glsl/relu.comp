#version 450
#extension GL_GOOGLE_include_directive : require
#include "common.glsl"
// out[i] = max(x[i], 0) for i < n (f32)
layout(std430, binding = 0) readonly buffer X { float x[]; };
layout(std430, binding = 1) writeonly buffer Out { float dst[]; };
layout(push_constant) uniform Push { uint n; } p;
void main() {
	for (uint i = global_index(); i < p.n; i += global_stride()) dst[i] = max(x[i], 0.0);
}
