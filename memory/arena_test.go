package memory

import (
	"log/slog"
	"testing"

	"github.com/stretchr/testify/require"
)

func arenaTestLayout() Layout {
	return ArenaLayout(ArenaPlan{
		Pages: []uint64{4096, 1024},
		Slots: []ArenaSlot{
			{Size: 1024, Page: 0, Offset: 0},
			{Size: 2048, Page: 0, Offset: 1024},
			{Size: 1024, Page: 0, Offset: 0}, // shares slot 0's bytes: their lifetimes are disjoint
			{Size: 512, Page: 1, Offset: 512},
		},
		Fallback: []SlicedPool{{PageSize: 8192}},
	})
}

func TestArenaPlacesReservationsByOrdinal(t *testing.T) {
	m, s := newTestManager(t, arenaTestLayout())
	m.SetLogger(slog.New(slog.DiscardHandler))
	a := mustReserve(t, m, 1020, Eager) // aligns to slot 0's 1024 B
	require.Equal(t, where{pool: 0, page: 0, offset: 0, size: 1024}, locate(t, m, a))
	b := mustReserve(t, m, 2048, Lazy)
	require.Equal(t, where{pool: 0, page: 0, offset: 1024, size: 2048}, locate(t, m, b))
	require.Equal(t, 1, s.allocs, "one arena page, made at its first use")

	// Reservations inside a persistent window do not count.
	m.BeginPersistent()
	p := mustReserve(t, m, 1024, Eager)
	m.EndPersistent()
	require.Equal(t, -1, locate(t, m, p).pool)

	require.NoError(t, m.Free(a))
	c := mustReserve(t, m, 1024, Eager) // slot 2 reuses slot 0's bytes
	require.Equal(t, where{pool: 0, page: 0, offset: 0, size: 1024}, locate(t, m, c))
	d := mustReserve(t, m, 500, Lazy) // slot 3 on page 1, made lazily
	require.Equal(t, where{pool: 0, page: 1, offset: 512, size: 512}, locate(t, m, d))
	require.Equal(t, uint64(0), m.Spills())

	r := m.Report()
	require.Len(t, r.Dynamic, 2)
	require.Equal(t, ArenaKind{PageBytes: 5120, Slots: 4}, r.Dynamic[0].Kind)
	require.Equal(t, uint64(2), r.Dynamic[0].Pages)
	require.Equal(t, uint64(1), r.Dynamic[0].PagesUnmapped)
	require.Equal(t, Usage{NumberAllocs: 3, BytesInUse: 3572, BytesPadding: 12, BytesReserved: 5120}, r.Dynamic[0].Usage)
	require.Equal(t, SlicedKind{PageSize: 8192, MaxSliceSize: 8192}, r.Dynamic[1].Kind)

	// Past the end of the plan: the fallback, counted as a spill.
	e := mustReserve(t, m, 16, Eager)
	require.Equal(t, 1, locate(t, m, e).pool)
	require.Equal(t, uint64(1), m.Spills())

	sh, err := m.Resolve(d)
	require.NoError(t, err)
	require.Equal(t, uint64(512), sh.Offset)
	require.Equal(t, 4, s.allocs) // arena pages 0 and 1 (on resolve), the persistent one, the fallback page
}

func TestArenaMissesGoToTheFallback(t *testing.T) {
	m, _ := newTestManager(t, arenaTestLayout())
	m.SetLogger(slog.New(slog.DiscardHandler))
	// Slot 0 wants 1024 B: another size misses.
	a := mustReserve(t, m, 2000, Eager)
	require.Equal(t, 1, locate(t, m, a).pool)
	require.Equal(t, uint64(1), m.Spills())
	// Slot 1 is planned and free.
	b := mustReserve(t, m, 2048, Eager)
	require.Equal(t, 0, locate(t, m, b).pool)
	// Slot 2's range is free, because a did not take slot 0.
	c := mustReserve(t, m, 1024, Eager)
	require.Equal(t, where{pool: 0, page: 0, offset: 0, size: 1024}, locate(t, m, c))

	// Install resets the ordinal; a slot whose bytes are still live misses.
	require.ErrorIs(t, m.Install(arenaTestLayout()), &InstallError{Kind: PoolsInUse})
	for _, h := range []Handle{a, b, c} {
		require.NoError(t, m.Free(h))
	}
	require.NoError(t, m.Install(arenaTestLayout()))
	require.Equal(t, uint64(0), m.Spills())
	x := mustReserve(t, m, 1024, Eager)
	require.Equal(t, where{pool: 0, page: 0, offset: 0, size: 1024}, locate(t, m, x))
	mustReserve(t, m, 2048, Eager)
	y := mustReserve(t, m, 1024, Eager) // slot 2 overlaps x, which is live
	require.Equal(t, 1, locate(t, m, y).pool)
	require.Equal(t, uint64(1), m.Spills())

	// Explicit cleanup returns empty arena pages; they come back on use.
	require.NoError(t, m.Free(x))
	m.Cleanup(true)
	require.Equal(t, uint64(1), m.Report().Dynamic[0].Pages)
}

func TestArenaWithoutFallbackUsesSubSlices(t *testing.T) {
	m, _ := newTestManager(t, ArenaLayout(ArenaPlan{Pages: []uint64{64}, Slots: []ArenaSlot{{Size: 64}}}))
	r := m.Report()
	sub, _ := newTestManager(t, SubSlicesLayout())
	require.Equal(t, sub.Report().Dynamic, r.Dynamic[1:])
}
