package client

import (
	"context"
	"encoding/binary"
	"errors"
	"math"
	"os"
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/vkrt/vkrt/vk"
)

// openClient opens a client on the default device, skipping when there is no
// Vulkan device unless VKRT_REQUIRE_DEVICE=1 makes that a failure.
func openClient(t testing.TB, opts ...Option) *Client {
	t.Helper()
	c, err := Open(context.Background(), opts...)
	if errors.Is(err, vk.ErrNoVulkan) && os.Getenv("VKRT_REQUIRE_DEVICE") != "1" {
		t.Skipf("no Vulkan device: %v", err)
	}
	require.NoError(t, err)
	t.Cleanup(func() { require.NoError(t, c.Close()) })
	return c
}

func f32bytes(v []float32) []byte {
	b := make([]byte, 4*len(v))
	for i, x := range v {
		binary.LittleEndian.PutUint32(b[4*i:], math.Float32bits(x))
	}
	return b
}

func bytesf32(b []byte) []float32 {
	v := make([]float32, len(b)/4)
	for i := range v {
		v[i] = math.Float32frombits(binary.LittleEndian.Uint32(b[4*i:]))
	}
	return v
}
