//go:build cgo

package vk

import (
	"context"
	"math"
	"os"
	"os/exec"
	"slices"
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

// submissions records the ops of each submission of a batch run in
// several, and sets the time each took (0: as measured).
func submissions(t *testing.T, took time.Duration) *[][2]int {
	t.Helper()
	var got [][2]int
	afterSubmission = func(from, to int) { got = append(got, [2]int{from, to}) }
	if took > 0 {
		submissionTook = func(time.Time) time.Duration { return took }
	}
	t.Cleanup(func() { afterSubmission, submissionTook = nil, time.Since })
	return &got
}

// A batch under a context that can end runs in submissions, the first of
// one op: once the context ends, no op after the submission running
// starts. Under one that cannot, the batch runs whole in one.
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
	ran := submissions(t, 0)
	afterSubmission = func(from, to int) {
		*ran = append(*ran, [2]int{from, to})
		cancel() // the context ends once the first submission has run
	}

	zero()
	require.ErrorIs(t, d.Dispatch(ctx, batch), context.Canceled)
	require.Equal(t, [][2]int{{0, 1}}, *ran, "the first op ran, a submission of its own")
	require.Equal(t, float32(7), readFloats(t, d, first)[n-1], "the op before the context ended ran")
	require.Equal(t, float32(0), readFloats(t, d, second)[n-1], "the op after it did not")

	// Each op's writes are seen by the next, across submissions.
	ran = submissions(t, 0)
	d.pace.costPerTarget.Store(0) // a submission of one op first
	zero()
	chained := []kernel.Op{kernel.FillWords(n, math.Float32bits(5)).With(first), kernel.CopyWords(n).With(first, second)}
	require.NoError(t, d.Dispatch(t.Context(), chained))
	require.Equal(t, [][2]int{{0, 1}, {1, 2}}, *ran, "two submissions: the first of one op, the next at most twice its cost")
	require.Equal(t, float32(5), readFloats(t, d, second)[0], "the copy read the fill before it")

	// context.Background() cannot end: one submission.
	ran = submissions(t, 0)
	zero()
	require.NoError(t, d.Dispatch(context.Background(), batch))
	require.Empty(t, *ran, "the batch was one submission")
	require.Equal(t, float32(9), readFloats(t, d, second)[n-1])
}

// Submissions of small ops that end quickly take twice as many ops each
// time, so a batch of 64 fills is 7 submissions, not 64; an op that costs
// more than the pace allows runs alone, so the context's end waits for it
// only. The pace is learned across batches.
func TestDispatchSubmitsByPace(t *testing.T) {
	d := openTestDevice(t)
	const n = 1024
	h := alloc(t, d, 4*n)
	small := make([]kernel.Op, 64)
	for i := range small {
		small[i] = kernel.FillWords(n, uint32(i)).With(h)
	}
	ran := submissions(t, time.Microsecond) // each ends well within submissionTarget
	require.NoError(t, d.Dispatch(t.Context(), small))
	require.Equal(t, [][2]int{{0, 1}, {1, 3}, {3, 7}, {7, 15}, {15, 31}, {31, 63}, {63, 64}}, *ran)
	require.Equal(t, uint32(63), math.Float32bits(readFloats(t, d, h)[0]), "the last fill ran last")

	// The next batch starts at the pace learned: two fills' cost (the last
	// submission's, one fill, doubled).
	ran = submissions(t, time.Microsecond)
	const side = 256
	a, b, c := alloc(t, d, 4*side*side), alloc(t, d, 4*side*side), alloc(t, d, 4*side*side)
	mixed := append(append(slices.Clone(small[:4]), kernel.MatMul(side, side, side).With(a, b, c)), small[4:8]...)
	require.NoError(t, d.Dispatch(t.Context(), mixed))
	require.Equal(t, [][2]int{{0, 2}, {2, 4}, {4, 5}, {5, 9}}, *ran, "the matmul ran alone")

	// A submission that ran past the target makes the next one smaller.
	ran = submissions(t, 4*submissionTarget)
	d.pace.costPerTarget.Store(8 * 1024)
	require.NoError(t, d.Dispatch(t.Context(), small[:16]))
	require.Equal(t, [][2]int{{0, 8}, {8, 10}, {10, 11}, {11, 12}, {12, 13}, {13, 14}, {14, 15}, {15, 16}}, *ran)
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
