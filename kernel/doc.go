// Package kernel is vkrt's catalogue of compute kernels and the description
// of a launch, independent of any device: what each kernel computes, the
// buffers it binds, its push constants and work-group size ([All], [ByName]),
// typed launches that pack push constants and size grids ([Add], [MatMul],
// [Softmax], …), the embedded SPIR-V the Vulkan backend compiles, and
// [Validate], which checks a dispatch against a device's [Limits] without
// touching a device. Every backend (Vulkan, the pure-Go cpu device) runs
// the same catalogue, so a launch checked here means the same everywhere.
//
// It is pure Go: it builds without cgo and for wasm.
package kernel
