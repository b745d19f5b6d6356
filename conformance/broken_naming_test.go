package conformance_test

import (
	"context"
	"regexp"
	"strings"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/vkrt/vkrt/client"
	"github.com/vkrt/vkrt/conformance"
	"github.com/vkrt/vkrt/device"
	"github.com/vkrt/vkrt/device/cpu"
)

// namingDevice is the pure-Go device with a Name that panics or a Close
// that blocks until release is closed.
type namingDevice struct {
	device.Device
	namePanics bool
	release    chan struct{}
}

func (d namingDevice) Name() string {
	if d.namePanics {
		panic("no name")
	}
	return d.Device.Name()
}

func (d namingDevice) Close() error {
	if d.release != nil {
		<-d.release
	}
	return d.Device.Close()
}

func onNamingDevice(namePanics bool, release chan struct{}) conformance.OpenClient {
	return conformance.OnDevice(func(ctx context.Context, cfg device.Config) (device.Device, error) {
		d, err := cpu.Open(ctx, cfg)
		if err != nil {
			return nil, err
		}
		return namingDevice{Device: d, namePanics: namePanics, release: release}, nil
	})
}

// RunDevice, untold its target, opens the device for its name under the
// guard of a check: an open that gives neither a client nor an error, a
// Name that panics and a Close that blocks each ended the program or hung
// the run before its first check. The device is named unknown, with why,
// and the checks run and report.
func TestRunDeviceNamesADeviceThatMisbehavesWhenOpened(t *testing.T) {
	only := regexp.MustCompile("^device/properties$")

	t.Run("no client and no error", func(t *testing.T) {
		open := func(context.Context, conformance.DeviceConfig) (*client.Client, error) { return nil, nil }
		rep := conformance.RunDevice(context.Background(), open, conformance.Options{Run: only})
		require.Equal(t, "unknown (opening the device for its name: opening the device: no client and no error)", rep.Target)
		require.Equal(t, []string{"device/properties"}, rep.Failed())
	})

	t.Run("Name panics", func(t *testing.T) {
		rep := conformance.RunDevice(context.Background(), onNamingDevice(true, nil), conformance.Options{Run: only})
		require.Equal(t, "unknown (opening the device for its name: panic: no name)", rep.Target)
		require.Len(t, rep.Results, 1)
	})

	t.Run("Close blocks", func(t *testing.T) {
		release := make(chan struct{})
		defer close(release)
		const timeout = 200 * time.Millisecond
		start := time.Now()
		rep := conformance.RunDevice(context.Background(), onNamingDevice(false, release), conformance.Options{Run: only, Timeout: timeout})
		t.Logf("%v: %+v", time.Since(start), rep)
		require.Equal(t, "cpu", rep.Target, "named before Close blocked")
		require.Equal(t, []string{"device/properties"}, rep.Failed())
		r, _ := rep.Result("device/properties")
		require.True(t, strings.HasPrefix(r.Evidence[0], "the check did not finish within 200ms"), r.Evidence)
	})
}
