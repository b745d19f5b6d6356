package wasmhost

import (
	"bytes"
	"context"
	"slices"
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/vkrt/vkrt/client"
	"github.com/vkrt/vkrt/kernel"
	"github.com/vkrt/vkrt/wasmhost/guest"
)

// TestGoGuestThroughTheSDK runs a Go guest that goes through the SDK,
// misuse included, and checks every answer itself.
func TestGoGuestThroughTheSDK(t *testing.T) {
	c := openClient(t)
	res := runGoGuest(t, c, "wasmhost/testdata/guests/sdk", "sdk: every check passed")
	require.Positive(t, res.FailedCalls, "the guest's misuse was answered, not fatal")
	require.Zero(t, liveBuffers(c), "the persistent buffer it left was freed")
}

// runGoGuest builds the Go guest of package pkg, runs it on a host of c
// and requires it to end well, saying want.
func runGoGuest(t *testing.T, c *client.Client, pkg, want string) *Result {
	t.Helper()
	h := newHost(t, context.Background(), c)
	m := compile(t, h, buildGuest(t, pkg))
	var out bytes.Buffer
	res, err := h.Run(context.Background(), m, WithStdout(&out), WithStderr(&out))
	require.NoError(t, err, out.String())
	require.Contains(t, out.String(), want)
	return res
}

// TestGoGuestsEndingBadly: a Go guest that exhausts its memory limit, or
// recurses without end, exits through the Go runtime's fatal error (exit
// code 2) and leaves nothing behind.
func TestGoGuestsEndingBadly(t *testing.T) {
	c := openClient(t)
	h := newHost(t, context.Background(), c, WithMaxMemoryPages(1024))
	m := compile(t, h, buildGuest(t, "wasmhost/testdata/guests/bomb"))
	for _, mode := range []string{"memory", "recurse"} {
		var out bytes.Buffer
		res, err := h.Run(context.Background(), m, WithArgs("bomb", mode), WithStderr(&out))
		var exit *ExitError
		require.ErrorAs(t, err, &exit, mode)
		require.Equal(t, uint32(2), exit.Code, out.String())
		require.Equal(t, uint64(1), res.PeakHandles)
		require.LessOrEqual(t, res.MemoryPages, uint32(1024))
		require.Zero(t, liveBuffers(c))
	}
}

// Every kernel of the catalogue has a typed launch in the SDK.
func TestTypedLaunchesCoverTheCatalogue(t *testing.T) {
	b := guest.BufferOf(1, 4)
	var names []string
	for _, l := range []guest.Launch{
		guest.Fill(1, 0, b), guest.Copy(1, b, b), guest.Add(1, b, b, b), guest.Mul(1, b, b, b),
		guest.Scale(1, 2, b, b), guest.ReLU(1, b, b), guest.GELU(1, b, b), guest.Softmax(1, 1, b, b),
		guest.LayerNorm(1, 1, 1e-5, b, b, b, b), guest.ReduceSum(1, b, b), guest.MatMul(1, 1, 1, b, b, b),
		guest.Transpose(1, 1, b, b),
	} {
		k, err := kernel.ByName(l.Kernel)
		require.NoError(t, err)
		require.Len(t, l.Buffers, len(k.Bindings), k.Name)
		require.Len(t, l.Push, int(k.PushSize()), k.Name)
		names = append(names, l.Kernel)
	}
	var want []string
	for _, k := range kernel.All() {
		want = append(want, k.Name)
	}
	slices.Sort(names)
	require.Equal(t, want, names)
}

// TestGoGuestMisusingTheSDK runs a Go guest that misuses the SDK (nil
// buffers, element indexes whose byte offset wraps, buffers that are not
// whole float32s, malformed batches, use after free, bad labels): each is
// an *Error of the ABI's status, nothing traps, nothing is written where
// it was not asked for.
func TestGoGuestMisusingTheSDK(t *testing.T) {
	c := openClient(t)
	runGoGuest(t, c, "wasmhost/guest/testdata/misuse", "misuse: every misuse refused")
	require.Zero(t, liveBuffers(c))
}

// Failed calls from many goroutines, switching among them, each get their
// own call's message: the SDK read it in a second host call after an
// allocation, where another goroutine's failure could replace it (1 of
// 16,000 errors of memory_record carried buffer_free's message).
func TestGoGuestErrorsFromManyGoroutinesKeepTheirMessages(t *testing.T) {
	runGoGuest(t, openClient(t), "wasmhost/guest/testdata/racingerrors", "racingerrors: every error carried its own call's message")
}

// The SDK's statuses are the host's errnos, number for number and name for
// name, so a guest can classify whatever the host returns with errors.Is.
func TestSDKStatusesAreTheHostErrnos(t *testing.T) {
	require.Len(t, errnoNames, 13)
	for e, name := range errnoNames {
		if e == ESUCCESS {
			require.Equal(t, "OK", guest.Status(e).String())
			continue
		}
		require.Equal(t, name, guest.Status(e).String(), "errno %d", uint32(e))
		err := error(&guest.Error{Op: "x", Status: guest.Status(e)})
		require.ErrorIs(t, err, guest.Status(e))
	}
}
