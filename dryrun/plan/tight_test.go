package plan

import (
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/vkrt/vkrt/dryrun/replay"
	"github.com/vkrt/vkrt/internal/gen"
	"github.com/vkrt/vkrt/memory"
	vkruntime "github.com/vkrt/vkrt/runtime"
)

// A plan never fails a run the device holds with no plan (goal 2 of plans
// that hold on the real run), on a device with sparse residency in the
// H200's granules and little memory to spare: each generated run, on devices
// of 1.05, 1.2 and 1.5 times its peak that run it with no plan, runs under
// the basic and the strong plan of the other run of its workload. The plans
// are made for that device from a dry run on the H200-like one, as a dry run
// needs no device memory; where the dry run's stream does not fit the
// smaller device under its own plan, Derive refuses to plan and there is
// nothing to run. Seeds 1–12 pass (484 runs). Not covered here: with 2 MiB
// granules 6 runs of seeds 1–12 fail at 1.05 times their peak (959 runs
// under a plan over both granules), and without sparse residency 16 of 219
// of seeds 1–9, where arena pages held by their live slots leave the
// fallback pools too little. Under -short (with the race detector and
// invariant checks it took 296 s), seed 1 on the tightest device alone.
func TestAPlanNeverFailsARunATightDeviceHolds(t *testing.T) {
	seeds, shares := 2, []uint64{105, 120, 150}
	if testing.Short() {
		seeds, shares = 1, shares[:1]
	}
	ran := 0
	for _, p := range generatedPairs(seeds) {
		for i, on := range p {
			other := p[1-i]
			plain, err := replay.Run(on, memory.VirtualLayout(memory.VirtualPlan{}), replay.Options{})
			require.NoError(t, err)
			dry, err := replay.Run(other, memory.VirtualLayout(memory.VirtualPlan{}), replay.Options{})
			require.NoError(t, err)
			for _, share := range shares {
				device := replay.H200()
				device.MemorySize = plain.PeakLiveBytes * share / 100
				ro := replay.Options{Device: device}
				if _, err := replay.Run(on, memory.VirtualLayout(memory.VirtualPlan{}), ro); err != nil {
					continue // the device cannot hold the run with no plan
				}
				for _, strength := range []Strength{Basic, Strong} {
					l, err := Derive(dry.Report, Options{Strength: strength, Trace: other, Device: device})
					if err != nil {
						require.ErrorIs(t, err, vkruntime.ErrOutOfDeviceMemory, "%s plan of %s for a device of %d B", strength, other.Name, device.MemorySize)
						continue
					}
					_, err = replay.Run(on, l, ro)
					require.NoError(t, err, "%s under the %s plan of %s on a device of %d%% of its peak", on.Name, strength, other.Name, share)
					ran++
				}
			}
		}
	}
	t.Logf("%d runs under a plan on a tight device", ran)
	require.Positive(t, ran)
}

// On a device without sparse residency, the retry after a cleanup takes
// free room in a page that a pool of smaller reservations holds, where the
// device has no memory for a page of the reservation's pool nor for an
// allocation of its own size (Manager.ReserveTight). These runs failed
// with no plan on such devices of 1.05–1.5 times their peak, that room
// held.
func TestATightDeviceRunsWhatSmallerPoolsPagesHaveRoomFor(t *testing.T) {
	for _, c := range []struct {
		seed  uint64
		shape gen.Shape
		run   uint64
		share uint64 // device memory, in hundredths of the run's peak
	}{
		{5, gen.DynamicInference, 1, 105},
		{5, gen.DynamicInference, 1, 120},
		{3, gen.DynamicInference, 1, 150},
		{8, gen.ConvTraining, 2, 150},
	} {
		tr := gen.Run(c.seed, c.shape, c.run)
		plain, err := replay.Run(tr, memory.SubSlicesLayout(), replay.Options{NoSparse: true})
		require.NoError(t, err)
		device := replay.H200()
		device.MemorySize = plain.PeakLiveBytes * c.share / 100
		r, err := replay.Run(tr, memory.SubSlicesLayout(), replay.Options{Device: device, NoSparse: true})
		require.NoError(t, err, "%s on %d%% of its peak", tr.Name, c.share)
		require.Positive(t, r.Retries, "%s: a reservation the device refused was served on the retry", tr.Name)
	}
}
