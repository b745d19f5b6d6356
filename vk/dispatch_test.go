//go:build cgo

package vk

import (
	"math"
	"testing"

	"github.com/stretchr/testify/require"

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

	page := d.storage.pages[out.ID].size
	err = run(t, d, kernel.ReLU(n), x, handle(out.ID, 0, page+16))
	require.ErrorContains(t, err, "outside its page")

	err = run(t, d, kernel.ReLU(n+1), x, out)
	require.ErrorIs(t, err, kernel.ErrInvalidDispatch)

	// An op that runs no work group binds nothing, and its bindings are
	// checked all the same: it dispatched a freed handle, and one past its
	// page, and returned nil.
	empty := kernel.ReLU(0)
	require.Zero(t, empty.Grid[0])
	err = d.Dispatch(t.Context(), []kernel.Op{kernel.ReLU(n).With(x, out), empty.With(gone, gone)})
	require.ErrorIs(t, err, vkruntime.ErrNotFound)
	err = d.Dispatch(t.Context(), []kernel.Op{empty.With(x, handle(out.ID, 0, page+16))})
	require.ErrorContains(t, err, "outside its page")

	err = d.Dispatch(t.Context(), []kernel.Op{kernel.ReLU(n).With(x, out), kernel.ReLU(n+4).With(x, out)})
	require.ErrorContains(t, err, "op 1 of 2")

	for i, v := range readFloats(t, d, out) {
		require.Equal(t, float32(7), v, "element %d untouched", i)
	}
	require.NoError(t, kernel.Validate(kernel.ReLU(n).Kernel, kernel.ReLU(n).Grid, []vkruntime.StorageHandle{gone, out}, kernel.ReLU(n).Push, d.Limits()),
		"kernel.Validate does not look the handles up")
	d.Storage().Flush()
}
