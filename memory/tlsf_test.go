package memory

import (
	"testing"

	"github.com/stretchr/testify/require"
)

// prepend lays blocks in use and free ones below a range's blocks, which
// move up and keep their numbers; the free stretch at the top of the new
// part and a free first block become one.
func TestTLSFPrependLaysBlocksBelow(t *testing.T) {
	r := newTLSFRange(1000)
	a, off, ok := r.alloc(100)
	require.True(t, ok)
	require.Zero(t, off)
	ids := r.prepend(500, [][2]uint64{{0, 50}, {200, 300}})
	require.Len(t, ids, 2)
	used, err := r.check(1500)
	require.NoError(t, err)
	require.Equal(t, 3, used)
	require.Equal(t, uint64(500), r.blocks[a].offset, "the blocks above moved up and kept their numbers")
	require.Equal(t, uint64(200), r.blocks[ids[1]].offset)
	require.Equal(t, uint64(100), r.blocks[ids[1]].size)

	// Freeing a's block merges it with the stretch below (300..500) and the
	// free rest above it: one free block from 300 to the end.
	f := r.release(a)
	require.Equal(t, uint64(300), r.blocks[f].offset)
	require.Equal(t, uint64(1200), r.blocks[f].size)
	_, err = r.check(1500)
	require.NoError(t, err)

	// A free first block takes in the free top of what is laid below it.
	r = newTLSFRange(1000)
	ids = r.prepend(400, [][2]uint64{{100, 200}})
	used, err = r.check(1400)
	require.NoError(t, err)
	require.Equal(t, 1, used)
	b, off, ok := r.alloc(1200)
	require.True(t, ok, "200..1400 is one free block")
	require.Equal(t, uint64(200), off)
	require.NotEqual(t, ids[0], b)
}

// unprepend undoes prepend where only what prepend laid is in use below
// the size, and changes nothing where more is.
func TestTLSFUnprependUndoesPrepend(t *testing.T) {
	r := newTLSFRange(1000)
	a, _, ok := r.alloc(100)
	require.True(t, ok)
	r.prepend(500, [][2]uint64{{100, 200}})
	b, off, ok := r.alloc(50) // the free stretch at 0, below the laid block
	require.True(t, ok)
	require.Zero(t, off)
	require.False(t, r.unprepend(500, 1), "a block in use below 500 that prepend did not lay")
	_, err := r.check(1500)
	require.NoError(t, err)
	r.release(b)
	require.True(t, r.unprepend(500, 1))
	used, err := r.check(1000)
	require.NoError(t, err)
	require.Equal(t, 1, used)
	require.Zero(t, r.blocks[a].offset, "the blocks above moved back down")
	_, off, ok = r.alloc(900)
	require.True(t, ok)
	require.Equal(t, uint64(100), off)
}
