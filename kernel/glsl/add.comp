#version 450
#extension GL_GOOGLE_include_directive : require
#include "common.glsl"
// out[i] = a[i] + b[i] for i < n (f32): the element-wise sum
layout(std430, binding = 0) readonly buffer A { float a[]; };
layout(std430, binding = 1) readonly buffer B { float b[]; };
layout(std430, binding = 2) writeonly buffer Out { float dst[]; };
layout(push_constant) uniform Push { uint n; } p;
void main() {
	for (uint i = global_index(); i < p.n; i += global_stride()) dst[i] = a[i] + b[i];
}
