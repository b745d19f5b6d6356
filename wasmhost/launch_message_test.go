package wasmhost

import (
	"context"
	"errors"
	"fmt"
	"strings"
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/vkrt/vkrt/kernel"
	"github.com/vkrt/vkrt/wasmhost/guest"
)

// A refused launch's message says "vkrt:" and "launch:" once each, as the
// guest's SDK shows it ("vkrt: EINVAL: launch: invalid dispatch of …"),
// and the host's account (Result.LastError) too, while the host's error
// still matches kernel.ErrInvalidDispatch.
func TestRefusedLaunchMessageSaysEachPartOnce(t *testing.T) {
	c := openClient(t)
	h := newHost(t, context.Background(), c)
	a, b := guest.BufferOf(0x100001, 256), guest.BufferOf(0x100002, 64)
	for _, tc := range []struct {
		name        string
		launch      []guest.Launch
		guest, host string
	}{
		{"undersized", []guest.Launch{{Kernel: "fill", Grid: [3]uint32{1, 1, 1}, Push: pushWords(32, 7), Buffers: []*guest.Buffer{b}}},
			`launch: invalid dispatch of kernel "fill": binding 0 (out): handle 0x100002 [0, 64) holds 64 B`,
			`launch: invalid dispatch of kernel "fill": binding 0 (out): storage`},
		{"aliased", []guest.Launch{
			{Kernel: "fill", Grid: [3]uint32{1, 1, 1}, Push: pushWords(16, 7), Buffers: []*guest.Buffer{b}},
			{Kernel: "transpose", Grid: [3]uint32{1, 1, 1}, Push: pushWords(8, 8), Buffers: []*guest.Buffer{a, a}}},
			`launch: op 1 of 2: invalid dispatch of kernel "transpose": binding 1 (out): handle 0x100001 [0, 256), written`,
			`launch: op 1 of 2: invalid dispatch of kernel "transpose": binding 1 (out): storage`},
		{"idle groups", []guest.Launch{{Kernel: "fill", Grid: [3]uint32{64, 1, 1}, Push: pushWords(16, 7), Buffers: []*guest.Buffer{b}}},
			`launch: invalid dispatch of kernel "fill": grid [64 1 1] runs 64 work groups`,
			`launch: invalid dispatch of kernel "fill": grid [64 1 1] runs 64 work groups`},
		{"idle groups in a batch", []guest.Launch{
			{Kernel: "fill", Grid: [3]uint32{1, 1, 1}, Push: pushWords(16, 7), Buffers: []*guest.Buffer{b}},
			{Kernel: "fill", Grid: [3]uint32{64, 1, 1}, Push: pushWords(16, 7), Buffers: []*guest.Buffer{b}}},
			`launch: op 1 of 2: invalid dispatch of kernel "fill": grid [64 1 1] runs 64 work groups`,
			`launch: op 1 of 2: invalid dispatch of kernel "fill": grid [64 1 1] runs 64 work groups`},
		{"no live buffer", []guest.Launch{{Kernel: "fill", Grid: [3]uint32{1, 1, 1}, Push: pushWords(16, 7), Buffers: []*guest.Buffer{guest.BufferOf(0x100009, 64)}}},
			`launch: kernel "fill", binding 0: handle 0x100009 names no live buffer of this guest`,
			`launch: kernel "fill", binding 0: handle 0x100009 names no live buffer of this guest`},
	} {
		t.Run(tc.name, func(t *testing.T) {
			desc, err := guest.AppendDescriptor(nil, tc.launch...)
			require.NoError(t, err)
			wasm := launchTellingLastError(t, desc, ESUCCESS)
			var out strings.Builder
			res, err := h.Run(context.Background(), compile(t, h, wasm), WithStdout(&out))
			require.NoError(t, err)
			require.True(t, strings.HasPrefix(out.String(), tc.guest), "last_error: %s", out.String())
			shown := (&guest.Error{Op: "launch", Status: guest.EINVAL, Message: out.String()}).Error()
			require.Equal(t, 1, strings.Count(shown, "vkrt:"), shown)
			require.Equal(t, 1, strings.Count(shown, "launch:"), shown)
			require.True(t, strings.HasPrefix(res.LastError, tc.host), "LastError: %s", res.LastError)
			require.Equal(t, 1, strings.Count(res.LastError, "launch:"), res.LastError)
			require.NotContains(t, res.LastError, "vkrt:")
			require.NotContains(t, res.LastError, "client:")
		})
	}
}

// The host's error of a refused launch keeps the kernel's kind.
func TestLaunchErrorKeepsItsKind(t *testing.T) {
	de := &kernel.DispatchError{Kernel: "fill", Reason: "why"}
	err := &launchError{op: 1, ops: 2, err: fmt.Errorf("client: launch 1 of a batch of 2: %w", de)}
	require.Equal(t, `launch: op 1 of 2: invalid dispatch of kernel "fill": why`, err.Error())
	require.ErrorIs(t, err, kernel.ErrInvalidDispatch)
	var got *kernel.DispatchError
	require.True(t, errors.As(err, &got))
	require.Equal(t, EINVAL, errnoOf(err))
}
