//go:build !cgo

package main

import (
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/vkrt/vkrt/vk"
)

// A binary built without cgo lists no devices and says why.
func TestDevicesWithoutCgoSaysWhy(t *testing.T) {
	out, err := executeDevices(t)
	require.ErrorIs(t, err, vk.ErrNoCgo)
	require.Empty(t, out)
}
