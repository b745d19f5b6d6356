package wasmhost

import (
	"context"
	"encoding/binary"
	"fmt"
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/vkrt/vkrt/memory"
)

// A memory_install refused with EBUSY (a buffer is live) changes nothing:
// the guest's reserved bytes are what they were (the pools were cleaned up
// before the refusal, 10 MiB reserved fell to 2 MiB), as ABI.md says of a
// failed call.
func TestARefusedInstallChangesNothing(t *testing.T) {
	c := openClient(t)
	h := newHost(t, context.Background(), c)
	m := compile(t, h, guestWAT(t, `(data (i32.const 1024) "direct")`, `(local $st i32)
		(drop (call $create (i64.const 16) (i32.const 0)))
		(drop (call $create (i64.const 1048576) (i32.const 4)))
		(drop (call $free (call $h1)))
		(drop (call $usage (i32.const 64)))
		(local.set $st (call $install (i32.const 1024) (i32.const 6)))
		(if (i32.ne (local.get $st) (i32.const 10)) (then (call $exit (i32.const 90))))
		(drop (call $usage (i32.const 128)))
		(if (i64.ne (i64.load (i32.const 88)) (i64.load (i32.const 152)))
			(then (call $exit (i32.const 100))))`))
	res, err := h.Run(context.Background(), m)
	require.NoError(t, err, "the refused install (EBUSY) changed the guest's reserved bytes; last error: %s", res.LastError)
	require.False(t, res.InstalledLayout, "a refused install installed nothing")
}

// A layout the guest installed is told in its result: the host's layout,
// a plan installed on the stream among them, no longer held its buffers,
// and Spills counts from the guest's install.
func TestAnInstalledLayoutIsToldInTheResult(t *testing.T) {
	c := openClient(t)
	h := newHost(t, context.Background(), c)
	own := compile(t, h, guestWAT(t, `(data (i32.const 1024) "direct")`, `
		(if (call $install (i32.const 1024) (i32.const 6)) (then (call $exit (i32.const 90))))
		(drop (call $create (i64.const 16) (i32.const 0)))`))
	res, err := h.Run(context.Background(), own)
	require.NoError(t, err)
	require.True(t, res.InstalledLayout)

	none := compile(t, h, guestWAT(t, "", `(drop (call $create (i64.const 16) (i32.const 0)))`))
	res, err = h.Run(context.Background(), none)
	require.NoError(t, err)
	require.False(t, res.InstalledLayout)
}

// A memory_install the pools refuse tells the guest the pools' words
// through last_error, not the client's, which name the guest's stream and
// repeat the layout it gave; the host's words (Result.LastError) are the
// client's.
func TestARefusedInstallTellsTheGuestThePoolsWords(t *testing.T) {
	dg := newDirectGuest(t)
	ctx, g, s, mem, mod := dg.ctx, dg.g, dg.s, dg.mem, dg.mod
	copy(mem.b[1024:], "direct")
	require.Equal(t, ESUCCESS, call(ctx, mod, "buffer_create", 16, 0))
	require.Equal(t, EBUSY, call(ctx, mod, "memory_install", 1024, 6))
	require.Equal(t, ESUCCESS, call(ctx, mod, "last_error", 2048, 4096, 4))
	n := binary.LittleEndian.Uint32(mem.b[4:])
	require.Equal(t, "16 B still live in the pools, in 1 reservation", string(mem.b[2048:2048+n]))
	require.Equal(t, fmt.Sprintf("client: stream %d: installing layout %s: 16 B still live in the pools, in 1 reservation", s.ID(), memory.DirectLayout().Brief()),
		g.last.message())
}
