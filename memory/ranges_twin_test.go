package memory

import (
	"log/slog"
	"math/rand/v2"
	"testing"

	"github.com/stretchr/testify/require"

	vkruntime "github.com/vkrt/vkrt/runtime"
)

// rangesReplay drives one random stream over small ranges (16 granules
// first) with the mapping given and returns the report after every step
// and where each reservation lies once resolved at the end.
func rangesReplay(t *testing.T, plan VirtualPlan, mapping Mapping, seed uint64) ([]Report, []vkruntime.StorageHandle, *sparseStorage) {
	t.Helper()
	s := newSparseStorage(testGranule)
	props := vkruntime.DeviceProperties{Alignment: 256, MaxPageSize: 64 << 20, MemorySize: 4 << 20}
	m, err := NewManager(s, props, VirtualLayout(plan))
	require.NoError(t, err)
	m.SetLogger(slog.New(slog.DiscardHandler))
	r := rand.New(rand.NewPCG(seed, 5))
	g := testGranule
	live, reports := randomSteps(t, m, mapping, 300, func() uint64 {
		size := uint64(r.IntN(3*g) + 1)
		if r.IntN(4) == 0 {
			size = uint64(r.IntN(20*g) + 1)
		}
		return size
	}, r)
	var at []vkruntime.StorageHandle
	for _, h := range live {
		sh, err := m.Resolve(h)
		require.NoError(t, err)
		require.NoError(t, s.backed(sh))
		sh.ID = vkruntime.StorageID(s.ranges[sh.ID]) // ids differ; range sizes must not
		at = append(at, sh)
	}
	require.NoError(t, m.checkInvariants())
	return reports, at, s
}

// A dry run (Lazy) of a stream that spreads over several ranges reports
// what its real run (Eager) holds after every step, and once resolved its
// reservations lie where the real run's do, in ranges of the same sizes.
func TestALazyRunOverRangesReportsWhatTheEagerRunHolds(t *testing.T) {
	g := uint64(testGranule)
	for _, plan := range []VirtualPlan{{}, {PlannedBytes: 8 * g, Slots: []VirtualSlot{{2 * g, 0}, {g, 2 * g}}}} {
		for seed := range uint64(20) {
			lazy, lat, _ := rangesReplay(t, plan, Lazy, seed)
			eager, eat, es := rangesReplay(t, plan, Eager, seed)
			require.Positive(t, es.calls)
			for i := range lazy {
				l, e := lazy[i].Dynamic[0], eager[i].Dynamic[0]
				require.Equal(t, e.Pages, l.PagesUnmapped, "seed %d step %d", seed, i)
				l.PagesUnmapped = 0
				require.Equal(t, e, l, "seed %d step %d", seed, i)
			}
			require.Equal(t, eat, lat, "seed %d", seed)
		}
	}
}
