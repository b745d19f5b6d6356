package tlsfref

import (
	"errors"
	"fmt"
	"math/rand/v2"
	"path/filepath"
	"strings"
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/vkrt/vkrt/dryrun/trace"
	"github.com/vkrt/vkrt/internal/tracetest"
)

// check walks the block by address and by list and returns the first way
// it is not a well-formed TLSF block.
func (b *Block) check() error {
	var end, freeBytes uint64
	freeBlocks, taken := 0, 0
	prev := none
	prevFree := false
	// The first block by address is the one nothing precedes.
	first := b.null
	for b.nodes[first].prevPhys != none {
		first = b.nodes[first].prevPhys
	}
	for i := first; i != none; i = b.nodes[i].nextPhys {
		n := b.nodes[i]
		if n.offset != end {
			return fmt.Errorf("block %d starts at %d, the one below ends at %d", i, n.offset, end)
		}
		if n.prevPhys != prev {
			return fmt.Errorf("block %d links back to %d, not %d", i, n.prevPhys, prev)
		}
		if n.free && prevFree {
			return fmt.Errorf("free block %d at %d follows a free block: they were not merged", i, n.offset)
		}
		switch {
		case i == b.null:
			if !n.free || n.nextPhys != none {
				return fmt.Errorf("the null block %d is not the free end", i)
			}
		case n.free:
			freeBlocks++
			freeBytes += n.size
			if !b.listed(i) {
				return fmt.Errorf("free block %d of %d B is not on its list", i, n.size)
			}
		default:
			taken++
			if n.offset%b.alignment != 0 {
				return fmt.Errorf("allocation %d at %d is not aligned to %d", i, n.offset, b.alignment)
			}
		}
		end = n.offset + n.size
		prev, prevFree = i, n.free
	}
	if end != b.size {
		return fmt.Errorf("blocks cover %d of %d B", end, b.size)
	}
	if freeBlocks != b.freeCount || freeBytes != b.freeBytes || taken != b.allocs {
		return fmt.Errorf("counted %d free blocks of %d B and %d allocations, the block says %d, %d B, %d",
			freeBlocks, freeBytes, taken, b.freeCount, b.freeBytes, b.allocs)
	}
	listed := 0
	for l, head := range b.lists {
		for i := head; i != none; i = b.nodes[i].nextFree {
			listed++
			if !b.nodes[i].free || listOf(b.nodes[i].size) != l {
				return fmt.Errorf("block %d of %d B is on list %d", i, b.nodes[i].size, l)
			}
		}
	}
	if listed != b.freeCount {
		return fmt.Errorf("%d blocks on lists, %d free", listed, b.freeCount)
	}
	for c := range maxClasses {
		for s := range uint32(1 << secondLevelBits) {
			l := listIndex(uint8(c), s)
			nonEmpty := l < len(b.lists) && b.lists[l] != none
			if nonEmpty != (b.listBitmaps[c]&(1<<s) != 0) {
				return fmt.Errorf("list %d (class %d, %d) bitmap disagrees with the list", l, c, s)
			}
		}
		if (b.listBitmaps[c] != 0) != (b.classBitmap&(1<<c) != 0) {
			return fmt.Errorf("class %d bitmap disagrees with its lists", c)
		}
	}
	return nil
}

func (b *Block) listed(i int32) bool {
	for j := b.lists[listOf(b.nodes[i].size)]; j != none; j = b.nodes[j].nextFree {
		if j == i {
			return true
		}
	}
	return false
}

func TestListsFollowVMAsClasses(t *testing.T) {
	// Class 0: 32 lists of 8 B up to 256 B; above, 32 lists per power of two.
	for _, c := range []struct {
		size uint64
		list int
	}{{1, 0}, {8, 0}, {9, 1}, {256, 31}, {257, 32}, {511, 63}, {512, 64}, {1023, 95}, {1024, 96}} {
		require.Equal(t, c.list, listOf(c.size), "size %d", c.size)
	}
	b, err := New(VMABlockSize, VMAAlignment)
	require.NoError(t, err)
	// 32 GiB is class 28, list 0: 27 full classes above class 0, one list of
	// class 28 and class 0's 32.
	require.Len(t, b.lists, 27*32+1+32)
}

func TestRandomStreamsPlaceWithoutOverlapAndMergeBack(t *testing.T) {
	seeds := uint64(20)
	if testing.Short() {
		seeds = 4
	}
	for seed := range seeds {
		rng := rand.New(rand.NewPCG(seed, 7))
		alignment := uint64(1) << rng.IntN(8)
		b, err := New(1<<26+uint64(rng.IntN(4096)), alignment)
		require.NoError(t, err)
		type live struct {
			a    Allocation
			size uint64
		}
		var held []live
		for step := range 3000 {
			if len(held) > 0 && rng.IntN(5) < 2 {
				k := rng.IntN(len(held))
				require.NoError(t, b.Free(held[k].a.Handle))
				held[k] = held[len(held)-1]
				held = held[:len(held)-1]
			} else {
				// Mostly small sizes, some large, all classes touched.
				size := uint64(1) + uint64(rng.Int64N(int64(1)<<rng.IntN(20)))
				a, err := b.Allocate(size)
				if errors.Is(err, ErrOutOfSpace) {
					continue
				}
				require.NoError(t, err)
				require.Zero(t, a.Offset%alignment, "seed %d step %d: offset %d, alignment %d", seed, step, a.Offset, alignment)
				held = append(held, live{a, size})
			}
			if err := b.check(); err != nil {
				t.Fatalf("seed %d step %d: %v", seed, step, err)
			}
			if len(held) != b.Allocations() {
				t.Fatalf("seed %d step %d: %d allocations held, the block counts %d", seed, step, len(held), b.Allocations())
			}
			var liveBytes uint64
			for _, h := range held {
				if n := b.nodes[h.a.Handle]; n.offset != h.a.Offset || n.size != h.size || n.free {
					t.Fatalf("seed %d step %d: allocation at %d of %d B is now %+v", seed, step, h.a.Offset, h.size, n)
				}
				liveBytes += h.size
			}
			// check found the blocks contiguous, so live ranges are disjoint
			// exactly when their bytes and the free bytes add up.
			if liveBytes+b.FreeBytes() != b.size {
				t.Fatalf("seed %d step %d: %d B live and %d B free in a block of %d B", seed, step, liveBytes, b.FreeBytes(), b.size)
			}
		}
		for _, h := range held {
			require.NoError(t, b.Free(h.a.Handle))
		}
		require.True(t, b.Empty(), "seed %d: every free merged back into one free block", seed)
		require.NoError(t, b.check())
	}
}

func TestDefaultStrategyTakesTheEndBeforeAnExactHole(t *testing.T) {
	// VMA's default for virtual allocations: a list that surely fits, then
	// the end of the block, and only then the size's own list.
	b, err := New(4096, 32)
	require.NoError(t, err)
	var h [3]Allocation
	for i := range h {
		h[i], err = b.Allocate(1024)
		require.NoError(t, err)
	}
	require.NoError(t, b.Free(h[1].Handle))
	end, err := b.Allocate(1024)
	require.NoError(t, err)
	require.Equal(t, uint64(3072), end.Offset, "the end of the block before the hole of the same size")
	hole, err := b.Allocate(1024)
	require.NoError(t, err)
	require.Equal(t, uint64(1024), hole.Offset, "the size's own list once the end is too small")
	require.Equal(t, uint64(4096), b.HighWater())
	require.NoError(t, b.Free(h[0].Handle))

	// An unaligned end leaves a gap below the next allocation: a free
	// block of its own, merged away when its neighbour is freed.
	c, err := New(4096, 32)
	require.NoError(t, err)
	first, err := c.Allocate(1000)
	require.NoError(t, err)
	second, err := c.Allocate(1000)
	require.NoError(t, err)
	require.Equal(t, []uint64{0, 1024}, []uint64{first.Offset, second.Offset})
	require.Equal(t, 1, c.freeCount, "the 24 B gap")
	require.NoError(t, c.Free(first.Handle))
	require.Equal(t, 1, c.freeCount, "the gap merged with the freed block below it")
	require.NoError(t, c.check())
	require.NoError(t, b.check())
}

func TestBadArgumentsAreRefusedAndChangeNothing(t *testing.T) {
	_, err := New(0, 32)
	require.ErrorIs(t, err, ErrBadArgument)
	_, err = New(1<<20, 48)
	require.ErrorIs(t, err, ErrBadArgument)

	b, err := New(1<<20, 32)
	require.NoError(t, err)
	a, err := b.Allocate(1000)
	require.NoError(t, err)
	_, err = b.Allocate(0)
	require.ErrorIs(t, err, ErrBadArgument)

	_, err = b.Allocate(1 << 20)
	var full *OutOfSpaceError
	require.ErrorAs(t, err, &full)
	require.ErrorIs(t, err, ErrOutOfSpace)
	require.Equal(t, OutOfSpaceError{Size: 1 << 20, FreeBytes: 1<<20 - 1000}, *full)

	for _, h := range []Handle{-1, 1000, Handle(b.null)} {
		require.ErrorIs(t, b.Free(h), ErrBadHandle, "handle %d", h)
	}
	require.NoError(t, b.Free(a.Handle))
	require.ErrorIs(t, b.Free(a.Handle), ErrBadHandle, "a handle freed twice")
	require.True(t, b.Empty())
	require.NoError(t, b.check())
}

// The reference is VMA's placement exactly: on every shipped stream it
// reaches the extent VMA itself reached.
func TestShippedStreamsReachVMAsExtent(t *testing.T) {
	for _, path := range tracetest.Shipped(t) {
		name := strings.TrimSuffix(filepath.Base(path), ".trace.gz")
		vma, ok := tracetest.VMA[name]
		require.True(t, ok, "no VMA figures recorded for %s", name)
		tr := tracetest.Read(t, name)
		res, timing, err := Measure(tr)
		require.NoError(t, err)
		require.Equal(t, name, res.Trace)
		require.Equal(t, tr.PeakLiveBytes(), res.PeakLiveBytes, name)
		require.InDelta(t, vma.ExtentRatio, res.Ratio(), 0.0005, "%s: extent %d over peak live %d", name, res.ExtentBytes, res.PeakLiveBytes)
		require.Equal(t, len(tr.Events), timing.Events)
		require.Positive(t, timing.Elapsed)
	}
}

// A stream the 32 GiB block cannot hold is replayed in a larger one, as a
// growable block grows: one of 40 GB live failed the reference, and with it
// the whole --bench row. The shipped streams stay in the 32 GiB block.
func TestAStreamPastTheBlockIsReplayedInALargerOne(t *testing.T) {
	tr, err := trace.Read("big", strings.NewReader("a 1 40000000000 0\na 2 30000000000 0\nf 1\na 3 50000000000 0\n"))
	require.NoError(t, err)
	res, timing, err := Measure(tr)
	require.NoError(t, err)
	require.EqualValues(t, 128<<30, res.BlockBytes, "an extent of 120 GB, past 64 GiB")
	require.EqualValues(t, 80000000000, res.PeakLiveBytes)
	require.EqualValues(t, 40000000000+30000000000+50000000000, res.ExtentBytes, "the hole of 40 GB does not hold 50 GB: past the 30 GB")
	require.Equal(t, 4, timing.Events)

	small := tracetest.Read(t, "resnet50_train")
	res, _, err = Measure(small)
	require.NoError(t, err)
	require.EqualValues(t, VMABlockSize, res.BlockBytes)
}

func BenchmarkReplay(b *testing.B) {
	for _, path := range tracetest.Shipped(b) {
		name := strings.TrimSuffix(filepath.Base(path), ".trace.gz")
		tr := tracetest.Read(b, name)
		b.Run(name, func(b *testing.B) {
			var events int
			var elapsed float64
			for b.Loop() {
				_, timing, err := Measure(tr)
				if err != nil {
					b.Fatal(err)
				}
				events += timing.Events
				elapsed += float64(timing.Elapsed.Nanoseconds())
			}
			b.ReportMetric(elapsed/float64(events), "ns/event")
		})
	}
}
