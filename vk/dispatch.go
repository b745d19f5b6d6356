//go:build cgo

package vk

import (
	"context"
	"errors"
	"fmt"
	"math"
	"sync/atomic"
	"time"
	"unsafe"

	vulkan "github.com/vulkan-go/vulkan"

	"github.com/vkrt/vkrt/device"
	"github.com/vkrt/vkrt/kernel"
	vkruntime "github.com/vkrt/vkrt/runtime"
)

// pipeline is one kernel made ready to dispatch on one device.
type pipeline struct {
	module    vulkan.ShaderModule
	setLayout vulkan.DescriptorSetLayout
	layout    vulkan.PipelineLayout
	handle    vulkan.Pipeline
}

func (p *pipeline) destroy(dev vulkan.Device) {
	if p.handle != nil {
		vulkan.DestroyPipeline(dev, p.handle, nil)
	}
	if p.layout != nil {
		vulkan.DestroyPipelineLayout(dev, p.layout, nil)
	}
	if p.setLayout != nil {
		vulkan.DestroyDescriptorSetLayout(dev, p.setLayout, nil)
	}
	if p.module != nil {
		vulkan.DestroyShaderModule(dev, p.module, nil)
	}
}

// pipelineFor builds the kernel's pipeline on first use.
func (d *Device) pipelineFor(k kernel.Kernel) (*pipeline, error) {
	d.pipeMu.Lock()
	defer d.pipeMu.Unlock()
	if p, ok := d.pipelines[k.Name]; ok {
		return p, nil
	}
	p, err := d.buildPipeline(k)
	if err != nil {
		return nil, err
	}
	d.pipelines[k.Name] = p
	return p, nil
}

// buildPipeline makes the kernel's shader module, layouts and pipeline;
// caller holds pipeMu and the collector off.
func (d *Device) buildPipeline(k kernel.Kernel) (*pipeline, error) {
	code, err := k.SPIRV()
	if err != nil {
		return nil, err
	}
	words := make([]uint32, len(code)/4)
	for i := range words {
		words[i] = uint32(code[4*i]) | uint32(code[4*i+1])<<8 | uint32(code[4*i+2])<<16 | uint32(code[4*i+3])<<24
	}
	p := &pipeline{}
	fail := func(call string, r vulkan.Result) (*pipeline, error) {
		p.destroy(d.handle)
		return nil, fmt.Errorf("kernel %q: %w", k.Name, d.noteResult(call, r))
	}
	module, r := d.calls.createShaderModule(words)
	if r != vulkan.Success {
		return fail("vkCreateShaderModule", r)
	}
	p.module = module
	setLayout, r := d.calls.createStorageSetLayout(len(k.Bindings))
	if r != vulkan.Success {
		return fail("vkCreateDescriptorSetLayout", r)
	}
	p.setLayout = setLayout
	layout, r := d.calls.createPipelineLayout(setLayout, k.PushSize())
	if r != vulkan.Success {
		return fail("vkCreatePipelineLayout", r)
	}
	p.layout = layout
	handle, r := d.calls.createComputePipeline(module, layout)
	if r != vulkan.Success {
		return fail("vkCreateComputePipelines", r)
	}
	p.handle = handle
	return p, nil
}

// Dispatch runs ops in order, each one's writes visible to the next, and
// waits for all of them. Every op is checked before any is recorded:
// kernel.Validate against the device's limits, then that the bindings name
// live allocations of the device's storage and lie inside them; a refused
// batch changes nothing, and its error matches device.ErrNothingRan as
// well as its own kind. The error is the first refused op's, whichever
// check refused it, and names the op ("op 1 of 3: …") in a batch of
// several, as the cpu device's does.
//
// Under a context that can end, the batch runs in submissions, each
// waited for before the next is recorded, each holding the ops that the
// device's pace (dispatchPace: their kernel.Cost against how long earlier
// submissions ran) says end within submissionTarget, one op at least.
// When ctx ends, Dispatch returns ctx.Err() at once; the submission running
// then finishes on the GPU on its own (no device stops a dispatch once
// submitted) while the pages the batch binds stay allocated, later work on
// the device waits for it, and the ops after it never run. Under a context
// that cannot end (context.Background()) the batch is one submission. A
// whole batch in one submission held the device past a caller's deadline
// for as long as the batch ran: a guest launching 40 matmuls of 1024 x 1024
// under vkrt run --timeout 2s on lavapipe was ended at 2 s, and the device,
// with every launch behind it, was held until the command exited at 105 s
// (3 s in submissions).
func (d *Device) Dispatch(ctx context.Context, ops []kernel.Op) error {
	if err := ctx.Err(); err != nil {
		return err
	}
	if err := d.begin(); err != nil {
		return err
	}
	defer d.end()
	// What is checked is what runs: the ops are recorded after the check,
	// from slices the caller may change meanwhile, and a binding moved
	// after its check would be bound unchecked (past its allocation).
	own := kernel.OwnOps(ops)
	limits := d.Limits()
	var handles, unrun []vkruntime.StorageHandle
	live := make([]kernel.Op, 0, own.Len())
	for i := range own.Len() {
		op := own.Op(i)
		if err := kernel.Validate(op.Kernel, op.Grid, op.Bindings, op.Push, limits); err != nil {
			// An op before it whose bindings the storage refuses is the
			// batch's first fault, as the cpu device reports it.
			if bad := d.firstBadBindings(own, i); bad != nil {
				return device.NothingRan(bad)
			}
			return device.NothingRan(opError(i, len(ops), err))
		}
		if kernel.NoOp(op.Kernel, op.Grid, op.Push) {
			// Nothing to run (an empty launch on any grid would still run
			// every work group it names, idle), but its bindings are
			// checked as every op's.
			for _, h := range op.Bindings {
				if h.Size > 0 {
					unrun = append(unrun, h)
				}
			}
			continue
		}
		live = append(live, op)
		for _, h := range op.Bindings {
			if h.Size > 0 {
				handles = append(handles, h)
			}
		}
	}
	if len(unrun) > 0 { // the storage's lock is not taken for nothing
		if err := d.storage.check(unrun...); err != nil {
			return device.NothingRan(d.bindingsRefused(own, err))
		}
	}
	if len(live) == 0 {
		return nil
	}
	pipes := make([]*pipeline, len(live))
	for i, op := range live {
		var err error
		if pipes[i], err = d.pipelineFor(op.Kernel); err != nil {
			return device.NothingRan(err)
		}
	}
	pins, err := d.storage.pin(handles...)
	if err != nil {
		return device.NothingRan(d.bindingsRefused(own, err))
	}
	if afterCheck != nil {
		afterCheck()
	}
	if ctx.Done() == nil {
		return firstSubmission(d.submit(ctx, uint32(len(live)), d.recordOps(live, pipes, pins, false), func() { d.storage.unpin(pins) }))
	}
	// The pins are held by this loop and by each submission until the GPU
	// ends it; the last to let go unpins them. A submission the context
	// abandoned lets go when it ends, after the loop has.
	var holders atomic.Int32
	holders.Store(1)
	letGo := func() {
		if holders.Add(-1) == 0 {
			d.storage.unpin(pins)
		}
	}
	defer letGo()
	costs := make([]uint64, len(live))
	for i, op := range live {
		costs[i] = kernel.Cost(op.Kernel, op.Grid, op.Push)
	}
	budget := d.pace.budget()
	next := 0
	for from := 0; from < len(live); {
		if err := ctx.Err(); err != nil {
			return err
		}
		// The ops the budget holds, one at least.
		to, cost, n := from+1, costs[from], boundBindings(live[from])
		for to < len(live) && costs[to] <= budget && cost <= budget-costs[to] {
			cost += costs[to]
			n += boundBindings(live[to])
			to++
		}
		holders.Add(1)
		start := time.Now()
		if err := d.submit(ctx, uint32(to-from), d.recordOps(live[from:to], pipes[from:to], pins[next:next+n], from > 0), letGo); err != nil {
			if from == 0 {
				return firstSubmission(err)
			}
			return err // the submissions before it ran
		}
		budget = d.pace.learn(cost, submissionTook(start))
		if afterSubmission != nil {
			afterSubmission(from, to)
		}
		from, next = to, next+n
	}
	return nil
}

// opError is err of op i of a batch of n, naming the op where there are
// several.
func opError(i, n int, err error) error {
	if n > 1 {
		return fmt.Errorf("op %d of %d: %w", i, n, err)
	}
	return err
}

// firstBadBindings is the error of the first of own's ops before op end
// (checked by kernel.Validate) whose bindings the storage refuses, naming
// it; nil where it refuses none. The storage is asked op by op only once a
// batch is refused, so that the error is the first op's fault, whatever
// the kind: checked all together, a binding released in op 0 was reported
// after op 1's invalid grid, and a refused binding without its op.
func (d *Device) firstBadBindings(own kernel.OwnedOps, end int) error {
	for i := range end {
		var hs []vkruntime.StorageHandle
		for _, h := range own.Op(i).Bindings {
			if h.Size > 0 {
				hs = append(hs, h)
			}
		}
		if len(hs) == 0 {
			continue
		}
		if err := d.storage.check(hs...); err != nil {
			return opError(i, own.Len(), err)
		}
	}
	return nil
}

// bindingsRefused is the error of a batch whose bindings the storage
// refused with err, checked all together: the first op's refusal, naming
// it (err itself, should the ops' checks all pass).
func (d *Device) bindingsRefused(own kernel.OwnedOps, err error) error {
	if bad := d.firstBadBindings(own, own.Len()); bad != nil {
		return bad
	}
	return err
}

// firstSubmission is the error of a batch's first submission, marked as
// one before any op ran (device.NothingRan) where the submission never
// reached the queue: the client may then run the batch again.
func firstSubmission(err error) error {
	var unsent *unsubmittedError
	if errors.As(err, &unsent) {
		return device.NothingRan(err)
	}
	return err
}

// submissionTook is time.Since, which tests replace to set the pace.
var submissionTook = time.Since

// afterCheck, set by tests, is called once a batch's ops are checked and
// their pages pinned, before any is recorded.
var afterCheck func()

// afterSubmission, set by tests, is called with the ops [from, to) of a
// batch once their submission has ended on the GPU, where the batch runs
// in several.
var afterSubmission func(from, to int)

// submissionTarget is how long one submission of a batch that its context
// can end is meant to run: the most a context's end waits for, where the
// device's pace holds (as long as fenceWaitSlice, the wait's own step).
const submissionTarget = fenceWaitSlice

// dispatchPace is what a device has learned of its own pace: the cost
// (kernel.Cost) a submission of ops can hold to end within
// submissionTarget. It starts at 0, a submission of one op, and after
// each submission is what its pace would have done in submissionTarget,
// but at most twice its cost: a batch of small ops takes 1, 2, 4, ... of
// them a submission, and an op that costs more than the budget runs alone
// (a 1024 x 1024 matmul after fills: its device time is all the context's
// end waits for, not also the ops the budget would have put beside it).
type dispatchPace struct{ costPerTarget atomic.Uint64 }

func (p *dispatchPace) budget() uint64 { return p.costPerTarget.Load() }

// learn takes a submission of cost that ran for took and returns the next
// budget.
func (p *dispatchPace) learn(cost uint64, took time.Duration) uint64 {
	budget := float64(cost) * 2
	if took > 0 {
		budget = min(budget, float64(cost)*float64(submissionTarget)/float64(took))
	}
	b := uint64(math.MaxUint64)
	if budget < float64(math.MaxUint64) {
		b = uint64(budget)
	}
	p.costPerTarget.Store(b)
	return b
}

// boundBindings is how many of op's bindings are pinned: those of any
// size.
func boundBindings(op kernel.Op) int {
	n := 0
	for _, h := range op.Bindings {
		if h.Size > 0 {
			n++
		}
	}
	return n
}

// recordOps is the recording of ops (their pipelines pipes) into one
// submission, their bindings of any size lying in pins in order. Each op's
// reads wait for the writes before it; with afterEarlier, the first op's
// wait for those of submissions before this one too (a barrier's first
// scope holds every command submitted to the queue before it).
func (d *Device) recordOps(ops []kernel.Op, pipes []*pipeline, pins []pinned, afterEarlier bool) func(c *submitContext) error {
	return func(c *submitContext) error {
		next := 0
		var ranges []bufferRange
		for i, op := range ops {
			p := pipes[i]
			set, r := d.calls.allocateSet(c.descPool, p.setLayout)
			if err := d.noteResult("vkAllocateDescriptorSets", r); err != nil {
				return err
			}
			ranges = ranges[:0]
			for _, h := range op.Bindings {
				if h.Size == 0 {
					ranges = append(ranges, newBufferRange(d.empty.buffer, 0, d.empty.size))
					continue
				}
				ranges = append(ranges, newBufferRange(pins[next].page.buffer, h.Offset, h.Size))
				next++
			}
			if err := d.calls.writeStorageBuffers(set, ranges); err != nil {
				return err
			}
			if i > 0 || afterEarlier {
				d.calls.barrier(c.cmd)
			}
			vulkan.CmdBindPipeline(c.cmd, vulkan.PipelineBindPointCompute, p.handle)
			vulkan.CmdBindDescriptorSets(c.cmd, vulkan.PipelineBindPointCompute, p.layout, 0, 1, []vulkan.DescriptorSet{set}, 0, nil)
			if len(op.Push) > 0 {
				vulkan.CmdPushConstants(c.cmd, p.layout, vulkan.ShaderStageFlags(vulkan.ShaderStageComputeBit), 0, uint32(len(op.Push)), unsafe.Pointer(&op.Push[0]))
			}
			vulkan.CmdDispatch(c.cmd, op.Grid[0], op.Grid[1], op.Grid[2])
		}
		return nil
	}
}
