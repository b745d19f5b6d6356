#version 450
#extension GL_GOOGLE_include_directive : require
#include "common.glsl"
// out[i] = value for i < n (32-bit words: the value is a bit pattern)
layout(std430, binding = 0) writeonly buffer Out { uint dst[]; };
layout(push_constant) uniform Push { uint n; uint value; } p;
void main() {
	for (uint i = global_index(); i < p.n; i += global_stride()) dst[i] = p.value;
}
