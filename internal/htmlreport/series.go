package htmlreport

import (
	"errors"
	"fmt"
	"slices"

	"github.com/vkrt/vkrt/dryrun/plan"
	"github.com/vkrt/vkrt/dryrun/replay"
	"github.com/vkrt/vkrt/dryrun/trace"
	"github.com/vkrt/vkrt/memory"
)

// Run is one replay of a stream under one layout, charted.
type Run struct {
	Result *replay.Result
	// Pools are the pools of every stream of the trace, in the order the
	// trace first allocates on the streams, each stream's in report order:
	// its dynamic pools, then its persistent one. PoolStreams names the
	// stream of each. Where they are more than MaxPools, ByStream is set
	// and Pools has one entry a stream instead, its pools' usage summed
	// (its Kind nil), and each stream is charted as one: PoolsPerStream
	// says how many pools it sums.
	Pools          []memory.PoolReport
	PoolStreams    []uint32
	ByStream       bool
	PoolsPerStream int
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

// poolLabel names pool p of the run, with its stream when the trace
// allocates on more than one.
func (r *Run) poolLabel(p int) string {
	switch {
	case r.ByStream && len(r.Result.Streams) > 1:
		return fmt.Sprintf("stream %d: its %d pools", r.PoolStreams[p], r.PoolsPerStream)
	case r.ByStream:
		return fmt.Sprintf("all %d pools", r.PoolsPerStream)
	case len(r.Result.Streams) > 1:
		return fmt.Sprintf("stream %d: %s", r.PoolStreams[p], poolLabel(r.Pools[p]))
	}
	return poolLabel(r.Pools[p])
}

// streamPools is what a chart last read of one stream's pools.
type streamPools struct {
	m *memory.Manager
	// usage is the manager's total when its pools were last read: while it
	// stays the same, so do they.
	usage memory.Usage
}

// poolsReader reads every pool's live and reserved bytes after each event
// of a replay: each stream's from its own manager, read again only when
// that manager's total changed. Reading every manager's total, not only
// the one of the event, keeps up with a cleanup that gives back what every
// stream's pools hold unused.
type poolsReader struct {
	perStream      int           // pools per manager: one layout builds the same pools
	byStream       bool          // each stream's pools read as one, their total
	streams        []streamPools // stream k's pools are the run's from k*perStream
	live, reserved []uint64
	usages         []memory.Usage // scratch for one manager's pools
	err            error
}

// read brings the pools up to date after an event on manager m, which
// holds the pools of the idx-th stream the trace allocates on, and returns
// the totals across the streams.
func (r *poolsReader) read(m *memory.Manager, idx int) (total memory.Usage) {
	r.streams[idx].m = m
	for k := range r.streams {
		s := &r.streams[k]
		if s.m == nil {
			continue
		}
		u := s.m.Usage()
		if u != s.usage {
			s.usage = u
			if r.byStream {
				r.live[k], r.reserved[k] = u.BytesInUse, u.BytesReserved
			} else {
				r.readPools(s.m, k*r.perStream)
			}
		}
		total.BytesInUse += u.BytesInUse
		total.BytesReserved += u.BytesReserved
	}
	return total
}

// readPools reads one manager's pools in report order into the run's
// pools from first.
func (r *poolsReader) readPools(m *memory.Manager, first int) {
	r.usages = m.PoolUsages(r.usages[:0])
	if len(r.usages) != r.perStream {
		if r.err == nil {
			r.err = fmt.Errorf("a stream's manager has %d pools, the first one's %d", len(r.usages), r.perStream)
		}
		return
	}
	for p, u := range r.usages {
		r.live[first+p], r.reserved[first+p] = u.BytesInUse, u.BytesReserved
	}
}

// MaxPools bounds the pools a chart draws: every stream a trace allocates
// on has pools of its own, and every pool costs each event of the replay
// (the chart reads them all after each event and keeps, per pixel column,
// the states at which each pool's edges peak, each state holding every
// pool). A few streams under the preset with the most pools (12 each)
// stay well under it; a trace of thousands of streams of one allocation
// each took minutes and gigabytes for a page nobody could read. Past it,
// a chart draws each stream as one, its pools summed (Run.ByStream): ten
// streams under SubSlices, 70 pools, were refused a chart.
const MaxPools = 64

// ErrTooManyPools: a chart of the trace would draw more than MaxPools
// streams.
var ErrTooManyPools = errors.New("htmlreport: too many pools to chart")

// Replay replays t under l and charts the pools in buckets buckets of
// events (one per pixel column of the chart). A trace that fails
// trace.Check (nil, or built by hand with an event naming no allocation)
// is refused with its error, as replay.Run refuses it.
func Replay(t *trace.Trace, l memory.Layout, buckets int) (*Run, error) {
	return chartedReplay(t, l, buckets, nil)
}

// chartedReplay is Replay telling step of the events replayed, every so
// many and once at the end (replay.Options.Progress), when step is set.
func chartedReplay(t *trace.Trace, l memory.Layout, buckets int, step func(done, total int)) (*Run, error) {
	// The events are read below before the replay checks them: a trace
	// built by hand freeing what it never allocated, or naming an
	// allocation past its count, panicked.
	if err := t.Check(); err != nil {
		return nil, fmt.Errorf("replay: %w", err)
	}
	run := &Run{}
	// The streams in the order the trace first allocates on them: the
	// order in which the replay builds their managers.
	streamIndex := map[uint32]int{}
	eventStream := make([]int32, len(t.Events))
	owner := make([]int32, t.Allocations)
	for i, e := range t.Events {
		if e.Op != trace.OpAlloc {
			eventStream[i] = owner[e.Index]
			continue
		}
		k, ok := streamIndex[e.Stream]
		if !ok {
			k = len(streamIndex)
			streamIndex[e.Stream] = k
		}
		eventStream[i], owner[e.Index] = int32(k), int32(k)
	}
	// Every stream has a pool at least: refuse before replaying.
	if len(streamIndex) > MaxPools {
		return nil, fmt.Errorf("%w: %s allocates on %d streams, each with pools of its own; a chart draws at most %d pools, or as many streams with each one's pools summed",
			ErrTooManyPools, t.Name, len(streamIndex), MaxPools)
	}
	var (
		ds           *Downsampler
		pools        *poolsReader
		peakLive     uint64
		peakReserved uint64
		lastReserved uint64
	)
	observe := func(i int, m *memory.Manager) {
		if pools == nil {
			per := len(m.PoolUsages(nil))
			n := per * len(streamIndex)
			run.ByStream, run.PoolsPerStream = n > MaxPools, per
			if run.ByStream {
				n = len(streamIndex)
			}
			pools = &poolsReader{perStream: per, byStream: run.ByStream, streams: make([]streamPools, len(streamIndex)), live: make([]uint64, n), reserved: make([]uint64, n)}
			ds = NewDownsampler(len(t.Events), buckets, n)
		}
		u := pools.read(m, int(eventStream[i]))
		ds.Add(i, pools.live, pools.reserved)
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
	res, err := replay.Run(t, l, replay.Options{Observe: observe, Progress: step})
	if err != nil {
		return nil, err
	}
	if pools != nil && pools.err != nil {
		return nil, fmt.Errorf("htmlreport: %s: %w", t.Name, pools.err)
	}
	run.Result = res
	for _, s := range res.Streams {
		if run.ByStream {
			run.Pools, run.PoolStreams = append(run.Pools, memory.PoolReport{Usage: s.Report.Usage()}), append(run.PoolStreams, s.Stream)
			continue
		}
		for _, p := range append(slices.Clip(s.Report.Dynamic), s.Report.Persistent) {
			run.Pools, run.PoolStreams = append(run.Pools, p), append(run.PoolStreams, s.Stream)
		}
	}
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
	// Plan is nil when no plan could be derived (NoPlan says why).
	Plan *Run
	// DefaultName names the layout without a plan, PlanSource says where
	// the plan came from.
	DefaultName, PlanSource string
	// NoPlan is why the trace has no plan run: the planner refused it (a
	// trace that allocates on several streams, whose pools and plans are
	// per stream). The run without a plan is drawn all the same.
	NoPlan error
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

// Progress is told of a trace's work as it goes, for a caller that shows
// it. Stage is called as each stage starts: the replay under the layout
// without a plan ("replaying NAME"), the planning ("planning NAME", only
// when the plan is derived) and the replay under the plan ("replaying NAME
// under the plan"), with the steps it counts: the trace's events for a
// replay, 1 for the planning, whose total the first Step brings. Step is
// called as the stage advances, with the steps done and their total. A nil
// func is not called.
type Progress struct {
	Stage func(desc string, steps int)
	Step  func(done, total int)
}

func (p Progress) stage(desc string, steps int) {
	if p.Stage != nil {
		p.Stage(desc, steps)
	}
}

// ReplayTrace replays t without a plan and under the plan, telling
// progress of each stage. A trace the planner refuses comes back without a
// plan run, NoPlan saying why, rather than as an error; one that fails
// trace.Check is refused with its error, as Replay refuses it.
func ReplayTrace(t *trace.Trace, ls Layouts, buckets int, progress Progress) (*TraceReport, error) {
	if err := t.Check(); err != nil {
		return nil, fmt.Errorf("replay: %w", err)
	}
	progress.stage("replaying "+t.Name, len(t.Events))
	dry, err := chartedReplay(t, ls.Default, buckets, progress.Step)
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
		progress.stage("planning "+t.Name, 1)
		if layout, err = plan.Derive(dry.Result.Report, plan.Options{Strength: plan.Strong, Trace: t, Progress: progress.Step}); err != nil {
			err = fmt.Errorf("planning %s: %w", t.Name, err)
			if errors.Is(err, plan.ErrCannotPlan) {
				// What can be drawn without a plan still is.
				return &TraceReport{Name: t.Name, Events: len(t.Events), Allocations: t.Allocations, Default: dry,
					DefaultName: ls.DefaultName, NoPlan: err}, nil
			}
			return nil, err
		}
		source = "planned from this trace's dry run"
	}
	progress.stage("replaying "+t.Name+" under the plan", len(t.Events))
	planned, err := chartedReplay(t, layout, buckets, progress.Step)
	if err != nil {
		return nil, fmt.Errorf("replaying %s under the plan: %w", t.Name, err)
	}
	return &TraceReport{Name: t.Name, Events: len(t.Events), Allocations: t.Allocations, Default: dry, Plan: planned,
		DefaultName: ls.DefaultName, PlanSource: source}, nil
}
