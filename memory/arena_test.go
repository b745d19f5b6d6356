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

	// Past the end of the plan: the run leaves it, and the reservation
	// takes free room in a held page (by TLSF, which looks in the size's
	// own bin and then takes the next bin's head: page 1 below slot 3),
	// counted as a spill.
	e := mustReserve(t, m, 16, Eager)
	require.Equal(t, where{pool: 0, page: 1, offset: 0, size: 16}, locate(t, m, e))
	require.Equal(t, uint64(1), m.Spills())

	sh, err := m.Resolve(d)
	require.NoError(t, err)
	require.Equal(t, uint64(512), sh.Offset)
	require.Equal(t, 3, s.allocs) // arena pages 0 and 1 (given memory for e), the persistent one
}

// A reservation that misses the plan leaves it: later ones take no slot,
// even one that fits, and go to the free room of the held pages, then to
// the fallback pools.
func TestArenaMissesLeaveThePlan(t *testing.T) {
	m, _ := newTestManager(t, arenaTestLayout())
	m.SetLogger(slog.New(slog.DiscardHandler))
	// Slot 0 wants 1024 B: another size misses, and no page is held.
	a := mustReserve(t, m, 2000, Eager)
	require.Equal(t, 1, locate(t, m, a).pool)
	require.Equal(t, uint64(1), m.Spills())
	// Slot 1 fits, but the run has left the plan.
	b := mustReserve(t, m, 2048, Eager)
	require.Equal(t, 1, locate(t, m, b).pool)
	require.Equal(t, uint64(2), m.Spills())
	require.Zero(t, m.Report().Dynamic[0].Pages, "the arena holds no page")

	// Install resets the plan; a slot whose bytes are still live misses,
	// and takes the room of the page past the live slots.
	require.ErrorIs(t, m.Install(arenaTestLayout()), &InstallError{Kind: PoolsInUse})
	for _, h := range []Handle{a, b} {
		require.NoError(t, m.Free(h))
	}
	require.NoError(t, m.Install(arenaTestLayout()))
	require.Equal(t, uint64(0), m.Spills())
	x := mustReserve(t, m, 1024, Eager)
	require.Equal(t, where{pool: 0, page: 0, offset: 0, size: 1024}, locate(t, m, x))
	z := mustReserve(t, m, 2048, Eager)
	y := mustReserve(t, m, 1024, Eager) // slot 2 overlaps x, which is live
	require.Equal(t, where{pool: 0, page: 0, offset: 3072, size: 1024}, locate(t, m, y))
	require.Equal(t, uint64(1), m.Spills())
	w := mustReserve(t, m, 1024, Eager) // no room left in the held page
	require.Equal(t, 1, locate(t, m, w).pool)
	require.NoError(t, m.checkInvariants())

	// Explicit cleanup returns empty arena pages; a run that left the
	// plan does not take them again.
	for _, h := range []Handle{x, y, z} {
		require.NoError(t, m.Free(h))
	}
	m.Cleanup(true)
	require.Zero(t, m.Report().Dynamic[0].Pages)
	v := mustReserve(t, m, 16, Eager)
	require.Equal(t, 1, locate(t, m, v).pool)
	require.NoError(t, m.checkInvariants())
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

// A reservation that misses the plan takes free room in a held page before
// the fallback pools, and the room comes back when it is freed; a planned
// place the run took before it left gives its room back when freed too.
func TestAnArenaLendsItsFreeRoomToWhatMissesThePlan(t *testing.T) {
	m, s := newRefusingManager(t, arenaTestLayout())
	m.SetLogger(slog.New(slog.DiscardHandler))
	a := mustReserve(t, m, 1024, Eager) // slot 0: page 0 at 0
	s.refuse = 1                        // a fallback page would be refused
	extra := mustReserve(t, m, 3000, Eager)
	require.Equal(t, where{pool: 0, page: 0, offset: 1024, size: 3008}, locate(t, m, extra), "page 0's room past slot 0")
	require.Equal(t, []uint64{4096}, s.liveSizes(), "no memory but the arena's page")
	require.Equal(t, uint64(1), m.Spills())
	h, err := m.Resolve(extra)
	require.NoError(t, err)
	require.Equal(t, uint64(1024), h.Offset)
	require.NoError(t, m.Free(a))
	big := mustReserve(t, m, 1024, Eager) // slot 0's bytes came back
	require.Equal(t, where{pool: 0, page: 0, offset: 0, size: 1024}, locate(t, m, big))
	require.NoError(t, m.checkInvariants())
	require.NoError(t, m.Free(extra))
	require.NoError(t, m.Free(big))
	require.Zero(t, m.Report().Usage().BytesInUse)
	require.NoError(t, m.checkInvariants())
	whole := mustReserve(t, m, 4096, Eager) // the page is one room again
	require.Equal(t, where{pool: 0, page: 0, offset: 0, size: 4096}, locate(t, m, whole))
	require.NoError(t, m.checkInvariants())
}
