package conformance_test

import (
	"context"
	"regexp"
	"runtime"
	"strings"
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/vkrt/vkrt/conformance"
	"github.com/vkrt/vkrt/device"
	"github.com/vkrt/vkrt/device/cpu"
	"github.com/vkrt/vkrt/kernel"
	vkruntime "github.com/vkrt/vkrt/runtime"
)

// exitingStorage ends the goroutine that calls Alloc, as a test double
// calling t.Fatal or require on a *testing.T of its own does.
type exitingStorage struct{ vkruntime.Storage }

func (exitingStorage) Alloc(uint64) (vkruntime.StorageHandle, error) {
	runtime.Goexit()
	panic("unreachable")
}

// exitingDevice ends the goroutine that calls Dispatch.
type exitingDevice struct{ device.Device }

func (exitingDevice) Dispatch(context.Context, []kernel.Op) error {
	runtime.Goexit()
	panic("unreachable")
}

const endedByTarget = "ended without finishing: the target ended its goroutine (runtime.Goexit, as t.Fatal does)"

func requireEndedByTarget(t *testing.T, r conformance.Result) {
	t.Helper()
	require.Equal(t, conformance.Fail, r.Status, "%s: %+v", r.Check, r)
	for _, e := range r.Evidence {
		if strings.Contains(e, endedByTarget) {
			return
		}
	}
	t.Fatalf("%s: no evidence says the target ended the check: %q", r.Check, r.Evidence)
}

// A storage whose Alloc ends the check's goroutine passes no check that
// allocates: every check passed, having checked nothing past the first
// Alloc.
func TestSuiteFailsAStorageThatEndsTheCheck(t *testing.T) {
	rep := conformance.RunStorage(context.Background(), func(cfg conformance.StorageConfig) (conformance.StorageTarget, error) {
		tg, _, err := cpuTarget(cfg, 1, 1)
		tg.Storage = exitingStorage{tg.Storage}
		return tg, err
	}, conformance.Options{})
	pass, fail, _ := rep.Counts()
	require.Zero(t, pass, "%+v", rep.Results)
	require.NotZero(t, fail)
	for _, r := range rep.Results {
		if r.Status != conformance.NotSupported {
			requireEndedByTarget(t, r)
		}
	}
}

// A device whose Dispatch ends the check's goroutine fails every kernel
// check that dispatches (all but the one of the catalogue).
func TestSuiteFailsADeviceThatEndsTheCheck(t *testing.T) {
	open := conformance.OnDevice(func(ctx context.Context, cfg device.Config) (device.Device, error) {
		d, err := cpu.Open(ctx, cfg)
		if err != nil {
			return nil, err
		}
		return exitingDevice{d}, nil
	})
	rep := conformance.RunDevice(context.Background(), open, conformance.Options{Run: regexp.MustCompile(`^kernel/`)})
	require.NotEmpty(t, rep.Results)
	for _, r := range rep.Results {
		if r.Check != "kernel/catalogue-covered" {
			requireEndedByTarget(t, r)
		}
	}
}
