#version 450
#extension GL_GOOGLE_include_directive : require
#include "common.glsl"
// dst[i] = src[i] for i < n 32-bit words: 16-byte loads and stores, four in
// flight per invocation (each a grid's stride apart, so a work group's
// accesses stay contiguous), then the last n % 4 words one by one.
layout(std430, binding = 0) readonly buffer Src4 { uvec4 src4[]; };
layout(std430, binding = 0) readonly buffer Src1 { uint src1[]; };
layout(std430, binding = 1) writeonly buffer Dst4 { uvec4 dst4[]; };
layout(std430, binding = 1) writeonly buffer Dst1 { uint dst1[]; };
layout(push_constant) uniform Push { uint n; } p;
void main() {
	uint n4 = p.n / 4;
	uint i = global_index();
	uint stride = global_stride();
	uint j = i;
	for (; j + 3 * stride < n4; j += 4 * stride) {
		uvec4 v0 = src4[j], v1 = src4[j + stride], v2 = src4[j + 2 * stride], v3 = src4[j + 3 * stride];
		dst4[j] = v0;
		dst4[j + stride] = v1;
		dst4[j + 2 * stride] = v2;
		dst4[j + 3 * stride] = v3;
	}
	for (; j < n4; j += stride) dst4[j] = src4[j];
	uint tail = n4 * 4 + i;
	if (tail < p.n) dst1[tail] = src1[tail];
}
