#version 450
#extension GL_GOOGLE_include_directive : require
#include "common.glsl"
// dst[i] = src[i] for i < n 32-bit words: 16-byte loads and stores, then the
// last n % 4 words one by one.
layout(std430, binding = 0) readonly buffer Src4 { uvec4 src4[]; };
layout(std430, binding = 0) readonly buffer Src1 { uint src1[]; };
layout(std430, binding = 1) writeonly buffer Dst4 { uvec4 dst4[]; };
layout(std430, binding = 1) writeonly buffer Dst1 { uint dst1[]; };
layout(push_constant) uniform Push { uint n; } p;
void main() {
	uint n4 = p.n / 4;
	uint i = global_index();
	for (uint j = i; j < n4; j += global_stride()) dst4[j] = src4[j];
	uint tail = n4 * 4 + i;
	if (tail < p.n) dst1[tail] = src1[tail];
}
