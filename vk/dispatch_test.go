//go:build cgo

package vk

import (
	"context"
	"math"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/vkrt/vkrt/device"
	"github.com/vkrt/vkrt/kernel"
	vkruntime "github.com/vkrt/vkrt/runtime"
)

// Dispatch adds the storage's own checks; a refused dispatch changes nothing.
func TestDispatchChecksHandlesAndChangesNothingOnError(t *testing.T) {
	d := openTestDevice(t)
	const n = 64
	x := floatBuffer(t, d, pseudoRandom(n, 1, 1))
	out := floatBuffer(t, d, make([]float32, n))
	require.NoError(t, d.Fill(t.Context(), out, math.Float32bits(7)))

	gone := alloc(t, d, 4*n)
	d.Storage().Dealloc(gone.ID)
	err := run(t, d, kernel.ReLU(n), gone, out)
	require.ErrorIs(t, err, vkruntime.ErrNotFound)
	require.ErrorIs(t, err, device.ErrNothingRan, "refused before anything ran, and saying so")

	page := d.storage.pages[out.ID].size
	err = run(t, d, kernel.ReLU(n), x, handle(out.ID, 0, page+16))
	require.ErrorContains(t, err, "outside its page")
	require.ErrorIs(t, err, device.ErrNothingRan)

	err = run(t, d, kernel.ReLU(n+1), x, out)
	require.ErrorIs(t, err, kernel.ErrInvalidDispatch)
	require.ErrorIs(t, err, device.ErrNothingRan, "a launch refused by kernel.Validate ran nothing, as the cpu device says")

	// An op that runs no work group binds nothing, and its bindings are
	// checked all the same: it dispatched a freed handle, and one past its
	// page, and returned nil.
	empty := kernel.ReLU(0)
	require.Zero(t, empty.Grid[0])
	err = d.Dispatch(t.Context(), []kernel.Op{kernel.ReLU(n).With(x, out), empty.With(gone, gone)})
	require.ErrorIs(t, err, vkruntime.ErrNotFound)
	require.ErrorIs(t, err, device.ErrNothingRan, "the batch's live op did not run either")
	err = d.Dispatch(t.Context(), []kernel.Op{empty.With(x, handle(out.ID, 0, page+16))})
	require.ErrorContains(t, err, "outside its page")
	require.ErrorIs(t, err, device.ErrNothingRan)

	err = d.Dispatch(t.Context(), []kernel.Op{kernel.ReLU(n).With(x, out), kernel.ReLU(n+4).With(x, out)})
	require.ErrorContains(t, err, "op 1 of 2")
	require.ErrorIs(t, err, kernel.ErrInvalidDispatch)
	require.ErrorIs(t, err, device.ErrNothingRan)

	for i, v := range readFloats(t, d, out) {
		require.Equal(t, float32(7), v, "element %d untouched", i)
	}
	require.NoError(t, kernel.Validate(kernel.ReLU(n).Kernel, kernel.ReLU(n).Grid, []vkruntime.StorageHandle{gone, out}, kernel.ReLU(n).Push, d.Limits()),
		"kernel.Validate does not look the handles up")
	d.Storage().Flush()
}

// An empty launch writes nothing, so it is not submitted on any grid: on
// 65535 x 65535 work groups lavapipe ran the idle groups for about half an
// hour, past any deadline its caller had. Its bindings are checked all
// the same, and reduce_sum's, whose groups write their sums of nothing,
// still runs.
func TestAnEmptyLaunchOnALargeGridIsNotRun(t *testing.T) {
	d := openTestDevice(t)
	out := floatBuffer(t, d, []float32{5, 5, 5, 5})
	ctx, cancel := context.WithTimeout(t.Context(), 30*time.Second)
	defer cancel()
	big := [3]uint32{65535, 65535, 1}
	empty := kernel.Op{Kernel: kernel.FillWords(0, 7).Kernel, Grid: big, Bindings: []vkruntime.StorageHandle{out}, Push: kernel.FillWords(0, 7).Push}
	require.NoError(t, d.Dispatch(ctx, []kernel.Op{empty, empty}), "the empty launches return at once")
	require.Equal(t, []float32{5, 5, 5, 5}, readFloats(t, d, out))

	gone := alloc(t, d, 16)
	d.Storage().Dealloc(gone.ID)
	empty.Bindings = []vkruntime.StorageHandle{gone}
	require.ErrorIs(t, d.Dispatch(ctx, []kernel.Op{empty}), vkruntime.ErrNotFound)

	sums := kernel.ReduceSum(0)
	x := floatBuffer(t, d, []float32{1})
	require.NoError(t, d.Dispatch(ctx, []kernel.Op{{Kernel: sums.Kernel, Grid: [3]uint32{4, 1, 1}, Bindings: []vkruntime.StorageHandle{x, out}, Push: sums.Push}}))
	require.Equal(t, []float32{0, 0, 0, 0}, readFloats(t, d, out), "each of reduce_sum's four groups wrote its sum of nothing")
	d.Storage().Flush()
}

// A batch runs the ops as they were checked: changing the caller's
// bindings and push constants once Dispatch has checked them changes
// nothing of what it records, in one submission or in several. The ops
// were recorded from the caller's slices after the check, so a binding
// moved then was bound unchecked (past its allocation, had it been moved
// there).
func TestDispatchRunsWhatItChecked(t *testing.T) {
	d := openTestDevice(t)
	for name, ctx := range map[string]context.Context{"one submission": context.Background(), "submissions": t.Context()} {
		page := alloc(t, d, 1024)
		require.NoError(t, d.Zero(ctx, page))
		ops := []kernel.Op{kernel.FillWords(16, 7).With(handle(page.ID, 0, 64))}
		afterCheck = func() {
			ops[0].Bindings[0] = handle(page.ID, 512, 64)
			copy(ops[0].Push, kernel.FillWords(8, 9).Push)
		}
		err := d.Dispatch(ctx, ops)
		afterCheck = nil
		require.NoError(t, err, name)
		want := make([]byte, 1024)
		for i := range 16 {
			want[4*i] = 7
		}
		got := make([]byte, 1024)
		require.NoError(t, d.Download(ctx, page, got))
		require.Equal(t, want, got, name)
		d.Storage().Dealloc(page.ID)
	}
	d.Storage().Flush()
}
