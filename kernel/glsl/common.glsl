// Shared by the kernels: one-dimensional work groups laid out over a
// two-dimensional grid (x fastest), so element counts past the device's
// maxComputeWorkGroupCount[0] work groups still fit; every kernel loops with
// the grid's stride, so any grid size is correct.
#define WG 256
layout(local_size_x = WG, local_size_y = 1, local_size_z = 1) in;

uint group_index() { return gl_WorkGroupID.y * gl_NumWorkGroups.x + gl_WorkGroupID.x; }
uint group_count() { return gl_NumWorkGroups.x * gl_NumWorkGroups.y; }
uint global_index() { return group_index() * WG + gl_LocalInvocationID.x; }
uint global_stride() { return group_count() * WG; }
