#version 450
#extension GL_GOOGLE_include_directive : require
#include "common.glsl"
// out[i] = gelu(x[i]) for i < n (f32), the tanh approximation:
// 0.5 x (1 + tanh(sqrt(2/pi) (x + 0.044715 x^3)))
layout(std430, binding = 0) readonly buffer X { float x[]; };
layout(std430, binding = 1) writeonly buffer Out { float dst[]; };
layout(push_constant) uniform Push { uint n; } p;
void main() {
	for (uint i = global_index(); i < p.n; i += global_stride()) {
		float v = x[i];
		float u = 0.7978845608028654 * (v + 0.044715 * v * v * v);
		// tanh(u) = 1 - 2 / (exp(2u) + 1), clamped so exp cannot overflow
		float t = 1.0 - 2.0 / (exp(2.0 * clamp(u, -15.0, 15.0)) + 1.0);
		dst[i] = 0.5 * v * (1.0 + t);
	}
}
