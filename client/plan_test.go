package client

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"log/slog"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/vkrt/vkrt/device/cpu"
	"github.com/vkrt/vkrt/dryrun"
	"github.com/vkrt/vkrt/dryrun/plan"
	"github.com/vkrt/vkrt/memory"
	"github.com/vkrt/vkrt/runtime/environment"
)

// allocations is a workload that reserves sizes and frees them all; extra
// more buffers of the first size when it runs for real, so a plan measured
// dry is short for it.
func allocations(c *Client, extra int, sizes ...uint64) Workload {
	return func(ctx context.Context) error {
		all := append([]uint64(nil), sizes...)
		if !dryrun.Active(ctx) {
			for range extra {
				all = append(all, sizes[0])
			}
		}
		var bufs []*Buffer
		defer func() {
			for _, b := range bufs {
				_ = b.Free()
			}
		}()
		for _, n := range all {
			b, err := c.Empty(ctx, n)
			if err != nil {
				return err
			}
			bufs = append(bufs, b)
		}
		return nil
	}
}

func TestMeasurePlanSpill(t *testing.T) {
	var warnings bytes.Buffer
	c := openClient(t, WithLogger(slog.New(slog.NewTextHandler(&warnings, nil))))
	ctx := context.Background()
	growable := memory.SlicedLayout(
		memory.SlicedPool{PageSize: 1 << 20, MaxSlice: u64(64 << 10)},
		memory.SlicedPool{PageSize: 8 << 20},
	)
	sizes := []uint64{60 << 10, 60 << 10, 60 << 10, 60 << 10, 60 << 10, 60 << 10, 60 << 10, 60 << 10, 60 << 10, 60 << 10, 2 << 20}

	// The same stream dry and real fits its plan.
	m, err := c.MeasurePlan(ctx, allocations(c, 0, sizes...), MeasureOptions{Layout: &growable, Verify: true})
	require.NoError(t, err)
	require.Zero(t, m.Spills)
	require.Equal(t, m.Trace.Allocations, len(sizes))
	// The plan is the client's layout from then on, for new streams too.
	require.True(t, c.Layout().Equal(m.Plan))
	fresh, err := c.NewStream()
	require.NoError(t, err)
	require.True(t, fresh.Layout().Equal(m.Plan))
	require.NoError(t, fresh.Close())

	// A real run that reserves more than the dry one spills past the caps.
	m, err = c.MeasurePlan(ctx, allocations(c, 12, sizes...), MeasureOptions{Layout: &growable, Verify: true})
	require.ErrorIs(t, err, ErrPlanSpilled)
	require.True(t, m.Verified)
	require.Positive(t, m.Spills)
	require.ErrorContains(t, err, "reservations spilled under")
	require.Contains(t, warnings.String(), "needs more pages than its plan expected", "the pools warn on the client's logger")
}

// A real run that fails still has its wall-clock time: vkrt plan --verify
// stopped 2.8 s into it said "FAILED in 0.00 s".
func TestMeasurePlanTimesAFailedRealRun(t *testing.T) {
	c := openOnCPU(t, nil)
	runFailed := errors.New("stopped")
	dryRuns := 0
	m, err := c.MeasurePlan(context.Background(), func(ctx context.Context) error {
		if err := allocations(c, 0, 4096)(ctx); err != nil {
			return err
		}
		if dryrun.Active(ctx) {
			dryRuns++
			return nil
		}
		time.Sleep(20 * time.Millisecond)
		return runFailed
	}, MeasureOptions{Verify: true})
	require.ErrorIs(t, err, runFailed)
	require.Equal(t, 1, dryRuns)
	require.False(t, m.Verified)
	require.GreaterOrEqual(t, m.RealWall, 20*time.Millisecond)
}

// A workload that makes a buffer of 0 B is planned: its trace said "an
// allocation of 0 bytes", which a trace cannot hold, and MeasurePlan failed
// where the run itself went fine.
func TestMeasurePlanOfAZeroByteBuffer(t *testing.T) {
	c := openClient(t)
	m, err := c.MeasurePlan(context.Background(), allocations(c, 0, 4096, 0, 100), MeasureOptions{Verify: true})
	require.NoError(t, err)
	require.True(t, m.Verified)
	require.Zero(t, m.Spills, "the real run took the places planned, the 0 B one's included")
	require.Equal(t, 3, m.Trace.Allocations)
}

// A nil workload is refused with ErrNilFunction, where the dry run called
// it and panicked.
func TestMeasurePlanRefusesANilWorkload(t *testing.T) {
	c := openOnCPU(t, nil)
	before := c.MemoryReport(context.Background())
	m, err := c.MeasurePlan(context.Background(), nil, MeasureOptions{})
	require.ErrorIs(t, err, ErrNilFunction)
	require.EqualError(t, err, "client: nil function: MeasurePlan was given no workload to measure")
	require.Nil(t, m)
	require.Equal(t, before, c.MemoryReport(context.Background()), "nothing installed")
}

func TestMeasurePlanNeedsDrainedStream(t *testing.T) {
	c := openClient(t)
	ctx := context.Background()
	live, err := c.Empty(ctx, 4096)
	require.NoError(t, err)
	before := c.DefaultStream().Layout()
	m, err := c.MeasurePlan(ctx, allocations(c, 0, 1000, 2000), MeasureOptions{Verify: true})
	var ie *memory.InstallError
	require.ErrorAs(t, err, &ie)
	require.Equal(t, memory.PoolsInUse, ie.Kind)
	require.NotNil(t, m)
	require.False(t, m.Verified)
	require.True(t, c.DefaultStream().Layout().Equal(before), "the old layout is kept")
	require.Len(t, c.Streams(), 1, "the measuring stream is gone")
	require.NoError(t, live.Free())

	workErr := errors.New("workload failed")
	_, err = c.MeasurePlan(ctx, func(context.Context) error { return workErr }, MeasureOptions{})
	require.ErrorIs(t, err, workErr)

	// A workload that makes no buffer is told so, as ErrCannotPlan.
	_, err = c.MeasurePlan(ctx, func(context.Context) error { return nil }, MeasureOptions{})
	require.ErrorIs(t, err, plan.ErrCannotPlan)
	require.EqualError(t, err, "client: the dry run of the workload made no buffer on its stream, so there is nothing to plan",
		"said once, not followed by the words of ErrCannotPlan")
}

// MeasurePlan without a layout measures under the one the client was
// opened with (the Virtual default: one virtual range on a device with
// sparse residency, the SubSlices pools on one without), not under the plan
// an earlier measurement installed; an explicit SubSlices layout is still
// measured as such.
func TestMeasurePlanDefaultsToTheClientsLayout(t *testing.T) {
	ctx := context.Background()
	sizes := []uint64{1000, 60 << 10, 300 << 10, 2 << 20}
	subSlices := memory.SubSlicesLayout()
	virtualPools := func(r memory.Report) (kinds []memory.VirtualKind) {
		for _, p := range r.Dynamic {
			if k, ok := p.Kind.(memory.VirtualKind); ok {
				kinds = append(kinds, k)
			}
		}
		return kinds
	}
	t.Run("sparse residency", func(t *testing.T) {
		const granule = 64 << 10
		c := openOnCPU(t, []cpu.Option{cpu.WithSparseGranule(granule)})
		m, err := c.MeasurePlan(ctx, allocations(c, 0, sizes...), MeasureOptions{Verify: true})
		require.NoError(t, err)
		require.Len(t, m.DryRun.Dynamic, 1, "one range measured every size: %v", m.DryRun.Dynamic)
		pools := virtualPools(m.DryRun)
		require.Len(t, pools, 1, "the dry run's pool is virtual: %v", m.DryRun.Dynamic)
		require.Equal(t, uint64(granule), pools[0].GranuleSize)
		require.Zero(t, pools[0].PlannedBytes, "the dry run was measured unplanned")
		planned, isVirtual := m.Plan.Virtual()
		require.True(t, isVirtual, "a virtual dry run plans a virtual layout: %v", m.Plan)
		require.Positive(t, planned.PlannedBytes)
		require.Zero(t, m.Spills)
		require.True(t, c.Layout().Equal(m.Plan), "the plan is the layout of new streams now")

		// Measuring again starts from the client's layout, not the plan.
		again, err := c.MeasurePlan(ctx, allocations(c, 0, sizes...), MeasureOptions{})
		require.NoError(t, err)
		require.Equal(t, m.DryRun, again.DryRun)

		explicit, err := c.MeasurePlan(ctx, allocations(c, 0, sizes...), MeasureOptions{Layout: &subSlices})
		require.NoError(t, err)
		require.NotEmpty(t, explicit.DryRun.Dynamic)
		require.Empty(t, virtualPools(explicit.DryRun), "SubSlices asked, SubSlices measured: %v", explicit.DryRun.Dynamic)
		_, isVirtual = explicit.Plan.Virtual()
		require.False(t, isVirtual, "a SubSlices dry run plans sliced pools: %v", explicit.Plan)
	})
	t.Run("no sparse residency", func(t *testing.T) {
		c := openOnCPU(t, nil)
		byDefault, err := c.MeasurePlan(ctx, allocations(c, 0, sizes...), MeasureOptions{})
		require.NoError(t, err)
		explicit, err := c.MeasurePlan(ctx, allocations(c, 0, sizes...), MeasureOptions{Layout: &subSlices})
		require.NoError(t, err)
		require.NotEmpty(t, byDefault.DryRun.Dynamic)
		require.Empty(t, virtualPools(byDefault.DryRun))
		require.Equal(t, explicit.DryRun, byDefault.DryRun, "the very pools of the SubSlices layout")
		require.True(t, explicit.Plan.Equal(byDefault.Plan))
	})
}

// A dry run that makes more allocations than a measurement records fails
// the measurement once it ends (plan.ErrCannotPlan), its trace bounded: a workload creating
// and freeing one buffer in a loop grew the host's memory without end.
func TestMeasurePlanBoundsTheTrace(t *testing.T) {
	saved := measuredAllocations
	measuredAllocations = 100
	defer func() { measuredAllocations = saved }()
	c := openClient(t)
	ctx := context.Background()
	loop := func(n int) Workload {
		return func(ctx context.Context) error {
			for range n {
				b, err := c.Empty(ctx, 4096)
				if err != nil {
					return err
				}
				if err := b.Free(); err != nil {
					return err
				}
			}
			return nil
		}
	}
	m, err := c.MeasurePlan(ctx, loop(1000), MeasureOptions{})
	require.EqualError(t, err, "client: the dry run made more than 100 allocations, more than a measurement records: measure a shorter run of the workload")
	require.ErrorIs(t, err, plan.ErrCannotPlan, "there is no plan of it to make")
	// The dry run ended well: what it measured comes with the error, as
	// vkrt plan --json writes it, and no trace, as none was kept whole.
	require.NotNil(t, m)
	require.Nil(t, m.Trace)
	require.Positive(t, m.DryWall)
	require.NotEmpty(t, m.DryRun.Dynamic)
	m, err = c.MeasurePlan(ctx, loop(100), MeasureOptions{})
	require.NoError(t, err, "exactly the bound")
	require.Equal(t, 100, m.Trace.Allocations)
	require.Len(t, m.Trace.Events, 200)
}

// A label its records would refuse is refused before the workload runs:
// a label of 4,090 B, 4,096 B with ": dry run" added past the records'
// limit, ran the whole dry run and then failed with no plan installed.
func TestMeasurePlanRefusesItsRecordsLabelBeforeTheWorkloadRuns(t *testing.T) {
	env, records := recordsEnv(t)
	c := openOnCPU(t, sparse, UseEnvironment(env))
	ctx := context.Background()
	for _, label := range []string{strings.Repeat("x", 4090), "nul\x00inside", "\xff"} {
		ran := false
		_, err := c.MeasurePlan(ctx, func(context.Context) error { ran = true; return nil }, MeasureOptions{Label: label, Verify: true})
		require.ErrorIs(t, err, environment.ErrInvalidRecord, "label of %d B", len(label))
		require.False(t, ran, "label of %d B: the workload ran for records that could not be written", len(label))
		// In the client's words, naming the label given and what the
		// record's label adds to it.
		require.ErrorContains(t, err, fmt.Sprintf(`client: MeasureOptions.Label of %d B, with ": dry run" added, labels a record: environment: invalid record: `, len(label)))
	}
	require.Zero(t, records())
	_, err := c.MeasurePlan(ctx, allocations(c, 0, 1000), MeasureOptions{Label: strings.Repeat("x", 4086), Verify: true})
	require.NoError(t, err, "the longest label whose records fit")
	require.Equal(t, 2, records())
}

// A workload that installs a layout of its own on its stream in the real
// run replaced the plan: MeasurePlan fails with ErrPlanReplaced, where it
// verified the run with the spills counted from the workload's install,
// under the workload's own layout. One that installs in the dry run only
// is measured and verified as before.
func TestMeasurePlanTellsAWorkloadThatReplacedThePlan(t *testing.T) {
	c := openOnCPU(t, nil)
	installing := func(inRealRun bool, l memory.Layout) Workload {
		return func(ctx context.Context) error {
			if dryrun.Active(ctx) != inRealRun {
				s, err := c.CallingStream(ctx)
				if err != nil {
					return err
				}
				if err := s.InstallMemoryPools(l); err != nil {
					return err
				}
			}
			return allocations(c, 0, 4096, 1<<20)(ctx)
		}
	}
	m, err := c.MeasurePlan(context.Background(), installing(true, memory.DirectLayout()), MeasureOptions{Verify: true})
	require.ErrorIs(t, err, ErrPlanReplaced)
	require.True(t, m.Verified, "the real run ran")
	require.True(t, m.PlanReplaced)
	require.IsType(t, memory.DirectKind{}, m.Real.Dynamic[0].Kind, "the real run's report is the workload's own layout's")

	m, err = c.MeasurePlan(context.Background(), installing(false, memory.SubSlicesLayout()), MeasureOptions{Verify: true})
	require.NoError(t, err)
	require.False(t, m.PlanReplaced)
}

// A verification on a stream inside a persistent window verified nothing:
// the real run's buffers all went to the persistent pool, and a run far
// past its plan passed with 0 spills. It is refused before the dry run.
func TestMeasurePlanRefusesToVerifyInsideAPersistentWindow(t *testing.T) {
	c := openOnCPU(t, nil)
	outgrows := func(ctx context.Context) error {
		size := uint64(1000)
		if !dryrun.Active(ctx) {
			size = 3 << 20
		}
		b, err := c.Empty(ctx, size)
		if err != nil {
			return err
		}
		return b.Free()
	}
	_, err := c.MeasurePlan(context.Background(), outgrows, MeasureOptions{Verify: true})
	require.ErrorIs(t, err, ErrPlanSpilled, "outside a window the run outgrows its plan")
	s, err := c.NewStream()
	require.NoError(t, err)
	ran := 0
	require.NoError(t, c.Persistent(WithStream(context.Background(), s), func(ctx context.Context) error {
		_, err := c.MeasurePlan(ctx, func(ctx context.Context) error { ran++; return outgrows(ctx) }, MeasureOptions{Verify: true})
		require.ErrorIs(t, err, ErrPersistentWindow)
		require.ErrorContains(t, err, fmt.Sprintf("stream %d", s.ID()))
		// Planning alone is not refused: the dry run is on a stream of
		// its own.
		_, err = c.MeasurePlan(ctx, outgrows, MeasureOptions{})
		return err
	}))
	require.Zero(t, ran, "refused before the dry run")
}

// A workload that closes its stream in the real run took the plan's pools
// with it: MeasurePlan fails with ErrClosed, where it verified the closed
// stream's empty report.
func TestMeasurePlanFailsARealRunThatClosedItsStream(t *testing.T) {
	c := openOnCPU(t, nil)
	s, err := c.NewStream()
	require.NoError(t, err)
	m, err := c.MeasurePlan(WithStream(context.Background(), s), func(ctx context.Context) error {
		if err := allocations(c, 0, 4096)(ctx); err != nil {
			return err
		}
		if dryrun.Active(ctx) {
			return nil
		}
		cs, err := c.CallingStream(ctx)
		if err != nil {
			return err
		}
		return cs.Close()
	}, MeasureOptions{Verify: true})
	require.ErrorIs(t, err, ErrClosed)
	require.False(t, m.Verified)
}

// A zero Stream in the context is no stream (ErrNil), not another
// client's stream 0.
func TestAZeroStreamInTheContextIsNoStream(t *testing.T) {
	c := openOnCPU(t, nil)
	_, err := c.Empty(WithStream(context.Background(), &Stream{}), 4)
	require.ErrorIs(t, err, ErrNil)
	require.NotErrorIs(t, err, ErrForeignStream)
}

// An install another caller makes on the stream while MeasurePlan installs
// its plan and verifies it is never missed: the installs are counted with
// the plan's, under one lock. Counted after it, 3 of 3,000 measurements
// raced by an installer verified a run under the installer's layout.
func TestMeasurePlanNeverVerifiesAnotherCallersLayout(t *testing.T) {
	c := openOnCPU(t, nil)
	s, err := c.NewStream()
	require.NoError(t, err)
	stop := make(chan struct{})
	var wg sync.WaitGroup
	wg.Go(func() {
		for {
			select {
			case <-stop:
				return
			default:
				_ = s.InstallMemoryPools(memory.DirectLayout())
			}
		}
	})
	defer func() { close(stop); wg.Wait() }()
	ctx := WithStream(context.Background(), s)
	for range 2000 {
		m, err := c.MeasurePlan(ctx, allocations(c, 0, 4096), MeasureOptions{Verify: true})
		if err != nil {
			continue // refused, the installer's buffers live, or replaced: each said so
		}
		require.NotEmpty(t, m.Real.Dynamic)
		require.NotEqual(t, fmt.Sprintf("%T", memory.DirectKind{}), fmt.Sprintf("%T", m.Real.Dynamic[0].Kind), "a verified run was under the installer's layout: %s", m.Plan.Brief())
	}
}
