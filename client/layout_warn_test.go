package client

import (
	"bytes"
	"context"
	"log/slog"
	"math"
	"strings"
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/vkrt/vkrt/device/cpu"
	"github.com/vkrt/vkrt/memory"
)

// A layout that asks past the device is said once on the client's logger,
// however many streams are built with it or install it again: each
// stream's pools warned on their own, the first of them on slog.Default
// whatever logger the client was given.
func TestALayoutPastTheDeviceIsSaidOnceOnTheClientsLogger(t *testing.T) {
	var logged bytes.Buffer
	past := memory.VirtualLayout(memory.VirtualPlan{PlannedBytes: math.MaxUint64})
	c := openOnCPU(t, []cpu.Option{cpu.WithSparseGranule(64 << 10)},
		WithLogger(slog.New(slog.NewTextHandler(&logged, nil))), WithLayout(past))
	for range 3 {
		_, err := c.NewStream()
		require.NoError(t, err)
	}
	require.Equal(t, 1, strings.Count(logged.String(), memory.LayoutWarning), logged.String())
	require.Contains(t, logged.String(), "more than the device memory")
	require.NoError(t, c.InstallMemoryPools(context.Background(), past))
	require.Equal(t, 1, strings.Count(logged.String(), memory.LayoutWarning), "installed again: %s", logged.String())
}
