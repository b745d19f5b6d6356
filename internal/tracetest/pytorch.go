package tracetest

import (
	"path/filepath"
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/vkrt/vkrt/dryrun/trace"
	"github.com/vkrt/vkrt/internal/torchalloc"
)

// PyTorchRun is what PyTorch 2.11's caching allocator did on a shipped
// stream, as testdata/traces/README.md and its variants/README.md record:
// reserved peak over peak live bytes, and device allocations (cudaMalloc
// segments, or mapped chunks with expandable segments).
type PyTorchRun struct {
	DefaultRatio, ExpandableRatio   float64
	DefaultAllocs, ExpandableAllocs uint64
}

// PyTorch are the recorded figures by stream: the shipped traces' names,
// and "variants/NAME" for the second runs.
var PyTorch = map[string]PyTorchRun{
	"gpt2_train":            {1.124, 1.070, 154, 153},
	"llama_generate":        {1.129, 1.012, 111, 97},
	"resnet50_train":        {1.190, 1.017, 104, 109},
	"bert_dynamic":          {1.678, 1.226, 27, 28},
	"variants/gpt2_train":   {1.124, 1.070, 154, 153},
	"variants/bert_dynamic": {1.690, 1.211, 28, 28},
}

// Variants are the streams with a second run recorded in
// testdata/traces/variants.
var Variants = []string{"gpt2_train", "bert_dynamic"}

// ReadVariant parses the second run of the shipped trace called name.
func ReadVariant(tb testing.TB, name string) *trace.Trace {
	tb.Helper()
	return Read(tb, filepath.Join("variants", name))
}

// ModelledPyTorch is what internal/torchalloc's model of PyTorch's caching
// allocator does on t, in the form of the recorded figures: the reference
// for streams nobody ran under PyTorch, such as generated ones. On the
// recorded streams it gives their figures (see torchalloc's calibration).
func ModelledPyTorch(tb testing.TB, t *trace.Trace) PyTorchRun {
	tb.Helper()
	d, err := torchalloc.Replay(t, torchalloc.Default)
	require.NoError(tb, err)
	e, err := torchalloc.Replay(t, torchalloc.Expandable)
	require.NoError(tb, err)
	return PyTorchRun{DefaultRatio: d.Ratio(), ExpandableRatio: e.Ratio(),
		DefaultAllocs: d.DeviceAllocs, ExpandableAllocs: e.DeviceAllocs}
}

// VMARun is what AMD's Vulkan Memory Allocator did on a shipped stream in
// its TLSF virtual block (one 32 GiB block, alignment 32), as
// testdata/traces/README.md records: the extent it reached over peak live
// bytes.
type VMARun struct {
	ExtentRatio float64
}

// VMA are the recorded figures by shipped trace name.
var VMA = map[string]VMARun{
	"gpt2_train":     {1.146},
	"llama_generate": {1.065},
	"resnet50_train": {1.019},
	"bert_dynamic":   {1.371},
}
