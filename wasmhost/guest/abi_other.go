//go:build !wasip1

package guest

import "unsafe"

// Outside a WebAssembly host there is no vkrt_v1 to call: every call
// answers ENOSYS, so the package's pure parts build and test anywhere.

const noHost = uint32(ENOSYS)

func bufferCreate(uint64, unsafe.Pointer) uint32                 { return noHost }
func bufferWrite(uint32, uint64, unsafe.Pointer, uint32) uint32  { return noHost }
func bufferRead(uint32, uint64, unsafe.Pointer, uint32) uint32   { return noHost }
func bufferFree(uint32) uint32                                   { return noHost }
func launch(unsafe.Pointer, uint32) uint32                       { return noHost }
func syncAll() uint32                                            { return noHost }
func memoryUsage(unsafe.Pointer) uint32                          { return noHost }
func memoryReport(unsafe.Pointer, uint32, unsafe.Pointer) uint32 { return noHost }
func memoryRecord(unsafe.Pointer, uint32) uint32                 { return noHost }
func memoryInstall(unsafe.Pointer, uint32) uint32                { return noHost }
func persistentBegin() uint32                                    { return noHost }
func persistentEnd() uint32                                      { return noHost }
func isDryRun(unsafe.Pointer) uint32                             { return noHost }
func lastError(unsafe.Pointer, uint32, unsafe.Pointer) uint32    { return noHost }
