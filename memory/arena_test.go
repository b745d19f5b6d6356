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

// A reservation on its slot whose page the device has no memory for misses
// the plan and goes to the fallback pools, which need less: a 128 B
// reservation of another stream asked its slot's 1.43 GB page, and the
// refusal failed the run.
func TestAnArenaPageTheDeviceRefusesSendsItsSlotToTheFallback(t *testing.T) {
	m, s := newRefusingManager(t, arenaTestLayout())
	m.SetLogger(slog.New(slog.DiscardHandler))
	s.refuse = 1 // the arena's 4096 B page
	h := mustReserve(t, m, 1020, Eager)
	require.Equal(t, 1, locate(t, m, h).pool, "the fallback pool, after the arena")
	require.Equal(t, uint64(1), m.Spills())
	require.Equal(t, []uint64{8192}, s.liveSizes())
}

// A reservation that misses the plan and that the device has no memory for
// in the fallback pools takes the lowest room of a held arena page clear of
// live slots; a planned slot on its bytes then misses the plan, and the
// room comes back when it is freed.
func TestAnArenaLendsItsFreeRoomWhenTheDeviceRunsOut(t *testing.T) {
	m, s := newRefusingManager(t, arenaTestLayout())
	m.SetLogger(slog.New(slog.DiscardHandler))
	a := mustReserve(t, m, 1024, Eager) // slot 0: page 0 at 0
	s.refuse = 1                        // the fallback's page
	extra := mustReserve(t, m, 3000, Eager)
	require.Equal(t, where{pool: 0, page: 0, offset: 1024, size: 3008}, locate(t, m, extra), "page 0's room past slot 0")
	require.Equal(t, []uint64{4096}, s.liveSizes(), "no memory but the arena's page")
	require.Equal(t, uint64(1), m.Spills())
	h, err := m.Resolve(extra)
	require.NoError(t, err)
	require.Equal(t, uint64(1024), h.Offset)
	require.NoError(t, m.Free(a))
	require.NoError(t, m.Free(extra))
	require.Zero(t, m.Report().Usage().BytesInUse)
	require.NoError(t, m.checkInvariants())

	// Slot 2 lies at 0, where an extra made while nothing planned is live
	// goes: the reservation on slot 2 misses the plan.
	m, s = newRefusingManager(t, arenaTestLayout())
	m.SetLogger(slog.New(slog.DiscardHandler))
	require.NoError(t, m.Free(mustReserve(t, m, 1024, Eager))) // slot 0 holds page 0
	s.refuse = 1
	extra = mustReserve(t, m, 100, Eager) // ordinal 1: not slot 1's size
	require.Equal(t, where{pool: 0, page: 0, offset: 0, size: 112}, locate(t, m, extra))
	b := mustReserve(t, m, 1024, Eager) // ordinal 2: slot 2, at 0
	require.Equal(t, 1, locate(t, m, b).pool, "slot 2's bytes hold the extra: it goes to the fallback")
	require.NoError(t, m.checkInvariants())
}
