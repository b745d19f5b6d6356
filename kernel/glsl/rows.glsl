// Work-group reductions for the row kernels: one work group per row.
shared float partial[WG];

float group_sum(float v) {
	uint l = gl_LocalInvocationID.x;
	partial[l] = v;
	barrier();
	for (uint s = WG / 2; s > 0; s >>= 1) {
		if (l < s) partial[l] += partial[l + s];
		barrier();
	}
	float r = partial[0];
	barrier();
	return r;
}

float group_max(float v) {
	uint l = gl_LocalInvocationID.x;
	partial[l] = v;
	barrier();
	for (uint s = WG / 2; s > 0; s >>= 1) {
		if (l < s) partial[l] = max(partial[l], partial[l + s]);
		barrier();
	}
	float r = partial[0];
	barrier();
	return r;
}
