package wasmhost

import (
	"bytes"
	"context"
	"errors"
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/vkrt/vkrt/client"
	"github.com/vkrt/vkrt/dryrun"
	"github.com/vkrt/vkrt/dryrun/plan"
	"github.com/vkrt/vkrt/memory"
)

// planCapacity is what the capped pools of a plan may reserve.
func planCapacity(l memory.Layout) uint64 {
	var n uint64
	if a, ok := l.Arena(); ok {
		for _, p := range a.Pages {
			n += p
		}
	}
	if pools, ok := l.Sliced(); ok {
		for _, p := range pools {
			if p.Pages != nil {
				n += p.PageSize * *p.Pages
			}
		}
	}
	return n
}

// TestExamples runs each example guest for real and dry, then measures a
// plan from its dry run and runs it for real under the plan. The real runs
// check their numbers against the CPU inside the guest; the dry run holds
// no device memory; the run under the plan spills nothing and reserves
// exactly the plan's pages plus its weights' persistent ones. With -short
// only the MLP runs.
func TestExamples(t *testing.T) {
	names := []string{"mlp", "transformer"}
	if testing.Short() {
		names = names[:1]
	}
	for _, name := range names {
		t.Run(name, func(t *testing.T) {
			c := openClient(t)
			h := newHost(t, context.Background(), c)
			m := compile(t, h, buildGuest(t, "examples/"+name))
			ctx := context.Background()

			var out bytes.Buffer
			res, err := h.Run(ctx, m, WithStdout(&out), WithStderr(&out))
			require.NoError(t, err, out.String())
			require.Contains(t, out.String(), "every output matches the CPU reference")
			require.False(t, res.DryRun)
			require.Positive(t, res.PeakDeviceBytes)
			require.Zero(t, liveBuffers(c))

			out.Reset()
			storage := c.Device().Storage()
			before := storage.Allocated()
			res, err = h.Run(dryrun.With(ctx), m, WithStdout(&out), WithStderr(&out))
			require.NoError(t, err, out.String())
			require.Contains(t, out.String(), "dry run: nothing computed")
			require.True(t, res.DryRun)
			require.Zero(t, res.PeakDeviceBytes, "a dry run holds no device memory")
			require.Equal(t, before, storage.Allocated())
			require.Positive(t, res.PeakReservedBytes, "the pools saw every allocation")

			var dry, real *Result
			out.Reset()
			workload := func(ctx context.Context) error {
				res, err := h.Run(ctx, m, OnStream(c.Stream(ctx)), WithStdout(&out), WithStderr(&out))
				if res.DryRun {
					dry = res
				} else {
					real = res
				}
				return err
			}
			meas, err := c.MeasurePlan(ctx, workload, client.MeasureOptions{Verify: true, Plan: plan.Options{Strength: plan.Strong}})
			require.NoError(t, err, out.String())
			require.Contains(t, out.String(), "every output matches the CPU reference", "the run under the plan computed the right numbers")
			require.Zero(t, meas.DeviceBytes, "the dry run held no device memory")
			require.Zero(t, dry.PeakDeviceBytes)
			require.True(t, meas.Verified)
			require.Zero(t, meas.Spills)
			require.Equal(t, dry.PeakBytes, real.PeakBytes, "both runs made the same buffers")
			persistent := real.Report.Persistent.Usage.BytesReserved
			require.Positive(t, persistent, "the weights went to the persistent pool")
			require.Equal(t, planCapacity(meas.Plan)+persistent, real.PeakReservedBytes,
				"the real run reserved the plan's pages and the weights, and nothing else")
			require.Less(t, real.PeakReservedBytes, dry.PeakReservedBytes, "the plan reserves less than the growable layout the dry run measured under")
			require.Zero(t, liveBuffers(c))
		})
	}
}

// TestExampleArguments runs the examples as `vkrt run NAME.wasm -- ARGS`
// does (argv[0] the file's name): --help prints the flags and exits 0; a
// stray argument, or a --scale whose sizes would wrap the kernels' u32
// counts, exits 2 before anything runs.
func TestExampleArguments(t *testing.T) {
	c := openClient(t)
	h := newHost(t, context.Background(), c)
	ctx := context.Background()
	for _, name := range []string{"mlp", "transformer"} {
		m := compile(t, h, buildGuest(t, "examples/"+name))
		var out bytes.Buffer
		_, err := h.Run(ctx, m, WithArgs(name+".wasm", "--help"), WithStdout(&out), WithStderr(&out))
		require.NoError(t, err, "%s --help: %s", name, out.String())
		require.Contains(t, out.String(), "-steps")
		require.Contains(t, out.String(), "-scale")

		for _, args := range [][]string{{"--steps", "1", "3"}, {"--scale", "0"}} {
			out.Reset()
			res, err := h.Run(ctx, m, WithArgs(append([]string{name + ".wasm"}, args...)...), WithStdout(&out), WithStderr(&out))
			var exit *ExitError
			require.True(t, errors.As(err, &exit), "%s %q: %v %s", name, args, err, out.String())
			require.Equal(t, uint32(2), exit.Code, out.String())
			require.Zero(t, res.PeakHandles, "nothing ran")
		}
	}

	// 96 tokens x 683 = 65568, whose 2^32 + 4.3M scores wrapped to 4.3M
	// in Scale's u32 count; a dry run took it without a word.
	m := compile(t, h, buildGuest(t, "examples/transformer"))
	var out bytes.Buffer
	res, err := h.Run(dryrun.With(ctx), m, WithArgs("transformer.wasm", "--steps", "9", "--scale", "683"), WithStdout(&out), WithStderr(&out))
	var exit *ExitError
	require.True(t, errors.As(err, &exit), "%v %s", err, out.String())
	require.Equal(t, uint32(2), exit.Code, out.String())
	require.Contains(t, out.String(), "lower --scale")
	require.Zero(t, res.PeakHandles, "nothing ran")
	require.Zero(t, liveBuffers(c))
}
