package torchalloc_test

import (
	"fmt"
	"math"
	"sort"
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/vkrt/vkrt/dryrun/trace"
	"github.com/vkrt/vkrt/internal/gen"
	"github.com/vkrt/vkrt/internal/torchalloc"
	"github.com/vkrt/vkrt/internal/tracetest"
)

// The tolerance the model reaches against PyTorch 2.11's recorded figures
// (tracetest.PyTorch, which round ratios to 0.001): every stream but one
// matches exactly in both modes; llama_generate under the default allocator
// comes out at 1.127× (110) against 1.129× (111), because which of two
// equal-sized free blocks best fit takes depends on the addresses cudaMalloc
// returned, which the recording does not keep.
const (
	ratioTolerance  = 0.003 // absolute, on reserved peak over peak live
	allocsTolerance = 1     // device allocations
)

func TestModelReproducesPyTorchsRecordedFigures(t *testing.T) {
	names := make([]string, 0, len(tracetest.PyTorch))
	for name := range tracetest.PyTorch {
		names = append(names, name)
	}
	sort.Strings(names)
	for _, name := range names {
		recorded, tr := tracetest.PyTorch[name], tracetest.Read(t, name)
		modelled := tracetest.ModelledPyTorch(t, tr)
		for _, c := range []struct {
			mode                   torchalloc.Mode
			ratio, modelledRatio   float64
			allocs, modelledAllocs uint64
		}{
			{torchalloc.Default, recorded.DefaultRatio, modelled.DefaultRatio, recorded.DefaultAllocs, modelled.DefaultAllocs},
			{torchalloc.Expandable, recorded.ExpandableRatio, modelled.ExpandableRatio, recorded.ExpandableAllocs, modelled.ExpandableAllocs},
		} {
			what := fmt.Sprintf("%s, %s: recorded %.3f× (%d), modelled %.3f× (%d)", name, c.mode, c.ratio, c.allocs, c.modelledRatio, c.modelledAllocs)
			t.Log(what)
			require.InDelta(t, c.ratio, c.modelledRatio, ratioTolerance, what)
			require.InDelta(t, float64(c.allocs), float64(c.modelledAllocs), allocsTolerance, what)
		}
	}
}

// generatedStreams are the streams dryrun/plan pairs up: every family,
// seeds 1 to 3, runs 1 and 2.
func generatedStreams() []*trace.Trace {
	var streams []*trace.Trace
	for _, shape := range gen.Shapes() {
		for seed := uint64(1); seed <= 3; seed++ {
			streams = append(streams, gen.Run(seed, shape, 1), gen.Run(seed, shape, 2))
		}
	}
	return streams
}

// The model's figures on the generated streams, the reference where no
// PyTorch run exists: `go test -v -run TestGeneratedStreamFigures
// ./internal/torchalloc/` prints them. Each must be a real reservation:
// never below peak live bytes, every reserved byte of the default mode in
// whole 2 MiB units, and the expandable mode's mappings at least one per
// pool it used.
func TestGeneratedStreamFigures(t *testing.T) {
	for _, tr := range generatedStreams() {
		d, err := torchalloc.Replay(tr, torchalloc.Default)
		require.NoError(t, err)
		e, err := torchalloc.Replay(tr, torchalloc.Expandable)
		require.NoError(t, err)
		t.Logf("%-30s peak live %13d  default %s  expandable %s", tr.Name, d.PeakLiveBytes, d, e)
		for _, r := range []torchalloc.Result{d, e} {
			require.Equal(t, tr.PeakLiveBytes(), r.PeakLiveBytes, tr.Name)
			require.GreaterOrEqual(t, r.ReservedPeakBytes, r.PeakLiveBytes, tr.Name)
			require.Zero(t, r.ReservedPeakBytes%(2<<20), tr.Name)
			require.Positive(t, r.DeviceAllocs, tr.Name)
		}
		require.LessOrEqual(t, e.DeviceAllocs, e.Pages, tr.Name)
	}
}

// BenchmarkReplay replays the longest shipped stream (286k events) in each
// mode and reports the cost per event.
func BenchmarkReplay(b *testing.B) {
	tr := tracetest.Read(b, "llama_generate")
	for _, mode := range []torchalloc.Mode{torchalloc.Default, torchalloc.Expandable} {
		b.Run(mode.String(), func(b *testing.B) {
			var r torchalloc.Result
			for b.Loop() {
				var err error
				r, err = torchalloc.Replay(tr, mode)
				require.NoError(b, err)
			}
			b.ReportMetric(float64(b.Elapsed().Nanoseconds())/float64(b.N)/float64(len(tr.Events)), "ns/event")
			b.ReportMetric(math.Round(r.Ratio()*1000)/1000, "ratio")
		})
	}
}
