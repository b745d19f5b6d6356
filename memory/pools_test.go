package memory

import (
	"fmt"
	"log/slog"
	"testing"

	"github.com/stretchr/testify/require"

	vkruntime "github.com/vkrt/vkrt/runtime"
)

func TestExclusivePoolReusesAnyPageThatFits(t *testing.T) {
	m, s := newTestManager(t, ExclusivePagesLayout())
	a := mustReserve(t, m, 1000, Eager)
	require.Equal(t, where{pool: 0, page: 0, offset: 0, size: 1008}, locate(t, m, a))
	require.NoError(t, m.Free(a))
	b := mustReserve(t, m, 500, Eager) // reuses the 1008 B page
	require.Equal(t, 1, s.allocs)
	require.Equal(t, Usage{NumberAllocs: 1, BytesInUse: 500, BytesPadding: 508, BytesReserved: 1008}, m.Usage())
	c := mustReserve(t, m, 2000, Eager) // nothing free fits: a new page
	require.Equal(t, 2, s.allocs)
	require.Equal(t, uint64(2000), locate(t, m, c).size)
	require.NoError(t, m.Free(c))
	require.NoError(t, m.Free(b))
	// The smallest free page that fits is taken.
	d := mustReserve(t, m, 16, Eager)
	require.Equal(t, uint64(1008), locate(t, m, d).size)
	r := m.Report().Dynamic[0]
	require.Equal(t, ExclusiveKind{MaxAllocSize: 4096}, r.Kind)
	require.Equal(t, uint64(2), r.Pages)
	require.Equal(t, uint64(2000), r.LargestAlloc)
	// A size past the bucket goes to the next one.
	e := mustReserve(t, m, 5000, Eager)
	require.Equal(t, 1, locate(t, m, e).pool)
}

func TestExclusivePoolReturnsPagesIdleForAPeriod(t *testing.T) {
	m, s := newTestManager(t, ExclusivePagesLayout())
	idle := mustReserve(t, m, 4000, Eager)
	busy := mustReserve(t, m, 100, Eager)
	require.NoError(t, m.Free(idle))
	require.NoError(t, m.Free(busy))
	// The small page takes every small request, so the large one idles.
	// The pool sweeps every period of its reservations (at 1000, 2000, …)
	// and returns pages free for a whole period: the idle page, freed at
	// reservation 2, goes at the sweep of reservation 2000.
	for range 2*exclusiveDeallocPeriod - 3 {
		h := mustReserve(t, m, 100, Eager)
		require.NoError(t, m.Free(h))
	}
	require.Equal(t, 0, s.deallocs)
	require.Equal(t, uint64(2), m.Report().Dynamic[0].Pages)
	h := mustReserve(t, m, 100, Eager)
	require.NoError(t, m.Free(h))
	require.Equal(t, 1, s.deallocs)
	require.Equal(t, uint64(1), m.Report().Dynamic[0].Pages)
	require.Equal(t, uint64(112), m.Usage().BytesReserved)
	m.Cleanup(true)
	require.Equal(t, 2, s.deallocs)
	require.Empty(t, s.live)
}

func TestDirectPoolReusesByExactSize(t *testing.T) {
	m, s := newTestManager(t, DirectLayout())
	a := mustReserve(t, m, 100, Eager)
	sa, err := m.Resolve(a)
	require.NoError(t, err)
	require.Equal(t, vkruntime.StorageHandle{ID: sa.ID, Offset: 0, Size: 112}, sa)
	require.NoError(t, m.Free(a))
	b := mustReserve(t, m, 112, Eager) // the same aligned size
	sb, err := m.Resolve(b)
	require.NoError(t, err)
	require.Equal(t, sa.ID, sb.ID)
	c := mustReserve(t, m, 96, Eager) // smaller, but never shares
	require.Equal(t, 2, s.allocs)
	require.Equal(t, Usage{NumberAllocs: 2, BytesInUse: 208, BytesPadding: 0, BytesReserved: 208}, m.Usage())
	r := m.Report().Dynamic[0]
	require.Equal(t, DirectKind{}, r.Kind)
	require.Equal(t, uint64(2), r.Pages)
	require.NoError(t, m.Free(b))
	require.NoError(t, m.Free(c))
	require.Equal(t, uint64(2), m.Report().Dynamic[0].Pages, "free allocations stay cached")
	m.Cleanup(true)
	require.Empty(t, s.live)
	require.Equal(t, uint64(0), m.Report().Dynamic[0].Pages)
}

func TestDirectPoolReclaimsPastTheWatermark(t *testing.T) {
	m, s := newTestManager(t, DirectLayout())
	var ids []vkruntime.StorageID
	var hs []Handle
	for range 3 {
		h := mustReserve(t, m, 1024, Eager)
		sh, err := m.Resolve(h)
		require.NoError(t, err)
		ids, hs = append(ids, sh.ID), append(hs, h)
	}
	for _, h := range hs {
		require.NoError(t, m.Free(h))
	}
	// 3 KiB cached, nothing live: a new 2 KiB allocation would hold 5 KiB,
	// past twice the live bytes (4 KiB); the oldest cached one goes.
	mustReserve(t, m, 2048, Eager)
	require.Equal(t, 1, s.deallocs)
	require.NotContains(t, s.live, ids[0])
	require.Contains(t, s.live, ids[1])
	require.Contains(t, s.live, ids[2])
	require.Equal(t, 0, s.pending)
	require.Equal(t, uint64(4096), m.Usage().BytesReserved)
}

func TestPersistentWindowsNest(t *testing.T) {
	m, s := newTestManager(t, SlicedLayout(SlicedPool{PageSize: 4096}))
	m.BeginPersistent()
	w := mustReserve(t, m, 1000, Eager)
	m.BeginPersistent()
	x := mustReserve(t, m, 1000, Eager)
	m.EndPersistent()
	require.True(t, m.InPersistent())
	y := mustReserve(t, m, 50, Eager)
	m.EndPersistent()
	m.EndPersistent() // unbalanced: ignored
	require.False(t, m.InPersistent())
	d := mustReserve(t, m, 1000, Eager)
	for _, h := range []Handle{w, x, y} {
		require.Equal(t, -1, locate(t, m, h).pool)
	}
	require.Equal(t, 0, locate(t, m, d).pool)
	r := m.Report()
	require.Equal(t, PersistentKind{}, r.Persistent.Kind)
	require.Equal(t, Usage{NumberAllocs: 3, BytesInUse: 2050, BytesPadding: 30, BytesReserved: 2080}, r.Persistent.Usage)
	require.Equal(t, uint64(3), r.Persistent.Pages)

	// Exact-fit reuse by identical size only.
	require.NoError(t, m.Free(x))
	m.BeginPersistent()
	allocs := s.allocs
	z := mustReserve(t, m, 1008, Eager)
	require.Equal(t, allocs, s.allocs)
	mustReserve(t, m, 1000-16, Eager)
	require.Equal(t, allocs+1, s.allocs)
	m.EndPersistent()

	// Install leaves the persistent pool alone: its live reservations do
	// not block a rebuild, and its marks survive.
	require.NoError(t, m.Free(d))
	m.BeginPersistent()
	cached := mustReserve(t, m, 4000, Eager)
	m.EndPersistent()
	require.NoError(t, m.Free(cached))
	persistent := m.Report().Persistent
	require.NoError(t, m.Install(SlicedLayout(SlicedPool{PageSize: 8192})))
	require.Equal(t, persistent, m.Report().Persistent, "install does not even clean the persistent cache")
	_, err := m.Resolve(z)
	require.NoError(t, err)
	require.NoError(t, m.Free(w))
}

func TestInstallRefusesWhileDynamicBytesAreLive(t *testing.T) {
	m, s := newTestManager(t, SlicedLayout(SlicedPool{PageSize: 4096}))
	h := mustReserve(t, m, 100, Eager)
	spare := mustReserve(t, m, 4096, Eager)
	require.NoError(t, m.Free(spare))
	old := m.Layout()

	err := m.Install(DirectLayout())
	var ie *InstallError
	require.ErrorAs(t, err, &ie)
	require.Equal(t, InstallError{Kind: PoolsInUse, BytesInUse: 100, AllocsInUse: 1}, *ie)
	require.True(t, ie.Transient())
	require.Equal(t, "100 B still live in the pools, in 1 reservation", err.Error())
	require.True(t, old.Equal(m.Layout()))
	// A refused Install changes nothing: the free page stays (it was
	// cleaned up first, and a guest's refused memory_install gave back its
	// free pages), the live one too.
	require.Zero(t, s.deallocs)
	sh, err := m.Resolve(h)
	require.NoError(t, err)
	require.Contains(t, s.live, sh.ID)

	require.NoError(t, m.Free(h))
	require.NoError(t, m.Install(DirectLayout()))
	require.Equal(t, LayoutDirect, m.Layout().Kind())
	r := m.Report()
	require.Len(t, r.Dynamic, 1)
	require.Equal(t, uint64(0), r.Dynamic[0].PagesPeak)
	require.Equal(t, uint64(0), r.Dynamic[0].LargestAlloc)
	require.Empty(t, s.live)
	require.Equal(t, Usage{}, m.Usage())
}

func TestInstallResetsMarksAndSpills(t *testing.T) {
	m, _ := newTestManager(t, SlicedLayout(SlicedPool{PageSize: 256, Pages: u64(1)}, SlicedPool{PageSize: 4096}))
	m.SetLogger(slog.New(slog.DiscardHandler))
	a := mustReserve(t, m, 256, Eager)
	b := mustReserve(t, m, 16, Eager)
	require.Equal(t, uint64(1), m.Spills())
	require.NoError(t, m.Free(a))
	require.NoError(t, m.Free(b))
	require.NoError(t, m.Install(m.Layout()))
	require.Equal(t, uint64(0), m.Spills())
	for _, p := range m.Report().Dynamic {
		require.Equal(t, uint64(0), p.PagesPeak)
		require.Equal(t, uint64(0), p.Pages)
	}
}

func TestHandlesCarryAGeneration(t *testing.T) {
	m, _ := newTestManager(t, SlicedLayout(SlicedPool{PageSize: 4096}))
	a := mustReserve(t, m, 100, Eager)
	require.NoError(t, m.Free(a))
	before := m.Report()
	require.ErrorIs(t, m.Free(a), vkruntime.ErrNotFound, "a double free")
	require.Equal(t, before, m.Report())

	b := mustReserve(t, m, 200, Eager) // reuses a's slot
	require.NotEqual(t, a, b)
	_, err := m.Resolve(a)
	require.ErrorIs(t, err, vkruntime.ErrNotFound)
	require.ErrorContains(t, err, "resolve of "+a.String())
	require.ErrorIs(t, m.Free(a), vkruntime.ErrNotFound)
	sb, err := m.Resolve(b)
	require.NoError(t, err)
	require.Equal(t, uint64(208), sb.Size)
	require.Equal(t, uint64(1), m.Usage().NumberAllocs)

	require.ErrorIs(t, m.Free(Handle{}), vkruntime.ErrNotFound)
	require.ErrorIs(t, m.Free(Handle{slot: 1000, gen: 1, manager: b.manager}), vkruntime.ErrNotFound)

	// Another manager's handle with the same slot and generation names
	// nothing here.
	other, _ := newTestManager(t, SlicedLayout(SlicedPool{PageSize: 4096}))
	foreign := mustReserve(t, other, 200, Eager)
	require.Equal(t, b.slot, foreign.slot)
	require.Equal(t, b.gen-1, foreign.gen)
	require.NoError(t, other.Free(foreign))
	foreign = mustReserve(t, other, 200, Eager)
	require.Equal(t, b.gen, foreign.gen)
	require.ErrorIs(t, m.Free(foreign), vkruntime.ErrNotFound)
	_, err = m.Resolve(foreign)
	require.ErrorIs(t, err, vkruntime.ErrNotFound)
	require.Equal(t, uint64(1), m.Usage().NumberAllocs)
	require.True(t, Handle{}.IsZero())
	require.False(t, b.IsZero())
	live := map[Handle]bool{b: true}
	require.True(t, live[b])
}

func TestBadRequestsChangeNothing(t *testing.T) {
	m, s := newTestManager(t, SlicedLayout(SlicedPool{PageSize: 4096}))
	mustReserve(t, m, 100, Eager)
	before, allocs := m.Report(), s.allocs
	_, err := m.Reserve(16, Mapping(7))
	require.ErrorIs(t, err, ErrUnknownMapping)
	require.ErrorContains(t, err, "unknown mapping 7")
	_, err = m.Reserve(^uint64(0), Eager)
	require.ErrorIs(t, err, vkruntime.ErrBufferTooBig)
	_, err = m.Reserve(5000, Eager)
	require.ErrorIs(t, err, vkruntime.ErrBufferTooBig)
	require.ErrorContains(t, err, "asked 5000 B (5008 B aligned), more than any pool of the layout accepts (largest 4096 B)")
	require.Equal(t, before, m.Report())
	require.Equal(t, allocs, s.allocs)

	_, err = NewManager(nil, testProps, SubSlicesLayout())
	require.Error(t, err)
	_, err = NewManager(newFakeStorage(), vkruntime.DeviceProperties{Alignment: 3, MaxPageSize: 96}, SubSlicesLayout())
	require.ErrorContains(t, err, "not a power of two")
}

// An uncapped sliced pool takes sizes up to its max_slice and again within
// 20 % of its page: a size between is refused naming that gap, not as more
// than the largest size the pools take, which it is not.
func TestASizeBetweenWhatThePoolsTakeIsRefusedNamingTheGap(t *testing.T) {
	// The first pool takes up to 256 KiB and from 3355444 B to 4 MiB, the
	// second (capped) up to 512 KiB.
	m, s := newTestManager(t, SlicedLayout(SlicedPool{PageSize: 4 << 20, MaxSlice: u64(256 << 10)}, SlicedPool{PageSize: 2 << 20, MaxSlice: u64(512 << 10), Pages: u64(1)}))
	mustReserve(t, m, 3_500_000, Eager)
	before, allocs := m.Report(), s.allocs
	for _, size := range []uint64{512<<10 + 1, 1 << 20, 3355440} {
		_, err := m.Reserve(size, Lazy)
		require.ErrorIs(t, err, vkruntime.ErrBufferTooBig)
		require.ErrorContains(t, err, fmt.Sprintf("asked %d B", size))
		require.ErrorContains(t, err, "which no pool of the layout accepts: none takes an aligned size from 524304 B to 3355440 B (the largest any takes is 4194304 B)")
	}
	require.Equal(t, before, m.Report())
	require.Equal(t, allocs, s.allocs)
	mustReserve(t, m, 3355441, Lazy) // 3355456 B aligned: the first pool takes it
	before, allocs = m.Report(), s.allocs
	_, err := m.Reserve(4<<20+1, Eager)
	require.ErrorContains(t, err, "more than any pool of the layout accepts (largest 4194304 B)")
	require.Equal(t, before, m.Report())
	require.Equal(t, allocs, s.allocs)
}

func TestUsageMatchesTheReport(t *testing.T) {
	for _, l := range []Layout{SubSlicesLayout(), ExclusivePagesLayout(), DirectLayout()} {
		m, _ := newTestManager(t, l)
		var hs []Handle
		for i, size := range []uint64{1, 100, 5000, 70_000, 1 << 20, 3 << 20, 50 << 20, 0} {
			if i%3 == 0 {
				m.BeginPersistent()
			}
			hs = append(hs, mustReserve(t, m, size, Mapping(i%2)))
			if i%3 == 0 {
				m.EndPersistent()
			}
		}
		require.NoError(t, m.Free(hs[2]))
		require.NoError(t, m.Free(hs[5]))
		require.Equal(t, m.Report().Usage(), m.Usage(), "%s", l)
		require.Equal(t, uint64(6), m.Usage().NumberAllocs)
	}
}

// A reservation of 0 B holds the pools as any other, and the refusal
// counts it rather than saying only that 0 B are live.
func TestInstallRefusalCountsReservationsOfNoBytes(t *testing.T) {
	m, _ := newTestManager(t, SlicedLayout(SlicedPool{PageSize: 4096}))
	h := mustReserve(t, m, 0, Eager)
	err := m.Install(DirectLayout())
	var ie *InstallError
	require.ErrorAs(t, err, &ie)
	require.Equal(t, InstallError{Kind: PoolsInUse, BytesInUse: 0, AllocsInUse: 1}, *ie)
	require.Equal(t, "0 B still live in the pools, in 1 reservation", err.Error())
	require.NoError(t, m.Free(h))
	require.NoError(t, m.Install(DirectLayout()))
}

// A nil option is refused, naming which, where NewManager panicked
// calling it; the storage is not touched.
func TestNewManagerRefusesANilOption(t *testing.T) {
	var none ManagerOption
	logger := slog.New(slog.DiscardHandler)
	s := newFakeStorage()
	m, err := NewManager(s, testProps, SubSlicesLayout(), WithLogger(logger), none)
	require.ErrorIs(t, err, ErrInvalidOption)
	require.EqualError(t, err, "memory: invalid option: option 2 of the 2 given to NewManager is nil")
	require.Nil(t, m)
	require.Zero(t, s.liveBytes())
	m, err = NewManager(s, testProps, SubSlicesLayout(), WithLogger(logger))
	require.NoError(t, err)
	h := mustReserve(t, m, 100, Eager)
	require.NoError(t, m.Free(h))
}
