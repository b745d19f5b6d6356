package plan

import (
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
	if opts.Strength == Basic || opts.Trace == nil {
		return memory.VirtualLayout(memory.VirtualPlan{PlannedBytes: k.NeededPeakBytes}), nil
	}
	return virtualSlots(opts.Trace, opts.Device, opts.searchSteps(), opts.Progress)
}

func virtualSlots(t *trace.Trace, device vkruntime.DeviceProperties, searchSteps int, report func(done, total int)) (memory.Layout, error) {
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
		end += alignUp(size, replay.H200Granule)
	}
	plan := memory.VirtualPlan{Slots: make([]memory.VirtualSlot, len(a.Slots))}
	for k, s := range a.Slots {
		plan.Slots[k] = memory.VirtualSlot{Size: s.Size, Offset: bases[s.Page] + s.Offset}
	}
	run, err := replay.Run(t, memory.VirtualLayout(plan), replay.Options{Device: device})
	if err != nil {
		return memory.Layout{}, fmt.Errorf("plan: measuring %s under its slots: %w", t.Name, err)
	}
	k, ok := measuredVirtual(run.Report)
	if !ok {
		return memory.Layout{}, fmt.Errorf("%w: the replay device has no sparse residency for a virtual plan", ErrCannotPlan)
	}
	plan.PlannedBytes = k.NeededPeakBytes
	plan.Profile = needProfile(t, plan.Slots, replay.H200Granule, plan.PlannedBytes)
	return memory.VirtualLayout(plan), nil
}

// profileMarks: a profile marks where the stream's need has grown by a
// 256th of its peak since the last mark, so it stays a few kilobytes
// however long the stream.
const profileMarks = 256

// needProfile is how the need of the stream t grows under its slots, as
// the virtual pool counts it: the granules its live reservations touch at
// once, at most, up to each reservation, marked each time it has grown by
// peak/profileMarks and at the peak. A run of the workload that leaves the
// planned stream compares its own growth with it to foresee its peak.
// Live slots never overlap, so a reservation's inner granules are its own
// and only its end granules may be another's: those are counted.
func needProfile(t *trace.Trace, slots []memory.VirtualSlot, granule, peak uint64) []memory.VirtualMark {
	if len(slots) == 0 || peak == 0 {
		return nil
	}
	var end uint64
	for _, s := range slots {
		end = max(end, s.Offset+s.Size)
	}
	ends := make([]uint32, (end+granule-1)/granule)
	var need, high, marked, ordinal uint64
	var out []memory.VirtualMark
	step := max(peak/profileMarks, granule)
	for _, e := range t.Events {
		if int(e.Index) >= len(slots) {
			continue
		}
		s := slots[e.Index]
		g0, g1 := s.Offset/granule, (s.Offset+s.Size-1)/granule
		if e.Op == trace.OpFree {
			need -= max(g1-g0, 1) - 1
			for _, g := range []uint64{g0, g1}[:1+min(g1-g0, 1)] {
				if ends[g]--; ends[g] == 0 {
					need--
				}
			}
			continue
		}
		need += max(g1-g0, 1) - 1
		for _, g := range []uint64{g0, g1}[:1+min(g1-g0, 1)] {
			if ends[g]++; ends[g] == 1 {
				need++
			}
		}
		if bytes := need * granule; bytes > high {
			high = bytes
			if high >= marked+step || high >= peak {
				out = append(out, memory.VirtualMark{Ordinal: ordinal, Bytes: high})
				marked = high
			}
		}
		ordinal++
	}
	return out
}
