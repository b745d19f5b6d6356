//go:build cgo

package vk

import (
	"runtime/debug"
	"sync"
)

// gcHold keeps the garbage collector off while the few vulkan-go calls
// that still copy structures run: instance and device creation and the
// device description, once per Open. Their nested copies are freed by
// finalizers until the enclosing copy takes them over, a few instructions
// later; holding the collector off narrows that window further. It cannot
// close a window that lasts a whole call: debug.SetGCPercent(-1) does not
// stop a cycle that passed its trigger check just before, which is why
// every call that hands the driver an array of structures, or runs often,
// goes through calls.go instead.
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
