package plan

import (
	"cmp"
	"fmt"

	"github.com/vkrt/vkrt/dryrun/replay"
	"github.com/vkrt/vkrt/dryrun/trace"
	"github.com/vkrt/vkrt/memory"
	vkruntime "github.com/vkrt/vkrt/runtime"
)

// measuredVirtual is the virtual pool of a report measured under the
// Virtual layout, if it was.
func measuredVirtual(report memory.Report) (memory.VirtualKind, bool) {
	if len(report.Dynamic) != 1 {
		return memory.VirtualKind{}, false
	}
	k, ok := report.Dynamic[0].Kind.(memory.VirtualKind)
	return k, ok
}

// deriveVirtual is the plan of a stream measured under the Virtual layout.
// A basic plan (or one without the stream) names the device memory the dry
// run needed at its peak. A strong one also places the stream: its arena
// assignment, pages laid end to end in the address range, becomes the
// slots a run takes while it follows the stream, and the planned memory is
// what the stream needs under them.
func deriveVirtual(k memory.VirtualKind, opts Options) (memory.Layout, error) {
	// Replays place on the granule the stream was measured on (0: the
	// replay model's), so the plan's memory is that of the device the run
	// will have.
	granule := cmp.Or(k.GranuleSize, replay.H200Granule)
	switch {
	case opts.Trace == nil && k.NeededPeakBytes == 0:
		// The Virtual layout with no plan in it, as the plan of a run
		// that allocated nothing.
		return memory.Layout{}, fmt.Errorf("%w: the report's virtual pool never needed a byte", ErrCannotPlan)
	case opts.Trace == nil:
		return memory.VirtualLayout(memory.VirtualPlan{PlannedBytes: k.NeededPeakBytes}), nil
	case opts.Strength == Basic:
		return basicVirtual(opts.Trace, opts.Device, granule, k.NeededPeakBytes)
	}
	return virtualSlots(opts.Trace, opts.Device, granule, opts.searchSteps(), opts.Progress)
}

// basicVirtualRounds bounds how often basicVirtual replays its stream.
const basicVirtualRounds = 4

// basicVirtual is the basic plan of stream t: the device memory its dry
// run needed (needed), raised to what t needs under that plan. A pool growing
// towards a plan takes other chunks than one with none, so other granules
// are bound where TLSF looks, and a reservation may land elsewhere: a
// stream of 14 reservations needed 153,223,168 B with no plan and one
// granule more under a plan of that, which then counted a spill on the
// very run it was measured on. Replayed under the plan until it needs no
// more than the plan, it fits its own run.
func basicVirtual(t *trace.Trace, device vkruntime.DeviceProperties, granule, needed uint64) (memory.Layout, error) {
	plan := memory.VirtualPlan{PlannedBytes: needed}
	for range basicVirtualRounds {
		run, err := replay.Run(t, memory.VirtualLayout(plan), replay.Options{Device: device, Granule: granule})
		if err != nil {
			return memory.Layout{}, fmt.Errorf("plan: measuring %s under its basic plan: %w", t.Name, err)
		}
		k, ok := measuredVirtual(run.Report)
		if !ok || k.NeededPeakBytes <= plan.PlannedBytes {
			break
		}
		plan.PlannedBytes = k.NeededPeakBytes
	}
	return memory.VirtualLayout(plan), nil
}

// virtualSlots places the stream on the granule it was measured on, so
// the plan's pages and its planned memory are those of the device the run
// will have.
func virtualSlots(t *trace.Trace, device vkruntime.DeviceProperties, granule uint64, searchSteps int, report func(done, total int)) (memory.Layout, error) {
	arena, err := arenaLayout(t, device, searchSteps, report)
	if err != nil {
		return memory.Layout{}, err
	}
	a, _ := arena.Arena()
	bases := make([]uint64, len(a.Pages))
	var end uint64
	for i, size := range a.Pages {
		// Pages start on granules, so the arena's packing within a page
		// is the packing of granules.
		bases[i] = end
		end += alignUp(size, granule)
	}
	plan := memory.VirtualPlan{Slots: make([]memory.VirtualSlot, len(a.Slots))}
	for k, s := range a.Slots {
		plan.Slots[k] = memory.VirtualSlot{Size: s.Size, Offset: bases[s.Page] + s.Offset}
	}
	// Where the pool's need grew, reservation by reservation: what the
	// plan's profile is marked from; and what it needed at the end of the
	// stream's settled start.
	var grew []memory.VirtualMark
	var ordinal, high uint64
	settled := settledStart(t)
	observe := func(i int, m *memory.Manager) {
		if t.Events[i].Op != trace.OpAlloc {
			return
		}
		if k, ok := measuredVirtual(m.Report()); ok && k.NeededPeakBytes > high {
			high = k.NeededPeakBytes
			grew = append(grew, memory.VirtualMark{Ordinal: ordinal, Bytes: high})
		}
		if ordinal+1 == settled {
			plan.Settled = memory.VirtualMark{Ordinal: ordinal, Bytes: high}
		}
		ordinal++
	}
	run, err := replay.Run(t, memory.VirtualLayout(plan), replay.Options{Device: device, Granule: granule, Observe: observe})
	if err != nil {
		return memory.Layout{}, fmt.Errorf("plan: measuring %s under its slots: %w", t.Name, err)
	}
	k, ok := measuredVirtual(run.Report)
	if !ok {
		return memory.Layout{}, fmt.Errorf("%w: the replay device has no sparse residency for a virtual plan", ErrCannotPlan)
	}
	plan.PlannedBytes = k.NeededPeakBytes
	plan.Profile = profileOf(grew, plan.PlannedBytes, granule)
	return memory.VirtualLayout(plan), nil
}

// settledStart is how many of a stream's first reservations live as long
// as it reserves anything (freed, if at all, after its last reservation,
// as a process frees everything at its end): a model's weights and state,
// which every run of the workload makes alike before its batches, prompts
// and shapes set it apart.
func settledStart(t *trace.Trace) uint64 {
	lifetimes := lifetimesOf(t, 1) // by allocation ordinal; End is the allocations made by the free
	var n uint64
	for n < uint64(len(lifetimes)) && lifetimes[n].End == int32(len(lifetimes)) {
		n++
	}
	return n
}

// profileMarks: a profile marks where the stream's need has grown by a
// 256th of its peak since the last mark, so it stays a few kilobytes
// however long the stream.
const profileMarks = 256

// profileOf marks, of where a stream's need grew under its slots (the
// granules its live reservations touched at once, at most, as the virtual
// pool counts them), each growth by peak/profileMarks since the last mark
// and the peak. A run of the workload that leaves the planned stream
// compares its own growth with it to foresee its peak.
func profileOf(grew []memory.VirtualMark, peak, granule uint64) []memory.VirtualMark {
	var out []memory.VirtualMark
	var marked uint64
	step := max(peak/profileMarks, granule)
	for _, g := range grew {
		if g.Bytes >= marked+step || g.Bytes >= peak {
			out = append(out, g)
			marked = g.Bytes
		}
	}
	return out
}
