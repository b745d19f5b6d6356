package replay

import (
	"fmt"
	"strings"
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/vkrt/vkrt/internal/tracetest"
	"github.com/vkrt/vkrt/memory"
	vkruntime "github.com/vkrt/vkrt/runtime"
)

// A reservation the device refuses while the pools hold free pages is
// retried after an explicit cleanup, as a client does; only a device that
// is full after it fails the replay.
func TestReplayCleansUpAndRetriesWhenTheDeviceIsFull(t *testing.T) {
	var b strings.Builder
	for i := range 100 {
		fmt.Fprintf(&b, "a %d 8000000 0\n", i)
	}
	for i := range 100 {
		fmt.Fprintf(&b, "f %d\n", i)
	}
	b.WriteString("a 100 900000000 0\nf 100\n")
	tr := tracetest.Inline(t, b.String())
	device := vkruntime.DeviceProperties{Alignment: 16, MaxPageSize: 1 << 30, MemorySize: 1_000_000_000}
	r, err := Run(tr, memory.SubSlicesLayout(), Options{Device: device, NoSparse: true})
	require.NoError(t, err)
	require.Equal(t, uint64(1), r.Retries)

	device.MemorySize = 800_000_000
	_, err = Run(tr, memory.SubSlicesLayout(), Options{Device: device, NoSparse: true})
	require.ErrorIs(t, err, vkruntime.ErrOutOfDeviceMemory, "a device too small after the cleanup")
}

// A refusal cleans up the managers that changed since the last cleanup,
// not every stream's: 3,000 streams past a device full of their pages
// each retried a tight reservation after cleaning up all of them, so the
// work grew with streams x retries (73,000 streams ran 312 s).
func TestARetryCleansUpOnlyTheManagersThatChanged(t *testing.T) {
	const streams = 3000
	var b strings.Builder
	for i := range streams {
		fmt.Fprintf(&b, "a %d 100 %d\n", i, i)
	}
	// A free on an early stream makes its manager one to clean again.
	b.WriteString("f 0\n")
	fmt.Fprintf(&b, "a %d 100 %d\n", streams, streams)
	tr := tracetest.Inline(t, b.String())
	// Pages of 2 MiB: the device holds 32 streams' first pages, and room
	// for the rest's tight reservations.
	device := vkruntime.DeviceProperties{Alignment: 16, MaxPageSize: 1 << 30, MemorySize: 65 << 20}
	r, err := Run(tr, memory.SubSlicesLayout(), Options{Device: device, NoSparse: true})
	require.NoError(t, err)
	require.Greater(t, r.Retries, uint64(streams-100), "most streams were refused a page and took a tight reservation")
	// Each retry cleans the manager at hand and the one before it at most.
	require.LessOrEqual(t, r.managersCleaned, 2*int(r.Retries)+streams/10, "cleaned %d managers in %d retries", r.managersCleaned, r.Retries)
	require.Equal(t, uint64(streams*100), r.PeakLiveBytes)
}
