//go:build wasip1

package guest

import "unsafe"

// The vkrt_v1 imports, one for one. Pointers are offsets in the guest's
// memory, lengths u32, device sizes and offsets u64.

//go:wasmimport vkrt_v1 buffer_create
func bufferCreate(size uint64, outHandle unsafe.Pointer) uint32

//go:wasmimport vkrt_v1 buffer_write
func bufferWrite(handle uint32, offset uint64, src unsafe.Pointer, n uint32) uint32

//go:wasmimport vkrt_v1 buffer_read
func bufferRead(handle uint32, offset uint64, dst unsafe.Pointer, n uint32) uint32

//go:wasmimport vkrt_v1 buffer_free
func bufferFree(handle uint32) uint32

//go:wasmimport vkrt_v1 launch
func launch(desc unsafe.Pointer, n uint32) uint32

//go:wasmimport vkrt_v1 sync
func syncAll() uint32

//go:wasmimport vkrt_v1 memory_usage
func memoryUsage(out unsafe.Pointer) uint32

//go:wasmimport vkrt_v1 memory_report
func memoryReport(buf unsafe.Pointer, n uint32, outLen unsafe.Pointer) uint32

//go:wasmimport vkrt_v1 memory_record
func memoryRecord(label unsafe.Pointer, n uint32) uint32

//go:wasmimport vkrt_v1 memory_install
func memoryInstall(layout unsafe.Pointer, n uint32) uint32

//go:wasmimport vkrt_v1 persistent_begin
func persistentBegin() uint32

//go:wasmimport vkrt_v1 persistent_end
func persistentEnd() uint32

//go:wasmimport vkrt_v1 is_dry_run
func isDryRun(out unsafe.Pointer) uint32

// The host keeps no pointer it is given past the call: a message read
// into the stack stays there (see lastErrorNow).
//
//go:noescape
//go:wasmimport vkrt_v1 last_error
func lastError(buf unsafe.Pointer, n uint32, outLen unsafe.Pointer) uint32
