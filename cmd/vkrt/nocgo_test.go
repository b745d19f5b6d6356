//go:build !cgo

package main

import (
	"os"
	"path/filepath"
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/vkrt/vkrt/device"
	"github.com/vkrt/vkrt/device/cpu"
	"github.com/vkrt/vkrt/vk"
)

// A binary built without cgo lists no devices and says why.
func TestDevicesWithoutCgoSaysWhy(t *testing.T) {
	out, err := executeDevices(t)
	require.ErrorIs(t, err, vk.ErrNoCgo)
	require.Empty(t, out)
}

// run, plan of a workload and conformance open the default device, which
// a build without cgo lacks: they say so as devices does, where they gave
// device.ErrNoBackend's advice for a Go program (import the vk package,
// hand the client a device).
func TestCommandsThatOpenADeviceWithoutCgoSayWhy(t *testing.T) {
	// The test binary runs on the cpu device; the binary has no backend.
	device.Register("", nil)
	defer device.Register("cpu", cpu.Open)
	guest := filepath.Join(t.TempDir(), "guest.wasm")
	require.NoError(t, os.WriteFile(guest, []byte("\x00asm\x01\x00\x00\x00"), 0o644))
	for _, args := range [][]string{{"run", guest}, {"plan", guest}, {"conformance", "--run", "kernel/add"}} {
		_, _, err := execute(t, args[0], args[1:]...)
		require.ErrorIs(t, err, vk.ErrNoCgo, "%v", args)
		require.ErrorIs(t, err, device.ErrNoBackend, "%v", args)
		require.Equal(t, vk.ErrNoCgo.Error(), err.Error(), "%v", args)
	}
}
