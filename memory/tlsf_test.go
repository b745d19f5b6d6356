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

// largestFree lists free blocks from the largest bins down, as many as
// the slice it appends to holds: those find reaches last.
func TestTLSFLargestFreeListsTheLargestBinsFirst(t *testing.T) {
	r := newTLSFRange(1 << 20)
	var blocks []int32
	for _, size := range []uint64{64, 16, 4096, 16, 1024, 16, 256, 16} {
		b, _, ok := r.alloc(size)
		require.True(t, ok)
		blocks = append(blocks, b)
	}
	for _, i := range []int{0, 2, 4, 6} { // holes of 64, 4096, 1024 and 256 B between live blocks of 16
		r.release(blocks[i])
	}
	sizes := func(bs []int32) (out []uint64) {
		for _, b := range bs {
			require.True(t, r.blocks[b].free)
			out = append(out, r.blocks[b].size)
		}
		return out
	}
	rest := uint64(1<<20) - (64 + 4096 + 1024 + 256 + 4*16)
	require.Equal(t, []uint64{rest, 4096, 1024}, sizes(r.largestFree(make([]int32, 0, 3))))
	require.Equal(t, []uint64{rest, 4096, 1024, 256, 64}, sizes(r.largestFree(make([]int32, 0, 8))), "every free block, and no more")
	require.Empty(t, r.largestFree(nil))
}

// binFrom finds the next bin holding a free block, at or past the one
// asked, across powers of two, and -1 past the last.
func TestTLSFBinFromFindsTheNextBinWithAFreeBlock(t *testing.T) {
	r := newTLSFRange(1 << 20)
	var blocks []int32
	for _, size := range []uint64{64, 16, 4096, 16} {
		b, _, ok := r.alloc(size)
		require.True(t, ok)
		blocks = append(blocks, b)
	}
	r.release(blocks[0]) // a hole of 64 B
	r.release(blocks[2]) // and one of 4096 B
	rest := tlsfBin(uint64(1<<20) - (64 + 4096 + 2*16))
	require.Equal(t, tlsfBin(64), r.binFrom(0))
	require.Equal(t, tlsfBin(64), r.binFrom(tlsfBin(64)))
	require.Equal(t, tlsfBin(4096), r.binFrom(tlsfBin(64)+1))
	require.Equal(t, tlsfBin(4096), r.binFrom(tlsfBin(4096)))
	require.Equal(t, rest, r.binFrom(tlsfBin(4096)+1))
	require.Equal(t, -1, r.binFrom(rest+1))
	require.Equal(t, -1, r.binFrom(len(r.heads)-1))
}
