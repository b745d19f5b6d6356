package memory

import (
	"testing"
	"unsafe"

	"github.com/stretchr/testify/require"
)

// The invariant checker must notice a broken pool, or the invariants build
// proves nothing.
func TestInvariantCheckerCatchesCorruption(t *testing.T) {
	for name, corrupt := range map[string]func(m *Manager){
		"sliced block size": func(m *Manager) { m.pools[0].(*slicedPool).blocks[0].size += 16 },
		"sliced free list": func(m *Manager) {
			p := m.pools[0].(*slicedPool)
			p.pages[0].freeHead = none
		},
		"sliced max free": func(m *Manager) { m.pools[0].(*slicedPool).pages[0].maxFree-- },
		"sliced tree":     func(m *Manager) { m.pools[0].(*slicedPool).tree.set(0, 7) },
		"uncoalesced": func(m *Manager) {
			p := m.pools[0].(*slicedPool)
			for b := p.pages[0].first; b != none; b = p.blocks[b].next {
				p.blocks[b].nextFree = none
			}
		},
		"manager total": func(m *Manager) { m.total.BytesInUse++ },
		"pool usage":    func(m *Manager) { m.pools[0].base().usage.NumberAllocs++ },
		"page count":    func(m *Manager) { m.pools[0].base().pageCount++ },
	} {
		m, _ := newTestManager(t, SlicedLayout(SlicedPool{PageSize: 1024}))
		a := mustReserve(t, m, 100, Eager)
		mustReserve(t, m, 200, Eager)
		require.NoError(t, m.Free(a))
		require.NoError(t, m.checkInvariants(), name)
		corrupt(m)
		require.Error(t, m.checkInvariants(), name)
	}
}

func TestInvariantCheckerCoversEveryPoolKind(t *testing.T) {
	for _, l := range []Layout{ExclusivePagesLayout(), DirectLayout(), arenaTestLayout()} {
		m, _ := newTestManager(t, l)
		mustReserve(t, m, 1024, Eager)
		b := mustReserve(t, m, 2048, Eager)
		require.NoError(t, m.Free(b))
		require.NoError(t, m.checkInvariants(), "%s", l)
		if m.arena != nil {
			m.arena.usage.BytesReserved++
		} else {
			m.pools[0].base().usage.BytesReserved++
		}
		require.Error(t, m.checkInvariants(), "%s", l)
	}
}

// Slice blocks are kept at 32 bytes, two to a cache line, for the hot path.
func TestSliceBlockSize(t *testing.T) {
	require.Equal(t, uintptr(32), unsafe.Sizeof(sliceBlock{}))
}
