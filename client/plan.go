package client

import (
	"context"
	"errors"
	"fmt"
	"time"

	"github.com/vkrt/vkrt/dryrun"
	"github.com/vkrt/vkrt/dryrun/plan"
	"github.com/vkrt/vkrt/dryrun/trace"
	"github.com/vkrt/vkrt/memory"
	"github.com/vkrt/vkrt/runtime/environment"
)

// ErrPlanSpilled: the real run under a measured plan did not fit it; some
// reservations spilled past a full capped pool.
var ErrPlanSpilled = errors.New("client: the real run spilled past its measured plan")

// ErrPlanReplaced: a layout was installed on the stream during the real
// run under a measured plan (by the workload, or by another caller on the
// same stream), so the run did not follow the plan and its spills and
// reservations are not the plan's.
var ErrPlanReplaced = errors.New("client: a layout was installed on the stream in the real run (by the workload or another caller), which replaced the measured plan: the run did not follow the plan, so nothing of it was verified")

// ErrPersistentWindow: MeasurePlan was asked to verify a plan on a stream
// inside a persistent window, where the real run's buffers would all go to
// the persistent pool, which no plan covers: the run would verify nothing.
var ErrPersistentWindow = errors.New("client: the stream is inside a persistent window")

// Workload is a piece of work written against a client: it allocates and
// launches on the calling stream of ctx (client.Create, client.Run, …) and
// frees what it made before it returns.
type Workload func(ctx context.Context) error

// MeasureOptions configure MeasurePlan.
type MeasureOptions struct {
	// Layout is the growable layout the dry run is measured under. Nil is
	// the layout the client was opened with (WithLayout; by default
	// memory.VirtualLayout(memory.VirtualPlan{}), whose pools are the
	// SubSlices ones on a device without sparse residency), not a plan
	// installed since: a plan's capped pools would measure the plan, not
	// the workload.
	Layout *memory.Layout
	// Plan configures the planner. Device is always the client's device and
	// Trace the dry run's exact allocation stream.
	Plan plan.Options
	// Verify runs the workload for real under the installed plan and fails
	// with ErrPlanSpilled if anything spilled, or with ErrPlanReplaced if
	// a layout was installed on the stream meanwhile. The stream must not
	// be inside a persistent window (ErrPersistentWindow, before the dry
	// run), nor closed before the real run ends (ErrClosed).
	Verify bool
	// Label, when set, records the pools into the client's environment:
	// "<Label>: dry run" after the dry run and "<Label>: real run" after the
	// verification. A label either record would refuse is refused before
	// the workload runs, with the environment's error
	// (environment.ErrInvalidRecord).
	Label string
}

// dryRunLabel and realRunLabel end the labels of MeasurePlan's records.
const dryRunLabel, realRunLabel = ": dry run", ": real run"

// Measurement is what MeasurePlan saw and did.
type Measurement struct {
	// DryRun is the measuring stream's report after the dry run.
	DryRun memory.Report
	// DeviceBytes is how much the device's storage grew over the dry run:
	// 0 unless the workload has real-run scopes.
	DeviceBytes uint64
	// Trace is the dry run's allocation stream.
	Trace *trace.Trace
	// Plan is the layout installed on the calling stream.
	Plan memory.Layout
	// Verified: the real run ran (Verify) and Spills and Real are set.
	Verified bool
	Spills   uint64
	Real     memory.Report
	// PlanReplaced: a layout was installed on the stream in the real run
	// (by the workload or another caller), after which Spills and Real are
	// that layout's (MeasurePlan fails with ErrPlanReplaced).
	PlanReplaced bool
	// DryWall and RealWall are the wall-clock times of the two runs.
	DryWall, RealWall time.Duration
}

// MaxMeasuredAllocations bounds the allocations a dry run of MeasurePlan
// records: the host memory the trace takes (about 64 B an allocation and
// its free) is bounded by it, where a workload creating and freeing one
// buffer in a loop made it grow without end (a guest under vkrt plan,
// within its quotas, by 286 MiB in 4 s). Past it the dry run goes on
// without recording and the measurement fails (plan.ErrCannotPlan): a
// plan of so many reservations is far past any model's stream
// (llama_generate's trace, the longest shipped, holds 286,475 events).
const MaxMeasuredAllocations = 1 << 22

// measuredAllocations is MaxMeasuredAllocations, lowered by tests.
var measuredAllocations = MaxMeasuredAllocations

// MeasurePlan measures workload with a dry run on a fresh stream under
// opts.Layout (by default the layout the client was opened with), plans a
// layout from the report, installs it on the calling stream (which must
// hold no live dynamic buffers) as Client.InstallMemoryPools does, so
// streams created afterwards get it too, and, with opts.Verify, runs the
// workload for real there and checks it fit. A nil workload is refused
// with ErrNilFunction before anything is made.
func (c *Client) MeasurePlan(ctx context.Context, workload Workload, opts MeasureOptions) (*Measurement, error) {
	if c.isNil() {
		return nil, ErrNil
	}
	if workload == nil {
		// It would be called in the dry run, a nil function's panic.
		return nil, fmt.Errorf("%w: MeasurePlan was given no workload to measure", ErrNilFunction)
	}
	target, err := c.CallingStream(ctx)
	if err != nil {
		return nil, err
	}
	// A closed stream is refused before the workload runs, not after a dry
	// run whose plan has nowhere to go.
	if _, err := target.openReport(); err != nil {
		return nil, err
	}
	// So is a verification inside a persistent window (the dry run's fresh
	// stream has none): every buffer of the real run went to the
	// persistent pool, and a plan the run far outgrew verified with 0
	// spills.
	if opts.Verify {
		if err := target.outsidePersistent(); err != nil {
			return nil, err
		}
	}
	// So is a label its records would refuse, not after the dry run.
	if opts.Label != "" {
		for _, run := range []string{dryRunLabel, realRunLabel} {
			if err := environment.CheckLabel(opts.Label + run); err != nil {
				// The environment's words name the record's label, not the
				// one the caller gave.
				return nil, prefixed(err, "MeasureOptions.Label of %d B, with %q added, labels a record", len(opts.Label), run)
			}
		}
	}
	layout := c.opened
	if opts.Layout != nil {
		layout = *opts.Layout
	}
	probe, err := c.newStream(&layout)
	if err != nil {
		return nil, err
	}
	defer probe.Close()
	probe.mu.Lock()
	probe.trace = &trace.Trace{Name: fmt.Sprintf("stream %d dry run", probe.id)}
	probe.mu.Unlock()

	storage := c.storage
	before := storage.Allocated()
	start := time.Now()
	dryCtx := dryrun.With(WithStream(ctx, probe))
	if err := workload(dryCtx); err != nil {
		return nil, fmt.Errorf("client: dry run of the workload: %w", err)
	}
	m := &Measurement{DryWall: time.Since(start)}
	if after := storage.Allocated(); after > before {
		m.DeviceBytes = after - before
	}
	probe.mu.Lock()
	full := probe.traceFull
	m.DryRun = probe.mgr.Report()
	if !full {
		m.Trace = probe.trace
	}
	probe.trace = nil
	probe.mu.Unlock()
	if full {
		// The dry run ended well: what it measured is returned with the
		// error, as for a plan the planner refuses (vkrt plan --json
		// writes its line from it).
		return m, kindError{
			msg:  fmt.Sprintf("client: the dry run made more than %d allocations, more than a measurement records: measure a shorter run of the workload", measuredAllocations),
			kind: plan.ErrCannotPlan,
		}
	}
	if opts.Label != "" {
		if _, err := c.RecordMemory(WithStream(ctx, probe), opts.Label+dryRunLabel); err != nil {
			return m, err
		}
	}

	if m.Trace.Allocations == 0 {
		// Said plainly: the planner's own word was "the stream stream 1
		// dry run has no allocations".
		return m, errNothingToPlan
	}
	// The exact stream lets even a basic plan re-measure under the capped
	// pools' own routing.
	po := opts.Plan
	po.Device, po.Trace = c.props, m.Trace
	if m.Plan, err = plan.Derive(m.DryRun, po); err != nil {
		return m, fmt.Errorf("client: planning from the dry run: %w", err)
	}
	// The installs are counted with the plan's: one another caller makes
	// on the stream from here on replaces the plan the run is verified
	// against.
	installs, err := c.installOn(target, m.Plan)
	if err != nil {
		return m, prefixed(err, "installing the measured plan")
	}
	if !opts.Verify {
		return m, nil
	}
	start = time.Now()
	realCtx := dryrun.RealRun(WithStream(ctx, target))
	if err := target.outsidePersistent(); err != nil {
		return m, err // a window opened meanwhile
	}
	err = workload(realCtx)
	m.RealWall = time.Since(start) // a failed run's time too: it said 0 s
	spills, real, replaced, closed := target.runUnder(installs)
	m.PlanReplaced = replaced
	if err != nil {
		return m, fmt.Errorf("client: real run under the measured plan: %w", err)
	}
	if closed != nil {
		// Its pools, and the plan installed on them, went with it: a
		// closed stream's report reads as a run that fitted.
		return m, fmt.Errorf("client: the stream of the real run under the measured plan was closed before it ended: %w", closed)
	}
	m.Verified, m.Spills, m.Real = true, spills, real
	if opts.Label != "" {
		if _, err := c.RecordMemory(realCtx, opts.Label+realRunLabel); err != nil {
			return m, err
		}
	}
	if m.PlanReplaced {
		// Spills since the workload's install are its own layout's.
		return m, ErrPlanReplaced
	}
	if m.Spills > 0 {
		return m, fmt.Errorf("%w: %d reservations spilled under %s", ErrPlanSpilled, m.Spills, m.Plan.Brief())
	}
	return m, nil
}

// errNothingToPlan is MeasurePlan's refusal of a dry run that made no
// buffer. It matches plan.ErrCannotPlan, whose words ("plan: cannot plan")
// are not repeated after its own: the message said "…nothing to plan:
// plan: cannot plan".
var errNothingToPlan error = kindError{
	msg:  "client: the dry run of the workload made no buffer on its stream, so there is nothing to plan",
	kind: plan.ErrCannotPlan,
}

// kindError is an error of its own words that matches kind.
type kindError struct {
	msg  string
	kind error
}

func (e kindError) Error() string { return e.msg }

func (e kindError) Unwrap() error { return e.kind }
