// Package guest is the Go SDK of vkrt's WebAssembly guests: programs built
// with GOOS=wasip1 GOARCH=wasm that a vkrt host (package wasmhost, `vkrt
// run`) runs on a GPU through the vkrt_v1 ABI.
//
// A guest makes device buffers (NewBuffer, NewFloat32s), writes and reads
// them, and runs the built-in kernels on them with the typed launches
// (Add, MatMul, Softmax, …), one at a time (Launch.Run) or as a batch in one
// submission (Run). It never sees a device address: a Buffer names a handle
// the host checks on every call.
//
// Every failed call is an *Error carrying the host's status and message;
// errors.Is matches it against the status sentinels (EBADF, EDQUOT, …).
// Under a dry run (DryRun reports it) the host keeps the pools' accounting
// exact but runs nothing: launches are checked and dropped, reads give
// zeros, so a guest that checks its numbers skips the check there.
//
// Built for another target, the package compiles and its pure parts
// (descriptors, launches, errors) work, but every host call answers ENOSYS.
package guest
