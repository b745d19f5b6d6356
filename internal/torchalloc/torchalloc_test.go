package torchalloc

import (
	"errors"
	"math/rand/v2"
	"slices"
	"strings"
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/vkrt/vkrt/dryrun/trace"
)

const (
	kib = 1 << 10
	mib = 1 << 20
)

// check verifies the allocator's structure: segments are chains of
// contiguous blocks, no two free neighbours of one mapping state are left
// unmerged, the sets hold exactly the free mapped and the unmapped blocks,
// and the reserved bytes are the mapped blocks' sizes.
func (a *Allocator) check(t *testing.T) {
	t.Helper()
	inFree, inUnmapped := map[int32]bool{}, map[int32]bool{}
	for _, p := range a.order {
		p.free.each(func(k key, b int32) bool {
			require.Equal(t, freeKey(&a.blocks[b]), k)
			require.False(t, a.blocks[b].allocated)
			require.True(t, a.blocks[b].mapped)
			require.Same(t, p, a.blocks[b].pool)
			inFree[b] = true
			return true
		})
		p.unmapped.each(func(k key, b int32) bool {
			require.Equal(t, unmappedKey(&a.blocks[b]), k)
			require.False(t, a.blocks[b].mapped)
			inUnmapped[b] = true
			return true
		})
	}
	var mapped, live uint64
	dropped := map[int32]bool{}
	for _, i := range a.spare {
		dropped[i] = true
	}
	for i := int32(1); i < int32(len(a.blocks)); i++ {
		if dropped[i] {
			continue
		}
		b := &a.blocks[i]
		if b.mapped {
			mapped += b.size
		}
		if b.allocated {
			live += b.requested
			require.True(t, b.mapped)
		} else {
			require.Equal(t, b.mapped, inFree[i], "free block %d", i)
			require.Equal(t, !b.mapped, inUnmapped[i], "unmapped block %d", i)
		}
		require.True(t, b.mapped || b.expandable())
		if b.next >= 0 {
			n := &a.blocks[b.next]
			require.Equal(t, i, n.prev)
			require.Equal(t, b.addr+b.size, n.addr)
			require.False(t, !b.allocated && !n.allocated && b.mapped == n.mapped, "free neighbours %d and %d unmerged", i, b.next)
		}
	}
	require.Equal(t, a.reserved, mapped)
	require.Equal(t, a.live, live)
	require.LessOrEqual(t, a.reserved, a.deviceBytes)
}

func inline(t *testing.T, text string) *trace.Trace {
	t.Helper()
	tr, err := trace.Read("inline", strings.NewReader(text))
	require.NoError(t, err)
	return tr
}

func TestSizesRoundToTheAllocatorsUnits(t *testing.T) {
	require.Equal(t, uint64(512), roundSize(1))
	require.Equal(t, uint64(512), roundSize(512))
	require.Equal(t, uint64(1024), roundSize(513))
	require.Equal(t, uint64(smallBuffer), allocationSize(smallSize))
	require.Equal(t, uint64(largeBuffer), allocationSize(smallSize+512))
	require.Equal(t, uint64(largeBuffer), allocationSize(minLargeAlloc-512))
	require.Equal(t, uint64(10*mib), allocationSize(minLargeAlloc))
	require.Equal(t, uint64(12*mib), allocationSize(minLargeAlloc+512))
}

func TestDefaultModeSegments(t *testing.T) {
	for _, c := range []struct {
		name             string
		text             string
		reserved, allocs uint64
	}{
		// Three small requests share one 2 MiB segment; a fourth that does
		// not fit gets another.
		{"small requests pack", "a 0 600000 0\na 1 600000 0\na 2 600000 0\na 3 600000 0\n", 4 * mib, 2},
		// Requests of 1 to 10 MiB split a 20 MiB segment.
		{"mid requests share 20 MiB", "a 0 6291456 0\na 1 6291456 0\na 2 6291456 0\na 3 6291456 0\n", 40 * mib, 2},
		// From 10 MiB a request gets a segment of its size rounded to 2 MiB.
		{"large rounds to 2 MiB", "a 0 11534337 0\n", 12 * mib, 1},
		// A freed block serves a smaller request: no new segment.
		{"reuse", "a 0 31457280 0\nf 0\na 1 12582912 0\n", 30 * mib, 1},
		// Blocks freed side by side merge: the whole segment serves again.
		{"merge", "a 0 6291456 0\na 1 6291456 0\na 2 6291456 0\nf 0\nf 2\nf 1\na 3 20971520 0\n", 20 * mib, 1},
		// Streams do not share pools.
		{"streams", "a 0 1000 0\nf 0\na 1 1000 1\n", 4 * mib, 2},
		// Small and large pools do not share segments.
		{"pools", "a 0 31457280 0\nf 0\na 1 1000 0\n", 32 * mib, 2},
	} {
		t.Run(c.name, func(t *testing.T) {
			r, err := Replay(inline(t, c.text), Default)
			require.NoError(t, err)
			require.Equal(t, c.reserved, r.ReservedPeakBytes)
			require.Equal(t, c.allocs, r.DeviceAllocs)
		})
	}
}

// A large block keeps a remainder of 1 MiB or less with it rather than
// splitting it off, and best fit takes the smallest block that fits, the
// lower address first among equals.
func TestDefaultModeSplitsAndBestFit(t *testing.T) {
	a := New(Default, H200Bytes)
	h, err := a.Malloc(11*mib+mib/2, 0) // a 12 MiB segment
	require.NoError(t, err)
	require.Equal(t, uint64(12*mib), a.blocks[h.block].size)
	require.NoError(t, a.Free(h))
	h, err = a.Malloc(11*mib, 0) // 1 MiB would remain: not split
	require.NoError(t, err)
	require.Equal(t, uint64(12*mib), a.blocks[h.block].size)
	require.NoError(t, a.Free(h))
	h, err = a.Malloc(10*mib, 0) // 2 MiB remain: split
	require.NoError(t, err)
	require.Equal(t, uint64(10*mib), a.blocks[h.block].size)
	require.NoError(t, a.Free(h))

	var equal []Handle
	for range 3 {
		h, err := a.Malloc(14*mib, 0)
		require.NoError(t, err)
		equal = append(equal, h)
	}
	first, last := a.blocks[equal[0].block].addr, a.blocks[equal[2].block].addr
	require.NoError(t, a.Free(equal[2]))
	require.NoError(t, a.Free(equal[0]))
	h, err = a.Malloc(14*mib, 0)
	require.NoError(t, err)
	require.Equal(t, first, a.blocks[h.block].addr)
	require.NotEqual(t, first, last)
	require.Equal(t, uint64(4), a.Result().DeviceAllocs)
	a.check(t)
}

func TestExpandableModeGrowsOneSegmentByPages(t *testing.T) {
	a := New(Expandable, H200Bytes)
	h1, err := a.Malloc(30*mib, 0) // maps two 20 MiB pages in one call
	require.NoError(t, err)
	require.Equal(t, uint64(40*mib), a.ReservedBytes())
	h2, err := a.Malloc(5*mib, 0) // fits in the 10 MiB left mapped
	require.NoError(t, err)
	require.Equal(t, uint64(40*mib), a.ReservedBytes())
	require.Equal(t, a.blocks[h1.block].addr+30*mib, a.blocks[h2.block].addr)
	h3, err := a.Malloc(25*mib, 0) // 5 MiB free at the end + one more page
	require.NoError(t, err)
	require.Equal(t, uint64(60*mib), a.ReservedBytes())
	require.Equal(t, a.blocks[h2.block].addr+5*mib, a.blocks[h3.block].addr)
	h4, err := a.Malloc(1000, 0) // the small pool maps 2 MiB pages
	require.NoError(t, err)
	require.Equal(t, uint64(62*mib), a.ReservedBytes())
	require.Equal(t, Result{ReservedPeakBytes: 62 * mib, PeakLiveBytes: 60*mib + 1000, DeviceAllocs: 3, Pages: 4}, a.Result())
	a.check(t)

	// Best fit passes over the free block before the unmapped tail while
	// another block fits.
	require.NoError(t, a.Free(h2))
	h5, err := a.Malloc(30*mib, 0)
	require.NoError(t, err)
	require.NoError(t, a.Free(h1))
	h6, err := a.Malloc(mib+512, 0) // a 35 MiB hole, and 10 MiB free before the unmapped rest
	require.NoError(t, err)
	require.Equal(t, a.blocks[h1.block].addr, a.blocks[h6.block].addr)
	for _, h := range []Handle{h3, h4, h5, h6} {
		require.NoError(t, a.Free(h))
	}
	a.check(t)
	require.Equal(t, uint64(0), a.live)
}

func TestDefaultModeEmptiesTheCacheWhenTheDeviceRefuses(t *testing.T) {
	a := New(Default, 31*mib)
	h, err := a.Malloc(30*mib, 0)
	require.NoError(t, err)
	require.NoError(t, a.Free(h))
	_, err = a.Malloc(1000, 0) // 2 MiB more does not fit: the 30 MiB segment goes
	require.NoError(t, err)
	require.Equal(t, uint64(2*mib), a.ReservedBytes())
	require.Equal(t, Result{ReservedPeakBytes: 30 * mib, PeakLiveBytes: 30 * mib, DeviceAllocs: 2}, a.Result())
	a.check(t)

	_, err = a.Malloc(30*mib, 0)
	require.ErrorIs(t, err, ErrOutOfMemory)
	var oom *OutOfMemoryError
	require.ErrorAs(t, err, &oom)
	require.Equal(t, OutOfMemoryError{Requested: 30 * mib, Reserved: 2 * mib, DeviceBytes: 31 * mib}, *oom)
	require.Equal(t, uint64(2*mib), a.ReservedBytes(), "nothing was cached to release")
	a.check(t)
}

func TestExpandableModeUnmapsFreePagesWhenTheDeviceRefuses(t *testing.T) {
	a := New(Expandable, 63*mib)
	big, err := a.Malloc(50*mib, 0) // three 20 MiB pages in one mapping
	require.NoError(t, err)
	_, err = a.Malloc(1000, 0) // a 2 MiB page of the small pool
	require.NoError(t, err)
	require.Equal(t, uint64(62*mib), a.ReservedBytes())
	require.NoError(t, a.Free(big))
	_, err = a.Malloc(mib, 0) // the rest of the small page
	require.NoError(t, err)
	// The small pool needs a second page, which the device refuses until
	// the large pool's free pages are unmapped; its segment, left with
	// nothing mapped, is released.
	_, err = a.Malloc(mib, 0)
	require.NoError(t, err)
	require.Equal(t, uint64(4*mib), a.ReservedBytes())
	require.Equal(t, Result{ReservedPeakBytes: 62 * mib, PeakLiveBytes: 50*mib + 1000, DeviceAllocs: 3, Pages: 5}, a.Result())
	a.check(t)
	_, err = a.Malloc(30*mib, 0) // a new large segment
	require.NoError(t, err)
	require.Equal(t, uint64(44*mib), a.ReservedBytes())
	a.check(t)
	_, err = a.Malloc(30*mib, 0)
	require.ErrorIs(t, err, ErrOutOfMemory)
	a.check(t)
}

func TestFreeOfWhatIsNotLiveIsRefused(t *testing.T) {
	for _, mode := range []Mode{Default, Expandable} {
		a := New(mode, H200Bytes)
		require.ErrorIs(t, a.Free(Handle{}), ErrNotLive)
		h, err := a.Malloc(100, 0)
		require.NoError(t, err)
		require.NoError(t, a.Free(h))
		require.ErrorIs(t, a.Free(h), ErrNotLive)
		require.ErrorIs(t, a.Free(Handle{block: 1 << 20}), ErrNotLive)
	}
}

func TestReplayNamesTheEventADeviceTooSmallStopsAt(t *testing.T) {
	tr := inline(t, "a 0 100 0\na 1 209715200 0\n")
	_, err := ReplayOn(tr, Default, 100*mib)
	require.ErrorIs(t, err, ErrOutOfMemory)
	require.ErrorContains(t, err, "inline event 2")
}

// Random streams on a small device, in both modes, the structure checked
// after every step, with emptying the cache and refusals exercised.
func TestRandomStreamsKeepTheStructureWhole(t *testing.T) {
	sizes := []uint64{1, 700, 4 * kib, 300 * kib, mib, mib + 1, 3 * mib, 9 * mib, 10 * mib, 17*mib + 3, 45 * mib}
	seeds := uint64(20)
	if testing.Short() {
		seeds = 4
	}
	for _, mode := range []Mode{Default, Expandable} {
		for seed := range seeds {
			rng := rand.New(rand.NewPCG(seed, uint64(mode)))
			a := New(mode, 200*mib)
			var live []Handle
			for step := range 400 {
				if len(live) > 0 && rng.IntN(5) < 2 {
					i := rng.IntN(len(live))
					require.NoError(t, a.Free(live[i]))
					live = slices.Delete(live, i, i+1)
				} else {
					h, err := a.Malloc(sizes[rng.IntN(len(sizes))], uint32(rng.IntN(2)))
					if err != nil {
						require.True(t, errors.Is(err, ErrOutOfMemory), "%s seed %d step %d: %v", mode, seed, step, err)
					} else {
						live = append(live, h)
					}
				}
				a.check(t)
			}
		}
	}
}

func TestBlockSetOrdersLikeASortedSlice(t *testing.T) {
	rng := rand.New(rand.NewPCG(1, 2))
	s := newBlockSet()
	var want []key
	for range 5000 {
		if len(want) > 0 && rng.IntN(3) == 0 {
			i := rng.IntN(len(want))
			s.remove(want[i])
			want = slices.Delete(want, i, i+1)
		} else {
			k := key{uint64(rng.IntN(50)), uint64(rng.IntN(1000))}
			if _, found := slices.BinarySearchFunc(want, k, compareKeys); found {
				continue
			}
			s.insert(k, int32(k.minor))
			i, _ := slices.BinarySearchFunc(want, k, compareKeys)
			want = slices.Insert(want, i, k)
		}
		probe := key{uint64(rng.IntN(52)), uint64(rng.IntN(1000))}
		i, _ := slices.BinarySearchFunc(want, probe, compareKeys)
		k, b, ok := s.atLeast(probe)
		require.Equal(t, i < len(want), ok)
		if ok {
			require.Equal(t, want[i], k)
			require.Equal(t, int32(k.minor), b)
		}
	}
	var got []key
	s.each(func(k key, _ int32) bool { got = append(got, k); return true })
	require.Equal(t, want, got)
}

func compareKeys(a, b key) int {
	switch {
	case a.less(b):
		return -1
	case b.less(a):
		return 1
	}
	return 0
}
