package memory

import (
	"errors"
	"fmt"
	"log/slog"
	"maps"
	"math/rand/v2"
	"slices"
	"testing"

	"github.com/stretchr/testify/require"

	vkruntime "github.com/vkrt/vkrt/runtime"
)

// randomArenaLayout is an arena of one to four pages and up to 40 slots
// anywhere in them, overlapping or not, with sizes that align up to the
// slot's or not, and SubSlices or two small sliced pools behind it.
func randomArenaLayout(rng *rand.Rand) Layout {
	pages := make([]uint64, 1+rng.IntN(4))
	for i := range pages {
		pages[i] = 16 * uint64(1+rng.IntN(2048))
	}
	slots := make([]ArenaSlot, 1+rng.IntN(40))
	for k := range slots {
		page := rng.IntN(len(pages))
		units := pages[page] / 16
		at := rng.Uint64N(units)
		slots[k] = ArenaSlot{Size: 16*(1+rng.Uint64N(units-at)) - rng.Uint64N(16), Page: uint32(page), Offset: 16 * at}
	}
	var fallback []SlicedPool
	if rng.IntN(3) > 0 {
		fallback = []SlicedPool{{PageSize: 2048}, {PageSize: 8192}}
	}
	return ArenaLayout(ArenaPlan{Pages: pages, Slots: slots, Fallback: fallback})
}

// arenaRandomSeeds is how many random runs each test below makes.
func arenaRandomSeeds() uint64 {
	if testing.Short() {
		return 60
	}
	return 300
}

// randomArenaSize is the size of the next reservation: mostly its slot's,
// which the run then follows, otherwise anything up to 20,000 B.
func randomArenaSize(rng *rand.Rand, m *Manager) uint64 {
	if k := m.ordinal; k < uint64(len(m.arena.cfg.slots)) && rng.IntN(3) > 0 {
		return m.arena.cfg.slots[k].Size - rng.Uint64N(16)
	}
	return rng.Uint64N(1 + rng.Uint64N(20000))
}

// Random runs under random arena plans — following them and leaving them,
// lent room, refused by the device, resolved, cleaned up, installed again,
// in and out of persistent windows — hold the pools' invariants after every
// step. A failure names its seed and step: the run replays from them.
func TestRandomArenaRunsHoldTheirInvariants(t *testing.T) {
	for seed := range arenaRandomSeeds() {
		rng := rand.New(rand.NewPCG(seed, 99))
		l := randomArenaLayout(rng)
		m, s := newRefusingManager(t, l)
		m.SetLogger(slog.New(slog.DiscardHandler))
		var live []Handle
		for step := range 2000 {
			at := fmt.Sprintf("seed %d step %d", seed, step)
			switch op := rng.IntN(20); {
			case op < 9:
				size := randomArenaSize(rng, m)
				if rng.IntN(4) == 0 {
					s.refuse = 1 + rng.IntN(3)
				}
				h, err := m.Reserve(size, Mapping(rng.IntN(2)))
				s.refuse = 0
				if err == nil {
					live = append(live, h)
				} else if !errors.Is(err, vkruntime.ErrOutOfDeviceMemory) && !errors.Is(err, vkruntime.ErrBufferTooBig) {
					t.Fatalf("%s: %v", at, err)
				}
			case op < 15 && len(live) > 0:
				i := rng.IntN(len(live))
				require.NoError(t, m.Free(live[i]), at)
				live = slices.Delete(live, i, i+1)
			case op < 17 && len(live) > 0:
				if rng.IntN(3) == 0 {
					s.refuse = 1
				}
				_, _ = m.Resolve(live[rng.IntN(len(live))])
				s.refuse = 0
			case op == 17:
				m.Cleanup(rng.IntN(2) == 0)
			case op == 18:
				if err := m.Install(l); len(live) == 0 {
					require.NoError(t, err, at)
				}
			default:
				if m.InPersistent() {
					m.EndPersistent()
				} else if rng.IntN(4) == 0 {
					m.BeginPersistent()
				}
			}
			require.NoError(t, m.checkInvariants(), at)
		}
	}
}

// Of two managers on one random arena plan making the same reservations,
// one is refused some by the device: every other step places, reports,
// counts spills and holds device memory as in its twin, which was never
// refused.
func TestRandomArenaRefusalsLeaveNoTrace(t *testing.T) {
	for seed := range arenaRandomSeeds() {
		rng := rand.New(rand.NewPCG(seed, 5))
		l := randomArenaLayout(rng)
		a, sa := newRefusingManager(t, l)
		b, sb := newRefusingManager(t, l)
		a.SetLogger(slog.New(slog.DiscardHandler))
		b.SetLogger(slog.New(slog.DiscardHandler))
		type twin struct{ a, b Handle }
		var live []twin
		for step := range 1500 {
			at := fmt.Sprintf("seed %d step %d", seed, step)
			switch op := rng.IntN(20); {
			case op < 9:
				size, mapping, refuse := randomArenaSize(rng, a), Mapping(rng.IntN(2)), 0
				if rng.IntN(4) == 0 {
					refuse = 1 + rng.IntN(3)
				}
				sa.refuse = refuse
				ha, err := a.Reserve(size, mapping)
				sa.refuse = 0
				if err != nil {
					if refuse == 0 || !errors.Is(err, vkruntime.ErrOutOfDeviceMemory) {
						_, errB := b.Reserve(size, mapping)
						require.EqualError(t, errB, err.Error(), at)
					}
					break
				}
				sb.refuse = refuse // the same refusals, where they did not fail it
				hb, err := b.Reserve(size, mapping)
				sb.refuse = 0
				require.NoError(t, err, at)
				require.Equal(t, locate(t, b, hb), locate(t, a, ha), at)
				live = append(live, twin{ha, hb})
			case op < 15 && len(live) > 0:
				i := rng.IntN(len(live))
				require.NoError(t, a.Free(live[i].a), at)
				require.NoError(t, b.Free(live[i].b), at)
				live = slices.Delete(live, i, i+1)
			case op < 17 && len(live) > 0:
				h, refuse := live[rng.IntN(len(live))], rng.IntN(3) == 0
				if refuse {
					sa.refuse = 1
				}
				sha, err := a.Resolve(h.a)
				sa.refuse = 0
				if err != nil {
					require.True(t, refuse, at)
					break
				}
				shb, err := b.Resolve(h.b)
				require.NoError(t, err, at)
				require.Equal(t, shb.Offset, sha.Offset, at)
			case op == 17:
				explicit := rng.IntN(2) == 0
				a.Cleanup(explicit)
				b.Cleanup(explicit)
			case op == 18:
				require.Equal(t, b.Install(l), a.Install(l), at)
			default:
				if a.InPersistent() {
					a.EndPersistent()
					b.EndPersistent()
				} else if rng.IntN(4) == 0 {
					a.BeginPersistent()
					b.BeginPersistent()
				}
			}
			require.Equal(t, b.Report(), a.Report(), at)
			require.Equal(t, b.Spills(), a.Spills(), at)
			require.Equal(t, slices.Sorted(maps.Values(sb.live)), sa.liveSizes(), at)
		}
	}
}
