package conformance_test

import (
	"context"
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/vkrt/vkrt/conformance"
	"github.com/vkrt/vkrt/device/cpu"
)

// The pure-Go device passes the whole suite; what it lacks (a memory
// budget, sparse binding) is not supported, never a pass.
func TestCPUDeviceConforms(t *testing.T) {
	conformance.TestDevice(t, conformance.OnDevice(cpu.Open))
	if testing.Short() {
		return // the statuses below are the subtests' again, counted
	}
	rep := conformance.RunDevice(context.Background(), conformance.OnDevice(cpu.Open), conformance.Options{})
	require.Empty(t, rep.Failed())
	for _, name := range []string{"device/memory-budget", "storage/sparse-binding"} {
		r, ok := rep.Result(name)
		require.True(t, ok, name)
		require.Equal(t, conformance.NotSupported, r.Status, name)
	}
}
