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
