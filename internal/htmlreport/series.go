package htmlreport

import (
	"fmt"

	"github.com/vkrt/vkrt/dryrun/plan"
	"github.com/vkrt/vkrt/dryrun/replay"
	"github.com/vkrt/vkrt/dryrun/trace"
	"github.com/vkrt/vkrt/memory"
)

// Run is one replay of a stream under one layout, charted.
type Run struct {
	Result *replay.Result
	// Pools are the manager's pools in report order: the dynamic ones, then
	// the persistent one.
	Pools []memory.PoolReport
	// Samples are the downsampled states, every peak kept.
	Samples []Sample
	// PeakLiveEvent and PeakReservedEvent are the first events at which
	// the totals peak.
	PeakLiveEvent, PeakReservedEvent int
	// Growths counts the events at which the pools' reservation grew, and
	// LastGrowth is the last of them: a workload in its stride should stop
	// growing its pools early.
	Growths    int
	LastGrowth int
}

// Replay replays t under l and charts the pools in buckets buckets of
// events (one per pixel column of the chart).
func Replay(t *trace.Trace, l memory.Layout, buckets int) (*Run, error) {
	run := &Run{}
	var (
		ds             *Downsampler
		live, reserved []uint64
		peakLive       uint64
		peakReserved   uint64
	)
	var lastReserved uint64
	observe := func(i int, m *memory.Manager) {
		r := m.Report()
		if ds == nil {
			n := len(r.Dynamic) + 1
			ds = NewDownsampler(len(t.Events), buckets, n)
			live, reserved = make([]uint64, n), make([]uint64, n)
		}
		for p, pr := range r.Dynamic {
			live[p], reserved[p] = pr.Usage.BytesInUse, pr.Usage.BytesReserved
		}
		live[len(live)-1], reserved[len(reserved)-1] = r.Persistent.Usage.BytesInUse, r.Persistent.Usage.BytesReserved
		ds.Add(i, live, reserved)
		u := m.Usage()
		if u.BytesInUse > peakLive {
			peakLive, run.PeakLiveEvent = u.BytesInUse, i
		}
		if u.BytesReserved > peakReserved {
			peakReserved, run.PeakReservedEvent = u.BytesReserved, i
		}
		if u.BytesReserved > lastReserved {
			run.Growths++
			run.LastGrowth = i
		}
		lastReserved = u.BytesReserved
	}
	res, err := replay.Run(t, l, replay.Options{Observe: observe})
	if err != nil {
		return nil, err
	}
	run.Result = res
	run.Pools = append(append(run.Pools, res.Report.Dynamic...), res.Report.Persistent)
	if ds != nil {
		run.Samples = ds.Samples()
	}
	if peakLive != res.PeakLiveBytes || peakReserved != res.ReservedPeakBytes {
		return nil, fmt.Errorf("htmlreport: %s: the observed peaks (%d B live, %d B reserved) are not the replay's (%d B, %d B)",
			t.Name, peakLive, peakReserved, res.PeakLiveBytes, res.ReservedPeakBytes)
	}
	return run, nil
}

// TraceReport is a stream replayed under a layout without a plan and under
// a plan.
type TraceReport struct {
	Name        string
	Events      int
	Allocations int
	Default     *Run
	Plan        *Run
	// DefaultName names the layout without a plan, PlanSource says where
	// the plan came from.
	DefaultName, PlanSource string
}

// Layouts are what a trace is replayed under.
type Layouts struct {
	// Default is the layout of the run without a plan, the dry run a plan
	// is derived from; DefaultName names it on the page ("default layout").
	Default     memory.Layout
	DefaultName string
	// Plan, when set, is the plan to replay under; otherwise one is derived
	// from the trace's own dry run, as `vkrt replay --plan` does.
	Plan *PlanFrom
}

// PlanFrom is a plan given rather than derived.
type PlanFrom struct {
	Layout memory.Layout
	// Source names the plan on the page.
	Source string
}

// ReplayTrace replays t without a plan and under the plan.
func ReplayTrace(t *trace.Trace, ls Layouts, buckets int) (*TraceReport, error) {
	dry, err := Replay(t, ls.Default, buckets)
	if err != nil {
		return nil, err
	}
	var (
		layout memory.Layout
		source string
	)
	if ls.Plan != nil {
		layout, source = ls.Plan.Layout, ls.Plan.Source
	} else {
		if layout, err = plan.Derive(dry.Result.Report, plan.Options{Strength: plan.Strong, Trace: t}); err != nil {
			return nil, fmt.Errorf("planning %s: %w", t.Name, err)
		}
		source = "planned from this trace's dry run"
	}
	planned, err := Replay(t, layout, buckets)
	if err != nil {
		return nil, fmt.Errorf("replaying %s under the plan: %w", t.Name, err)
	}
	return &TraceReport{Name: t.Name, Events: len(t.Events), Allocations: t.Allocations, Default: dry, Plan: planned,
		DefaultName: ls.DefaultName, PlanSource: source}, nil
}
