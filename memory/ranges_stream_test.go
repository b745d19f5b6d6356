package memory

import (
	"errors"
	"fmt"
	"log/slog"
	"math/rand/v2"
	"slices"
	"testing"

	"github.com/stretchr/testify/require"

	vkruntime "github.com/vkrt/vkrt/runtime"
)

// rangesStream drives a random stream through a virtual pool of small
// ranges (16 granules first): eager and lazy reservations, resolves,
// frees, cleanups, refused submissions, a device out of memory and other
// streams taking the address space. After every step the pool holds its
// invariants, knows what the device binds, and every resolved reservation
// lies on memory the device bound; with nothing live, a cleanup returns
// every chunk and range. It reports whether the pool took more than one
// range, whether it opened the planned places' area to reservations off
// the plan, and whether a cleanup gave back ranges with reservations live.
func rangesStream(t *testing.T, seed uint64, plan VirtualPlan) (spread, opened, released bool) {
	r := rand.New(rand.NewPCG(seed, 3))
	s := newSparseStorage(testGranule)
	props := vkruntime.DeviceProperties{Alignment: 256, MaxPageSize: 64 << 20, MemorySize: 4 << 20}
	m, err := NewManager(s, props, VirtualLayout(plan))
	require.NoError(t, err)
	m.SetLogger(slog.New(slog.DiscardHandler))
	vp := m.pools[0].(*virtualPool)
	type res struct {
		h        Handle
		resolved bool
		sh       vkruntime.StorageHandle
	}
	var live []res
	g := uint64(testGranule)
	for step := range 300 {
		name := fmt.Sprintf("seed %d step %d", seed, step)
		switch op := r.IntN(20); {
		case op < 8:
			size := uint64(r.IntN(int(3*g))) + 1
			if r.IntN(4) == 0 {
				size = uint64(r.IntN(int(20*g))) + 1
			}
			if k := int(vp.ordinal); vp.following && k < len(plan.Slots) && r.IntN(4) > 0 {
				size = plan.Slots[k].Size
			}
			mapping := Mapping(r.IntN(2))
			h, err := m.Reserve(size, mapping)
			if err != nil {
				require.True(t, errors.Is(err, vkruntime.ErrDeviceLost) || errors.Is(err, vkruntime.ErrOutOfDeviceMemory), "%s: %v", name, err)
				break
			}
			live = append(live, res{h: h})
		case op < 12 && len(live) > 0:
			k := r.IntN(len(live))
			require.NoError(t, m.Free(live[k].h))
			live = slices.Delete(live, k, k+1)
		case op < 15 && len(live) > 0:
			k := r.IntN(len(live))
			sh, err := m.Resolve(live[k].h)
			if err != nil {
				require.True(t, errors.Is(err, vkruntime.ErrDeviceLost) || errors.Is(err, vkruntime.ErrOutOfDeviceMemory), "%s: %v", name, err)
				break
			}
			live[k].resolved, live[k].sh = true, sh
		case op < 16:
			segs := len(vp.segs)
			m.Cleanup(r.IntN(3) > 0)
			released = released || (len(vp.segs) < segs && len(live) > 0)
		case op < 17:
			s.refuseCall = s.refused + 1 + r.IntN(3)
		case op < 18:
			s.heapSize = 0
			if r.IntN(2) == 0 {
				s.heapSize = s.liveBytes() + uint64(r.IntN(4))*g
			}
		default:
			if _, taken := s.ranges[1<<30]; taken {
				delete(s.ranges, 1<<30)
			} else {
				takeAddressSpace(s, uint64(r.IntN(64))*g)
			}
		}
		spread = spread || len(vp.segs) > 0
		opened = opened || vp.opened != nil
		require.NoError(t, m.checkInvariants(), name)
		require.NoError(t, deviceAgrees(vp, s), name)
		for _, l := range live {
			if !l.resolved {
				continue
			}
			sh, err := m.Resolve(l.h)
			require.NoError(t, err, name)
			require.Equal(t, l.sh, sh, "%s: a resolved reservation moved", name)
			require.LessOrEqual(t, sh.End(), s.ranges[sh.ID], name)
			require.NoError(t, s.backed(sh), "%s: a resolved reservation lies on memory the device never bound", name)
		}
	}
	s.refuseCall, s.heapSize = 0, 0
	for _, l := range live {
		require.NoError(t, m.Free(l.h))
	}
	delete(s.ranges, 1<<30)
	m.Cleanup(true)
	require.NoError(t, m.checkInvariants())
	require.Empty(t, s.live, "seed %d: every chunk returned", seed)
	require.Empty(t, s.ranges, "seed %d: every range returned", seed)
	return spread, opened, released
}

func TestRangesStreams(t *testing.T) {
	g := uint64(testGranule)
	plans := []VirtualPlan{{}, {PlannedBytes: 8 * g, Slots: []VirtualSlot{{2 * g, 0}, {g, 2 * g}, {3 * g, 3 * g}, {g / 2, 6 * g}, {4 * g, 7 * g}}},
		// Places spread over more address space than the run holds.
		{PlannedBytes: 4 * g, Slots: []VirtualSlot{{g, 0}, {g / 2, 5 * g}, {2 * g, 11 * g}}}}
	spread, opened, released := 0, 0, 0
	for seed := range uint64(300) {
		s, o, r := rangesStream(t, seed, plans[seed%3])
		if s {
			spread++
		}
		if o {
			opened++
		}
		if r {
			released++
		}
	}
	require.GreaterOrEqual(t, released, 100, "cleanups give back the ranges taken last that hold nothing")
	require.Greater(t, spread, 150, "most streams spread over several ranges")
	require.GreaterOrEqual(t, opened, 50, "runs that left a plan open its places' area, at once or once no range is left")
}
