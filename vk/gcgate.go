//go:build cgo

package vk

import (
	"runtime/debug"
	"sync"
)

// gcHold keeps the garbage collector off while calls that hand vulkan-go
// slices of structs run. vulkan-go copies such slices into C memory that a
// finalizer frees, and it sets the finalizer on a variable that is
// unreachable as soon as its helper returns: a collection during the C call
// frees the copy under the driver (a SIGSEGV in vkCreateComputePipelines,
// about 1 run in 15 of a concurrent workload at GOGC=1). Holding the
// collector off from before the copy is made until the call returns closes
// that window; the calls are short (no fence waits run under it).
var gcHold struct {
	mu      sync.Mutex
	holders int
	percent int
}

// withoutGC runs f with the collector held off; holds nest and overlap
// across goroutines, and the last to leave restores the collector.
func withoutGC(f func()) {
	gcHold.mu.Lock()
	if gcHold.holders == 0 {
		// Also waits for a collection in progress to finish.
		gcHold.percent = debug.SetGCPercent(-1)
	}
	gcHold.holders++
	gcHold.mu.Unlock()
	defer func() {
		gcHold.mu.Lock()
		gcHold.holders--
		if gcHold.holders == 0 {
			debug.SetGCPercent(gcHold.percent)
		}
		gcHold.mu.Unlock()
	}()
	f()
}
