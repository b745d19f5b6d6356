//go:build wasip1

// Command bench times host calls from inside a Go guest: `bench MODE N`
// makes N calls of one kind, checks each status, and prints the
// nanoseconds they took together (it needs the host's clocks).
//
// Modes: write (a valid 64-byte buffer_write), bad-handle (EBADF),
// out-of-range (ERANGE), fault (EFAULT), sync (the cheapest call), start
// (nothing: the cost of starting the guest).
package main

import (
	"fmt"
	"os"
	"strconv"
	"time"
	"unsafe"
)

//go:wasmimport vkrt_v1 buffer_create
func bufferCreate(size uint64, out unsafe.Pointer) uint32

// bufferWrite takes src as a plain address so the benchmark can pass one
// outside its memory.
//
//go:wasmimport vkrt_v1 buffer_write
func bufferWrite(handle uint32, offset uint64, src uint32, n uint32) uint32

//go:wasmimport vkrt_v1 sync
func syncCall() uint32

func fail(format string, args ...any) {
	fmt.Fprintf(os.Stderr, format+"\n", args...)
	os.Exit(3)
}

func main() {
	if len(os.Args) != 3 {
		fail("usage: bench MODE N")
	}
	mode := os.Args[1]
	n, err := strconv.Atoi(os.Args[2])
	if err != nil {
		fail("N: %v", err)
	}
	if mode == "start" {
		return
	}
	var h uint32
	if s := bufferCreate(4096, unsafe.Pointer(&h)); s != 0 {
		fail("buffer_create: status %d", s)
	}
	var data [64]byte
	src := uint32(uintptr(unsafe.Pointer(&data)))
	handle, offset, want := h, uint64(128), uint32(0)
	switch mode {
	case "write":
	case "bad-handle":
		handle, want = h+1, 8
	case "out-of-range":
		offset, want = 4090, 68
	case "fault":
		src, want = 0xFFFFFFF0, 21
	case "sync":
		start := time.Now()
		for range n {
			if s := syncCall(); s != 0 {
				fail("sync: status %d", s)
			}
		}
		fmt.Println(time.Since(start).Nanoseconds())
		return
	default:
		fail("unknown mode %q", mode)
	}
	start := time.Now()
	for range n {
		if s := bufferWrite(handle, offset, src, 64); s != want {
			fail("buffer_write: status %d, want %d", s, want)
		}
	}
	fmt.Println(time.Since(start).Nanoseconds())
}
