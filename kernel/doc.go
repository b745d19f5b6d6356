// Package kernel is vkrt's catalogue of compute kernels and the description
// of a launch, independent of any device: what each kernel computes, the
// buffers it binds, its push constants and work-group size ([All], [ByName]),
// typed launches that pack push constants and size grids ([Add], [MatMul],
// [Softmax], …), the embedded SPIR-V the Vulkan backend compiles, and
// [Validate], which checks a dispatch against a device's [Limits] without
// touching a device. Every backend (Vulkan, the pure-Go cpu device) runs
// the same catalogue, so a launch checked here means the same everywhere.
//
// Every device computes the same results: fill, copy and transpose move
// bits; add, mul, scale and relu are single f32 operations, rounded to
// nearest even, so exact (NaN payloads are not kept, and a device may
// flush subnormals to zero and need not keep NaNs, as Vulkan allows
// without float controls: the cpu device and lavapipe keep both, while
// NVIDIA's relu gives 0 for a NaN); gelu, softmax, layernorm, reduce_sum
// and matmul are within the tolerance of the float64 result their Doc
// states.
//
// An empty launch, one with nothing to compute (n = 0; rows or cols 0 for
// softmax, layernorm and transpose; M or N 0 for matmul), succeeds on
// every device, on any grid within the device's limits, and writes no byte,
// but for reduce_sum's out: each work group the grid runs writes its sum of
// no element, 0. A grid with a dimension of 0 runs no work group, as
// vkCmdDispatch's does, so [Validate] refuses one for a launch with work
// (matmul's K = 0 still writes M x N zeros), whose output it would leave
// unwritten: every kernel alike, with a *[DispatchError] that matches
// [ErrInvalidDispatch].
//
// It is pure Go: it builds without cgo and for wasm.
package kernel
