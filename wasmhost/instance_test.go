package wasmhost

import (
	"context"
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/vkrt/vkrt/client"
)

// A slot's handles never repeat: each free bumps its generation, and a slot
// whose generation would wrap is retired, so even a guest that frees and
// makes buffers forever never sees a stale handle come back to life.
func TestHandlesNeverRepeat(t *testing.T) {
	g := &instance{}
	seen := map[uint32]bool{}
	for range 3 * maxGen {
		b := &client.Buffer{}
		h := g.add(b)
		require.NotZero(t, h)
		require.False(t, seen[h], "handle %#x handed out twice", h)
		seen[h] = true
		require.Same(t, b, g.lookup(h))
		require.Same(t, b, g.remove(h))
		require.Nil(t, g.lookup(h), "a freed handle names nothing")
		require.Nil(t, g.remove(h))
	}
	require.Len(t, g.slots, 3, "one slot per 4095 generations, each retired in turn")
	require.Zero(t, g.live)

	for _, forged := range []uint32{0, 1, indexMask, 1 << indexBits, 0xFFFFFFFF, maxGen<<indexBits | 4} {
		require.Nil(t, g.lookup(forged), "%#x", forged)
	}
}

// A table whose every slot is live or retired is full: it never hands out
// a handle whose index would spill into the generation bits.
func TestHandleTableFills(t *testing.T) {
	g := &instance{slots: make([]slot, maxTableHandles-1)}
	for i := range g.slots {
		g.slots[i].gen = maxGen // retired: its generation would wrap
	}
	require.False(t, g.full())
	h := g.add(&client.Buffer{})
	require.Equal(t, uint32(1<<indexBits|maxTableHandles), h, "the last index, generation 1")
	require.True(t, g.full())
	require.NotNil(t, g.remove(h))
	require.False(t, g.full(), "its slot is free again")
}

// Run refuses a module it cannot run before anything is made for it: a nil
// one (what a refused Compile returns) panicked, and one another host
// compiled, or one closed, was refused in wazero's words, "source module
// must be compiled before instantiation".
func TestRunRefusesAModuleItDidNotCompile(t *testing.T) {
	c := openClient(t)
	h, other := newHost(t, context.Background(), c), newHost(t, context.Background(), c)
	res, err := h.Run(context.Background(), nil)
	require.ErrorIs(t, err, ErrRefused)
	require.Nil(t, res)
	res, err = h.Run(context.Background(), compile(t, other, guestWAT(t, "", create16)))
	require.ErrorIs(t, err, ErrRefused)
	require.ErrorContains(t, err, "compiled by another host")
	require.Nil(t, res, "the guest was never loaded")
	m := compile(t, h, guestWAT(t, "", create16))
	require.NoError(t, m.Close(context.Background()))
	res, err = h.Run(context.Background(), m)
	require.ErrorIs(t, err, ErrRefused)
	require.ErrorContains(t, err, "the module is closed")
	require.Nil(t, res)
}
