// Package plan turns a dry run into a memory layout for the real run.
//
// [Derive] makes a plan from a dry run's report (a basic plan: every pool
// capped at its peak) or from the exact allocation stream (a strong plan:
// an offline arena assignment of every allocation, with sliced pools as the
// fallback of a run that diverges). A dry run measured under the Virtual
// layout gets a virtual plan instead: the device memory the run needs, and
// with the stream, the strong plan's places as slots in the address range.
// [Measure] replays a stream, plans from
// the replay and replays the stream again under the plan. [Runs] plans from
// several dry runs of one workload into a versioned [File], what `vkrt plan
// TRACE... --out` writes and [ReadFile] reads back.
package plan

import (
	"errors"
	"fmt"

	"github.com/vkrt/vkrt/dryrun/replay"
	"github.com/vkrt/vkrt/dryrun/trace"
	"github.com/vkrt/vkrt/memory"
	vkruntime "github.com/vkrt/vkrt/runtime"
)

// Strength says how hard Derive works.
type Strength int

const (
	// Basic is the seeds' cycle: every pool capped at the pages it peaked at.
	Basic Strength = iota
	// Strong is an offline arena assignment of the dry run's exact stream,
	// with the SubSlices pools as fallback for a real run that diverges. It
	// is never worse than Basic: when it would reserve more, Derive returns
	// the basic plan.
	Strong
)

func (s Strength) String() string {
	switch s {
	case Basic:
		return "basic"
	case Strong:
		return "strong"
	}
	return fmt.Sprintf("Strength(%d)", int(s))
}

// Options configure Derive.
type Options struct {
	Strength Strength
	// Trace is the exact stream the report was measured on. Strong plans
	// need it; a basic plan with it re-measures the stream under the capped
	// pools' own routing, so that replaying it under the plan fits by
	// construction.
	Trace *trace.Trace
	// Device is the device the plan is for; zero means H200.
	Device vkruntime.DeviceProperties
	// SearchSteps bounds the search that lowers a strong plan's arena
	// pages below what the greedy placements reach: zero
	// means DefaultSearchSteps, a negative number no search. It is counted
	// in steps, not time, so a plan does not depend on the machine.
	SearchSteps int
	// Progress, when set, is called as a strong plan's work advances, with
	// the work done and its total (allocations placed by each greedy
	// placement, then search steps), from one goroutine at a time.
	Progress func(done, total int)
}

// ErrCannotPlan classifies reports and options Derive cannot make a plan of.
var ErrCannotPlan = errors.New("plan: cannot plan")

// maxPlannedBytes bounds the bytes a planned stream holds at once: the
// planner sums sizes and offsets in 64 bits (signed where it counts what
// is live), and no device comes near it.
const maxPlannedBytes = 1 << 62

// plannableBytes refuses, as ErrCannotPlan, a stream whose live bytes pass
// maxPlannedBytes at some point: its sizes would wrap in the planner's
// sums (a size of 2^64 - 1 aligned to 0 B) and give a wrong plan or a
// confusing error.
func plannableBytes(t *trace.Trace) error {
	sizes := make([]uint64, t.Allocations)
	var live uint64
	for _, e := range t.Events {
		if e.Op != trace.OpAlloc {
			live -= sizes[e.Index]
			continue
		}
		if e.Size > maxPlannedBytes-live {
			return fmt.Errorf("%w: %s %s: %d B more with %d B live pass the %d B a plan can hold", ErrCannotPlan, t.Name, e.Where(), e.Size, live, uint64(maxPlannedBytes))
		}
		sizes[e.Index] = e.Size
		live += e.Size
	}
	return nil
}

// maxStrongAllocations bounds the allocations of a stream a strong plan is
// derived from: it gives each a slot, and the pools take no more than
// memory.MaxArenaSlots. A variable so a test need not make 2^24 of them.
var maxStrongAllocations = memory.MaxArenaSlots

// growableCap is the page cap of a pool measured "uncapped": a capped pool
// routes by max_slice alone, so capping it later at its peak keeps the
// routing the measurement saw.
const growableCap = 65535

// Derive turns a dry run's report into a layout for the real run.
// A report measured under the Virtual layout gets a virtual plan: the
// device memory the dry run needed at its peak, and for a strong plan the
// stream's arena assignment laid out as slots in the address range. A report measured under pools the basic plan cannot cap
// (direct, arena) still gets a strong plan, then without the comparison.
//
// A stream with no allocation (one built by hand; trace.Read refuses it),
// or a report of a dry run that allocated nothing, has no placement to
// plan: it is refused as ErrCannotPlan, whatever the strength or the
// layout measured under.
func Derive(report memory.Report, opts Options) (memory.Layout, error) {
	if opts.Trace != nil {
		// A stream built by hand is checked as a replay checks it.
		if err := opts.Trace.Check(); err != nil {
			return memory.Layout{}, err
		}
		if opts.Trace.Allocations == 0 {
			// A basic plan of it under the Virtual layout was that
			// layout with no plan in it, where every other refused it.
			return memory.Layout{}, fmt.Errorf("%w: %s has no allocations", ErrCannotPlan, opts.Trace.Name)
		}
		if err := oneStream(opts.Trace); err != nil {
			return memory.Layout{}, err
		}
		if err := plannableBytes(opts.Trace); err != nil {
			return memory.Layout{}, err
		}
		if n := opts.Trace.Allocations; opts.Strength == Strong && n > maxStrongAllocations {
			return memory.Layout{}, fmt.Errorf("%w: %s makes %d allocations, more than the %d slots a strong plan holds (one each): plan a shorter run of it, or a basic plan",
				ErrCannotPlan, opts.Trace.Name, n, maxStrongAllocations)
		}
	}
	if k, ok := measuredVirtual(report); ok && (opts.Strength == Basic || opts.Strength == Strong) {
		return deriveVirtual(k, opts)
	}
	if err := opts.checkStrength(); err != nil {
		return memory.Layout{}, err
	}
	if opts.Strength == Basic {
		return planBasic(report, opts)
	}
	if opts.Trace == nil {
		return memory.Layout{}, fmt.Errorf("%w: a strong plan needs the dry run's stream, got none", ErrCannotPlan)
	}
	whole, err := arenaLayout(opts.Trace, opts.Device, opts.searchSteps(), opts.Progress)
	if err != nil {
		return memory.Layout{}, err
	}
	arena, _ := whole.Arena()
	strong := memory.ArenaLayout(cutPages(arena))
	basic, err := planBasic(report, opts)
	if err != nil {
		// A basic plan the device cannot hold (its pages measured past the
		// device's memory) is no plan: the strong one, which replayed on
		// the same device, stands.
		if errors.Is(err, ErrCannotPlan) || errors.Is(err, vkruntime.ErrOutOfDeviceMemory) || errors.Is(err, vkruntime.ErrPoolCapacityExceeded) {
			return strong, nil
		}
		return memory.Layout{}, err
	}
	return leaner(opts.Trace, strong, basic, opts.Device)
}

// leaner is the layout whose replay of t reserves less at its peak, the
// candidate on a tie; one that fails to replay loses, and only both
// failing is an error (a basic plan that did not hold its own run on the
// device failed the strong plan that did).
func leaner(t *trace.Trace, candidate, fallback memory.Layout, device vkruntime.DeviceProperties) (memory.Layout, error) {
	ro := replay.Options{Device: device}
	fallbackRun, fallbackErr := replay.Run(t, fallback, ro)
	candidateRun, err := replay.Run(t, candidate, ro)
	switch {
	case err != nil && fallbackErr != nil:
		return memory.Layout{}, fmt.Errorf("plan: replaying the %s layout: %w", fallback.Kind(), fallbackErr)
	case err != nil:
		return fallback, nil
	case fallbackErr != nil || candidateRun.ReservedPeakBytes <= fallbackRun.ReservedPeakBytes:
		return candidate, nil
	}
	return fallback, nil
}

// Measured is a dry run of a stream, the plan made from it and the replay
// of the stream under that plan.
type Measured struct {
	DryRun  *replay.Result
	Planned *replay.Result // Planned.Layout is the plan
}

// Measure replays t under the layout it is measured with, plans from the
// result (opts.Trace is set to t) and replays t under the plan. A nil t is
// refused with trace.ErrNil, as a replay refuses it, and one with no
// allocation as ErrCannotPlan, as Derive refuses it.
func Measure(t *trace.Trace, measured memory.Layout, opts Options) (*Measured, error) {
	// Options Derive refuses are refused before the dry run is replayed.
	if err := opts.checkStrength(); err != nil {
		return nil, err
	}
	ro := replay.Options{Device: opts.Device}
	dry, err := replay.Run(t, measured, ro)
	if err != nil {
		return nil, err
	}
	opts.Trace = t
	layout, err := Derive(dry.Report, opts)
	if err != nil {
		return nil, fmt.Errorf("plan: planning %s: %w", t.Name, err)
	}
	run, err := replay.Run(t, layout, ro)
	if err != nil {
		return nil, fmt.Errorf("plan: replaying %s under its plan: %w", t.Name, err)
	}
	return &Measured{DryRun: dry, Planned: run}, nil
}

// basicPools mirrors the report's pools as pools of a Sliced layout,
// capped at their pages_peak (at least one page). An exclusive pool stays
// exclusive (memory.SlicedPool.Exclusive), taking what it could be routed
// (its own largest, or anything the pool before it declined) in pages of
// each reservation's size: it held at most pages_peak allocations at once.
// Made a sliced pool of pages of the largest, it let a smaller buffer of
// another run take a slice of such a page, and a large one after it then
// found the page's free room too small and the device without memory for
// another: on devices without sparse residency 1.25–4× the larger run's
// peak (largest pages of 256 MiB and 4 GiB), of 548 replays of generated
// runs of seeds 31–40 under the other run's basic plan that the SubSlices
// preset ran, 60 had no plan (measuring the plan on its own run failed so)
// and 12 failed; with exclusive pools 14 and 8 (seeds 41–60: 140 and 14 of
// 1,060, now 24 and 4). With dropUnused, pools that never held a page are
// left out.
func basicPools(report memory.Report, alignment uint64, dropUnused bool) ([]memory.SlicedPool, error) {
	var pools []memory.SlicedPool
	var prevPage uint64
	for i, pr := range report.Dynamic {
		peak := min(max(pr.PagesPeak, 1), growableCap)
		switch k := pr.Kind.(type) {
		case memory.SlicedKind:
			prevPage = k.PageSize
			if pr.PagesPeak == 0 && dropUnused {
				continue
			}
			maxSlice := k.MaxSliceSize
			pools = append(pools, memory.SlicedPool{PageSize: k.PageSize, Pages: &peak, MaxSlice: &maxSlice})
		case memory.ExclusiveKind:
			page := alignUp(max(pr.LargestAlloc, prevPage, 1), alignment)
			prevPage = page
			if pr.LargestAlloc == 0 || (pr.PagesPeak == 0 && dropUnused) {
				// Never used, it would add a page the plan never reaches:
				// the exclusive pool the manager ends a plan in takes what
				// passes its pages (planning again from a plan's report
				// gained a pool each time).
				continue
			}
			pools = append(pools, memory.SlicedPool{PageSize: page, Pages: &peak, Exclusive: true})
		case nil:
			// A report built by hand; MarshalJSON below panicked on it.
			return nil, fmt.Errorf("%w: dynamic pool %d of the report has no kind", ErrCannotPlan, i)
		default:
			kind, _ := pr.Kind.MarshalJSON()
			return nil, fmt.Errorf("%w: the basic plan caps sliced and exclusive pools; dynamic pool %d is %s", ErrCannotPlan, i, kind)
		}
	}
	if len(pools) == 0 {
		return nil, fmt.Errorf("%w: the report's %d dynamic pools never held a page", ErrCannotPlan, len(report.Dynamic))
	}
	return pools, nil
}

func planBasic(report memory.Report, opts Options) (memory.Layout, error) {
	device := deviceOrH200(opts.Device)
	pools, err := basicPools(report, device.Alignment, false)
	if err != nil {
		return memory.Layout{}, err
	}
	if opts.Trace == nil {
		if err := sameRoutingWhenCapped(report); err != nil {
			return memory.Layout{}, err
		}
		// No replay checks it against the device, as one does the plan
		// of a stream: pages a report built by hand gives past the
		// device, or past 2^64 once aligned, made a plan no run installs.
		l := forecast(pools)
		if err := l.Validate(device); err != nil {
			return memory.Layout{}, fmt.Errorf("%w: the report's pools make no plan for the device: %w", ErrCannotPlan, err)
		}
		return l, nil
	}
	// Measure the stream again under the capped pools' routing (an uncapped
	// pool also takes sizes near its page; a capped one does not), growable,
	// and with the exclusive pool a plan ends in for what passes them.
	for i := range pools {
		growable := uint64(growableCap)
		pools[i].Pages, pools[i].Grow = &growable, true
	}
	run, err := replay.Run(opts.Trace, memory.SlicedLayout(pools...), replay.Options{Device: opts.Device})
	if err != nil {
		return memory.Layout{}, fmt.Errorf("plan: measuring the basic plan: %w", err)
	}
	if pools, err = basicPools(run.Report, device.Alignment, true); err != nil {
		return memory.Layout{}, err
	}
	return forecast(pools), nil
}

// forecast makes capped pools a plan: each grows past its cap (warning and
// counting spills) rather than refusing, and the layout then ends in an
// exclusive pool (memory resolves every list with a growing pool so), where
// what is larger than any planned page takes a device allocation of its
// own size, so a run bigger than its dry run costs memory, never the run.
// One way-out pool of the largest page gave a 24 MB buffer a 4 GiB page,
// and a run under a 120 MB memory limit failed with 44 MB held. A ladder of
// uncapped pools, each page four times the one before, held free room in
// pieces too small for the next buffer: over generated runs under other
// runs' plans on a device without sparse residency it reserved 1.108× what
// SubSlices did, against 1.030× now (7 % more device allocations), and
// failed 132 replays the default layout ran, against 90 now (of 6,235 and
// 6,280: more plans are made now).
func forecast(pools []memory.SlicedPool) memory.Layout {
	for i := range pools {
		pools[i].Grow = true
	}
	return memory.SlicedLayout(pools...)
}

// sameRoutingWhenCapped refuses a report whose stream a capped plan would
// route differently, so that a basic plan made from the report alone fits
// the stream it was measured on. An uncapped sliced pool also takes
// reservations near its page size, above its max_slice; a capped one does
// not, and those reservations would land in the next pool, past its cap.
// The report shows this when a pool served more than its max_slice.
func sameRoutingWhenCapped(report memory.Report) error {
	for i, pr := range report.Dynamic {
		k, ok := pr.Kind.(memory.SlicedKind)
		if ok && k.MaxPoolSize == nil && pr.LargestAlloc > k.MaxSliceSize {
			return fmt.Errorf("%w: a basic plan from the report alone would not fit its stream: uncapped dynamic pool %d "+
				"(pages of %s) served reservations up to %s, above its max_slice of %s, which a capped pool refuses; "+
				"give the stream (Options.Trace) or measure under capped pools",
				ErrCannotPlan, i, memory.FormatBytes(k.PageSize), memory.FormatBytes(pr.LargestAlloc), memory.FormatBytes(k.MaxSliceSize))
		}
	}
	return nil
}

// oneStream refuses a trace that allocates on several streams: a client's
// pools, and so its plans, are per stream.
func oneStream(t *trace.Trace) error {
	first, seen := uint32(0), false
	for _, e := range t.Events {
		if e.Op != trace.OpAlloc {
			continue
		}
		if !seen {
			first, seen = e.Stream, true
		} else if e.Stream != first {
			return fmt.Errorf("%w: %s allocates on streams %d and %d; pools and plans are per stream: plan each stream's allocations alone",
				ErrCannotPlan, t.Name, first, e.Stream)
		}
	}
	return nil
}

// checkStrength refuses a Strength Derive does not know, as ErrCannotPlan.
func (o Options) checkStrength() error {
	switch o.Strength {
	case Basic, Strong:
		return nil
	}
	return fmt.Errorf("%w: unknown strength %d (want Basic or Strong)", ErrCannotPlan, int(o.Strength))
}

func (o Options) searchSteps() int {
	if o.SearchSteps == 0 {
		return DefaultSearchSteps
	}
	return max(o.SearchSteps, 0)
}

// arenaLayout is the arena assignment of the stream as a layout, its
// pages whole.
func arenaLayout(t *trace.Trace, device vkruntime.DeviceProperties, searchSteps int, report func(done, total int)) (memory.Layout, error) {
	d := deviceOrH200(device)
	if t.Allocations == 0 {
		return memory.Layout{}, fmt.Errorf("%w: %s has no allocations", ErrCannotPlan, t.Name)
	}
	lifetimes := lifetimesOf(t, d.Alignment)
	a, _, err := planArena(lifetimes, d.MaxPageSize, searchSteps, report)
	if err != nil {
		return memory.Layout{}, err
	}
	return memory.ArenaLayout(arenaPlanOf(a, lifetimes)), nil
}

// arenaPlanOf is the arena plan of an assignment of lifetimes.
func arenaPlanOf(a assignment, lifetimes []lifetime) memory.ArenaPlan {
	plan := memory.ArenaPlan{Pages: a.Pages, Slots: make([]memory.ArenaSlot, len(lifetimes))}
	for k, l := range lifetimes {
		plan.Slots[k] = memory.ArenaSlot{Size: l.Size, Page: a.Placements[k].Page, Offset: a.Placements[k].Offset}
	}
	return plan
}

// deviceOrH200 is d, or the replays' default device when d is zero.
func deviceOrH200(d vkruntime.DeviceProperties) vkruntime.DeviceProperties {
	if d == (vkruntime.DeviceProperties{}) {
		return replay.H200()
	}
	return d
}
