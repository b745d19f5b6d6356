//go:build cgo

package vk

import (
	"context"
	"math"
	"os"
	"os/exec"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/vkrt/vkrt/kernel"
	vkruntime "github.com/vkrt/vkrt/runtime"
)

// slowOp is a ReLU over one element on a grid of 65535 x rows work groups:
// every invocation finds nothing to do, but lavapipe still runs them all
// (65535 x 16 groups take about 2 s on a 2-core machine; 65535 x 65535,
// hours).
func slowOp(h vkruntime.StorageHandle, rows uint32) kernel.Op {
	l := kernel.ReLU(1)
	return kernel.Op{Kernel: l.Kernel, Grid: [3]uint32{65535, rows, 1}, Bindings: []vkruntime.StorageHandle{h, h}, Push: l.Push}
}

// slowBatch is a batch of slowOps that runs for about want on d: a batch of
// 16 rows is timed first, once the kernel's pipeline is built (its first
// build, which a driver without its shader cache makes slowly, would make
// the rows look slow and the batch short). lavapipe needs a few rows, a GPU
// many batches' worth (an H200 runs 65535 x 16 empty groups in well under
// 100 ms).
func slowBatch(t *testing.T, d *Device, h vkruntime.StorageHandle, want time.Duration) []kernel.Op {
	t.Helper()
	const probeRows = 16
	require.NoError(t, d.Dispatch(t.Context(), []kernel.Op{slowOp(h, 1)}))
	start := time.Now()
	require.NoError(t, d.Dispatch(t.Context(), []kernel.Op{slowOp(h, probeRows)}))
	perRow := max(time.Since(start)/probeRows, time.Nanosecond)
	rows := max(int64(want/perRow), 1)
	var ops []kernel.Op
	for rows > 0 {
		r := min(rows, 65535)
		ops = append(ops, slowOp(h, uint32(r)))
		rows -= r
	}
	return ops
}

// When the context ends, Dispatch stops waiting at once; the op running
// goes on on the GPU, so the pages the batch binds stay allocated until it
// ends (a Flush meanwhile keeps them) and later work on the device comes
// after it, but the ops after it never run.
func TestCanceledDispatchKeepsItsMemoryAndOrdersLaterWork(t *testing.T) {
	d := openTestDevice(t) // Close fails on a page freed while the GPU used it
	scratch := alloc(t, d, 16)
	const n = 1 << 16
	out := alloc(t, d, 4*n)
	require.NoError(t, d.Zero(t.Context(), out))

	// The slow ops run about 600 ms; the caller stops waiting after 100 ms.
	ops := append(slowBatch(t, d, scratch, 600*time.Millisecond), kernel.FillWords(n, math.Float32bits(7)).With(out))
	ctx, cancel := context.WithTimeout(t.Context(), 100*time.Millisecond)
	defer cancel()
	start := time.Now()
	err := d.Dispatch(ctx, ops)
	waited := time.Since(start)
	require.ErrorIs(t, err, context.DeadlineExceeded)
	require.Less(t, waited, time.Second, "the wait stopped with the context")

	// The op still runs: its pages survive a Flush.
	held := d.storage.Allocated()
	d.storage.Dealloc(scratch.ID)
	d.storage.Flush()
	require.Equal(t, held, d.storage.Allocated(), "a page an abandoned op binds is not freed")

	// A download comes after the abandoned op; the fill after it never ran.
	got := readFloats(t, d, out)
	for i, v := range got {
		require.Zero(t, v, "element %d: an op after the context ended ran", i)
	}
	d.storage.Flush()
	require.Less(t, d.storage.Allocated(), held, "freed once the op ended")
	t.Logf("the wait stopped %v after the dispatch began; the op running then ended after %v", waited, time.Since(start))
}

// A batch under a context that can end runs an op a submission: once the
// context ends, no op after the one running starts. Under one that cannot,
// the batch runs whole.
func TestDispatchRunsNoOpAfterItsContextEnds(t *testing.T) {
	d := openTestDevice(t)
	const n = 1024
	first, second := alloc(t, d, 4*n), alloc(t, d, 4*n)
	zero := func() {
		require.NoError(t, d.Zero(t.Context(), first))
		require.NoError(t, d.Zero(t.Context(), second))
	}
	batch := []kernel.Op{kernel.FillWords(n, math.Float32bits(7)).With(first), kernel.FillWords(n, math.Float32bits(9)).With(second)}
	ctx, cancel := context.WithCancel(t.Context())
	ended := []int{}
	afterOpSubmitted = func(i int) {
		ended = append(ended, i)
		cancel() // the context ends once the first op has run
	}
	t.Cleanup(func() { afterOpSubmitted = nil })

	zero()
	require.ErrorIs(t, d.Dispatch(ctx, batch), context.Canceled)
	require.Equal(t, []int{0}, ended, "one op ran, a submission of its own")
	require.Equal(t, float32(7), readFloats(t, d, first)[n-1], "the op before the context ended ran")
	require.Equal(t, float32(0), readFloats(t, d, second)[n-1], "the op after it did not")

	// Each op's writes are seen by the next, across submissions.
	ended = ended[:0]
	afterOpSubmitted = func(i int) { ended = append(ended, i) }
	zero()
	chained := []kernel.Op{kernel.FillWords(n, math.Float32bits(5)).With(first), kernel.CopyWords(n).With(first, second)}
	require.NoError(t, d.Dispatch(t.Context(), chained))
	require.Equal(t, []int{0, 1}, ended)
	require.Equal(t, float32(5), readFloats(t, d, second)[0], "the copy read the fill before it")

	// context.Background() cannot end: one submission.
	ended = ended[:0]
	zero()
	require.NoError(t, d.Dispatch(context.Background(), batch))
	require.Empty(t, ended, "the batch was one submission")
	require.Equal(t, float32(9), readFloats(t, d, second)[n-1])
}

// A 65535 x 65535 grid runs for hours on lavapipe; canceling its context
// returns at once. The wait runs in a child process, which exits with the
// grid still running.
func TestCanceledDispatchOfAHugeGridReturnsAtOnce(t *testing.T) {
	if os.Getenv("VKRT_HUGE_GRID_CHILD") == "1" {
		d, err := Open(0)
		if err != nil {
			os.Exit(3)
		}
		h, err := d.storage.Alloc(16)
		if err != nil {
			os.Exit(4)
		}
		ctx, cancel := context.WithTimeout(context.Background(), 200*time.Millisecond)
		defer cancel()
		start := time.Now()
		err = d.Dispatch(ctx, []kernel.Op{slowOp(h, 65535)})
		os.Stdout.WriteString("returned after " + strconv.FormatInt(time.Since(start).Milliseconds(), 10) + " ms: " + err.Error() + "\n")
		os.Exit(0) // the grid is still running: leave without waiting for it
	}
	openTestDevice(t) // skip or fail without Vulkan, like the rest
	ctx, cancel := context.WithTimeout(t.Context(), time.Minute)
	defer cancel()
	cmd := exec.CommandContext(ctx, os.Args[0], "-test.run=^TestCanceledDispatchOfAHugeGridReturnsAtOnce$")
	cmd.Env = append(os.Environ(), "VKRT_HUGE_GRID_CHILD=1")
	outBytes, err := cmd.CombinedOutput()
	out := string(outBytes)
	require.NoError(t, err, out)
	require.Contains(t, out, "context deadline exceeded")
	ms, err := strconv.Atoi(strings.Fields(out[strings.Index(out, "returned after ")+len("returned after "):])[0])
	require.NoError(t, err)
	require.Less(t, ms, 1000, "a 200 ms deadline: the wait stopped with it")
	t.Logf("a 65535 x 65535 grid: the wait returned %d ms after the dispatch began", ms)
}
