package memory

import (
	"bytes"
	"log/slog"
	"strings"
	"testing"

	"github.com/stretchr/testify/require"

	vkruntime "github.com/vkrt/vkrt/runtime"
)

func TestReservationsArePaddedToAlignment(t *testing.T) {
	m, _ := newTestManager(t, SlicedLayout(SlicedPool{PageSize: 4096}))
	h := mustReserve(t, m, 100, Eager)
	require.Equal(t, uint64(112), locate(t, m, h).size)
	require.Equal(t, Usage{NumberAllocs: 1, BytesInUse: 100, BytesPadding: 12, BytesReserved: 4096}, m.Usage())
	sh, err := m.Resolve(h)
	require.NoError(t, err)
	require.Equal(t, uint64(0), sh.Offset)
	require.Equal(t, uint64(112), sh.Size)

	// A zero-size request takes one alignment unit.
	z := mustReserve(t, m, 0, Eager)
	require.Equal(t, where{pool: 0, page: 0, offset: 112, size: 16}, locate(t, m, z))
	require.Equal(t, Usage{NumberAllocs: 2, BytesInUse: 100, BytesPadding: 28, BytesReserved: 4096}, m.Usage())
}

func TestSlicedFirstFitAndCoalescing(t *testing.T) {
	m, s := newTestManager(t, SlicedLayout(SlicedPool{PageSize: 1024}))
	a := mustReserve(t, m, 256, Eager)
	b := mustReserve(t, m, 256, Eager)
	c := mustReserve(t, m, 256, Eager)
	require.Equal(t, []uint64{0, 256, 512}, []uint64{locate(t, m, a).offset, locate(t, m, b).offset, locate(t, m, c).offset})

	require.NoError(t, m.Free(b))
	d := mustReserve(t, m, 128, Eager) // lowest free block that fits: the hole
	require.Equal(t, where{page: 0, offset: 256, size: 128}, locate(t, m, d))
	e := mustReserve(t, m, 256, Eager) // the hole's rest is too small
	require.Equal(t, where{page: 0, offset: 768, size: 256}, locate(t, m, e))

	// The page is full: the next slice opens page 1.
	f := mustReserve(t, m, 512, Eager)
	require.Equal(t, where{page: 1, offset: 0, size: 512}, locate(t, m, f))
	require.Equal(t, 2, s.allocs)

	// Freeing a and d leaves [0,256) and [256,384) free, and their
	// coalesced block holds 384 bytes in page 0 again.
	require.NoError(t, m.Free(a))
	require.NoError(t, m.Free(d))
	g := mustReserve(t, m, 384, Eager)
	require.Equal(t, where{page: 0, offset: 0, size: 384}, locate(t, m, g))

	// Freeing everything in page 0 coalesces it whole.
	for _, h := range []Handle{g, c, e} {
		require.NoError(t, m.Free(h))
	}
	whole := mustReserve(t, m, 1024, Eager)
	require.Equal(t, where{page: 0, offset: 0, size: 1024}, locate(t, m, whole))
	require.Equal(t, 2, s.allocs)
}

func TestSlicedRoutingAndNearPageRule(t *testing.T) {
	m, _ := newTestManager(t, SlicedLayout(
		SlicedPool{PageSize: 1024, MaxSlice: u64(128)},
		SlicedPool{PageSize: 4096, MaxSlice: u64(512), Pages: u64(4)},
	))
	require.Equal(t, 0, locate(t, m, mustReserve(t, m, 100, Eager)).pool)
	require.Equal(t, 1, locate(t, m, mustReserve(t, m, 200, Eager)).pool)
	// Within 20 % of the uncapped first pool's page: a page of its own there.
	near := mustReserve(t, m, 1000, Eager)
	require.Equal(t, where{pool: 0, page: 1, offset: 0, size: 1008}, locate(t, m, near))
	// 800 B is neither a slice of pool 0 nor near its page, nor a slice of
	// pool 1; and capped pool 1 has no near-page rule.
	_, err := m.Reserve(800, Eager)
	require.ErrorIs(t, err, vkruntime.ErrBufferTooBig)
	require.ErrorContains(t, err, "asked 800 B (800 B aligned)")
	_, err = m.Reserve(4000, Eager)
	require.ErrorIs(t, err, vkruntime.ErrBufferTooBig)
	require.Equal(t, uint64(0), m.Spills())
}

func TestFullCappedPoolSpillsAndWarnsOnce(t *testing.T) {
	var logs bytes.Buffer
	m, _ := newTestManager(t, SlicedLayout(
		SlicedPool{PageSize: 256, Pages: u64(1)},
		SlicedPool{PageSize: 4096},
	))
	m.SetLogger(slog.New(slog.NewTextHandler(&logs, nil)))
	require.Equal(t, 0, locate(t, m, mustReserve(t, m, 256, Eager)).pool)
	for i := range 3 {
		h := mustReserve(t, m, 16, Eager)
		require.Equal(t, 1, locate(t, m, h).pool)
		require.Equal(t, uint64(i+1), m.Spills())
	}
	require.Equal(t, 1, strings.Count(logs.String(), "level=WARN"), logs.String())
	require.Contains(t, logs.String(), "pool=0")

	// A new layout warns again.
	require.ErrorIs(t, m.Install(m.Layout()), &InstallError{Kind: PoolsInUse})
}

func TestCapacityExceeded(t *testing.T) {
	m, s := newTestManager(t, SlicedLayout(SlicedPool{PageSize: 256, Pages: u64(2)}))
	mustReserve(t, m, 256, Eager)
	mustReserve(t, m, 200, Eager)
	before, allocs := m.Report(), s.allocs
	_, err := m.Reserve(100, Eager)
	require.ErrorIs(t, err, vkruntime.ErrPoolCapacityExceeded)
	var ce *vkruntime.CapacityError
	require.ErrorAs(t, err, &ce)
	// In use counts what the live slices occupy: 256 B and 208 B.
	require.Equal(t, vkruntime.CapacityError{Size: 100, Capacity: 512, InUse: 464}, *ce)
	require.ErrorContains(t, err, "asked 100 B, capacity 512 B with 464 B in use (48 B free)")
	require.Equal(t, before, m.Report())
	require.Equal(t, allocs, s.allocs)
	require.Equal(t, uint64(0), m.Spills())
	// A size that fits the tail of page 1 still goes in.
	h := mustReserve(t, m, 48, Eager)
	require.Equal(t, where{page: 1, offset: 208, size: 48}, locate(t, m, h))
}

func TestExplicitCleanupReturnsFreePages(t *testing.T) {
	m, s := newTestManager(t, SlicedLayout(SlicedPool{PageSize: 1024}))
	a := mustReserve(t, m, 1024, Eager)
	b := mustReserve(t, m, 1024, Eager)
	c := mustReserve(t, m, 1024, Eager)
	require.NoError(t, m.Free(a))
	require.NoError(t, m.Free(c))
	m.Cleanup(false)
	require.Equal(t, uint64(3), m.Report().Dynamic[0].Pages, "an implicit cleanup keeps sliced pages")
	m.Cleanup(true)
	r := m.Report().Dynamic[0]
	require.Equal(t, uint64(1), r.Pages)
	require.Equal(t, uint64(3), r.PagesPeak)
	require.Equal(t, 2, s.deallocs)
	require.Equal(t, 0, s.pending, "cleanup flushes")
	require.Equal(t, uint64(1024), m.Usage().BytesReserved)
	require.Len(t, s.live, 1)
	// The lowest free page index is reused first.
	d := mustReserve(t, m, 16, Eager)
	require.Equal(t, where{page: 0, offset: 0, size: 16}, locate(t, m, d))
	_, err := m.Resolve(b)
	require.NoError(t, err)
}

func TestLazyPagesReachTheDriverOnlyWhenResolved(t *testing.T) {
	m, s := newTestManager(t, SlicedLayout(SlicedPool{PageSize: 1024}))
	a := mustReserve(t, m, 100, Lazy)
	b := mustReserve(t, m, 100, Lazy)
	require.Equal(t, 0, s.allocs)
	r := m.Report().Dynamic[0]
	require.Equal(t, uint64(1), r.Pages)
	require.Equal(t, uint64(1), r.PagesUnmapped)
	require.Equal(t, uint64(1024), m.Usage().BytesReserved, "an unmapped page counts like a real one")

	sa, err := m.Resolve(a)
	require.NoError(t, err)
	require.Equal(t, 1, s.allocs)
	require.Equal(t, uint64(0), m.Report().Dynamic[0].PagesUnmapped)
	sb, err := m.Resolve(b)
	require.NoError(t, err)
	require.Equal(t, 1, s.allocs, "one page, one driver allocation")
	require.Equal(t, sa.ID, sb.ID)
	require.Equal(t, uint64(112), sb.Offset)

	// A lazy page that is never resolved is released without the driver.
	c := mustReserve(t, m, 1000, Lazy)
	require.Equal(t, 1, locate(t, m, c).page)
	require.NoError(t, m.Free(c))
	m.Cleanup(true)
	require.Equal(t, 0, s.deallocs)
	require.Equal(t, uint64(0), m.Report().Dynamic[0].PagesUnmapped)

	// An eager reservation in an unmapped page maps it.
	d := mustReserve(t, m, 1000, Lazy)
	require.Equal(t, 1, locate(t, m, d).page)
	mustReserve(t, m, 800, Lazy) // fills page 0, which is mapped already
	require.Equal(t, 1, s.allocs)
	e := mustReserve(t, m, 16, Eager)
	require.Equal(t, 1, locate(t, m, e).page)
	require.Equal(t, 2, s.allocs)
	require.NoError(t, m.Free(d))
}

func TestDriverRefusalChangesNothing(t *testing.T) {
	m, s := newTestManager(t, SlicedLayout(SlicedPool{PageSize: 1024}))
	mustReserve(t, m, 1024, Eager)
	lazy := mustReserve(t, m, 1000, Lazy)
	s.failAfter = 0
	before := m.Report()
	_, err := m.Reserve(1000, Eager)
	require.ErrorIs(t, err, vkruntime.ErrOutOfDeviceMemory)
	var oom *vkruntime.OutOfMemoryError
	require.ErrorAs(t, err, &oom)
	require.Equal(t, uint64(1000), oom.Size, "the request's size, not its page's")
	require.ErrorContains(t, err, "asked 1000 B: an allocation of 1024 B for it was refused: test storage refuses")
	_, err = m.Resolve(lazy)
	require.ErrorIs(t, err, vkruntime.ErrOutOfDeviceMemory)
	_, err = m.Reserve(16, Eager) // fits the unmapped page, which cannot be mapped
	require.ErrorIs(t, err, vkruntime.ErrOutOfDeviceMemory)
	require.Equal(t, before, m.Report())
	s.failAfter = -1
	_, err = m.Resolve(lazy)
	require.NoError(t, err)
}

func TestHighWaterMarks(t *testing.T) {
	m, _ := newTestManager(t, SlicedLayout(SlicedPool{PageSize: 1024}))
	var hs []Handle
	for _, size := range []uint64{1000, 900, 10, 1024} {
		hs = append(hs, mustReserve(t, m, size, Lazy))
	}
	for _, h := range hs {
		require.NoError(t, m.Free(h))
	}
	r := m.Report().Dynamic[0]
	require.Equal(t, uint64(3), r.PagesPeak) // 1000 and 10 share a page
	require.Equal(t, uint64(3), r.Pages)
	require.Equal(t, uint64(1024), r.LargestAlloc)
	require.Equal(t, Usage{BytesReserved: 3072}, r.Usage)

	// Replaying the same stream capped at the peak fits by construction.
	capped, _ := newTestManager(t, SlicedLayout(SlicedPool{PageSize: 1024, Pages: u64(r.PagesPeak)}))
	for _, size := range []uint64{1000, 900, 10, 1024} {
		mustReserve(t, capped, size, Lazy)
	}
	require.Equal(t, uint64(0), capped.Spills())
}
