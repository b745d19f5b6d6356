package vk

import "fmt"

// room is what the storage admits an allocation against: what it holds,
// the heap, its limit (0: none), the heap's budget and the process's usage
// of it as VK_EXT_memory_budget reports them (budget 0: the device has no
// budget), and the allocation count against the device's maximum.
type room struct {
	allocated, heap, limit      uint64
	budget, usage               uint64
	allocations, maxAllocations uint64
}

// refuse says why held more bytes cannot be allocated, "" when they can.
// The budget is the whole process's: usage beyond what the storage holds
// (staging buffers, other devices' memory on the heap) counts against it
// too.
func (r room) refuse(held uint64) string {
	total := r.allocated + held
	others := r.usage - min(r.usage, r.allocated)
	switch {
	case total < held || total > r.heap:
		return fmt.Sprintf("the heap: the storage holds %d B of its %d B", r.allocated, r.heap)
	case r.limit != 0 && total > r.limit:
		return fmt.Sprintf("the storage's memory limit: %d B held, %d B free", r.allocated, r.limit-min(r.limit, r.allocated))
	case r.budget != 0 && (total+others < total || total+others > r.budget):
		return fmt.Sprintf("the heap's budget: %d B, of which the process uses %d B (%d B by this storage)", r.budget, r.usage, r.allocated)
	case r.allocations >= r.maxAllocations:
		return fmt.Sprintf("the device allows %d allocations and the storage holds %d", r.maxAllocations, r.allocations)
	}
	return ""
}
