package memory

import (
	"bytes"
	"log/slog"
	"testing"

	"github.com/stretchr/testify/require"

	vkruntime "github.com/vkrt/vkrt/runtime"
)

// A capped pool whose cap is a forecast grows past it, warns once and
// counts each page past the cap; a user's cap still holds.
func TestForecastPoolsGrowPastTheirCapAndSayPlainCapsHold(t *testing.T) {
	one := uint64(1)
	for _, grow := range []bool{false, true} {
		m, _ := newTestManager(t, SlicedLayout(SlicedPool{PageSize: 1 << 20, Pages: &one, Grow: grow}))
		var logged bytes.Buffer
		m.SetLogger(slog.New(slog.NewTextHandler(&logged, nil)))
		mustReserve(t, m, 600<<10, Eager)
		var errs int
		for range 3 {
			if _, err := m.Reserve(600<<10, Eager); err != nil {
				require.ErrorIs(t, err, vkruntime.ErrPoolCapacityExceeded)
				errs++
			}
		}
		if !grow {
			require.Equal(t, 3, errs, "a user's cap is a limit")
			continue
		}
		require.Zero(t, errs)
		require.Equal(t, uint64(3), m.Spills())
		require.Equal(t, 1, bytes.Count(logged.Bytes(), []byte("level=WARN")), logged.String())
		require.Contains(t, logged.String(), "planned_pages=1")
		require.NoError(t, m.checkInvariants())
	}
}

// An uncapped grow pool is a plan's way out: what it serves is counted.
func TestAPlansWayOutCountsWhatItServes(t *testing.T) {
	one := uint64(1)
	m, _ := newTestManager(t, SlicedLayout(SlicedPool{PageSize: 1 << 20, Pages: &one, Grow: true}, SlicedPool{PageSize: 64 << 20, Grow: true}))
	mustReserve(t, m, 512<<10, Eager)
	require.Zero(t, m.Spills())
	mustReserve(t, m, 8<<20, Eager)
	require.Equal(t, uint64(1), m.Spills())
}

func TestSlicedPoolGrowJSON(t *testing.T) {
	l, err := ParseLayout(`{"Sliced":[{"page_size":1048576,"pages":2,"max_slice":null,"grow":true},{"page_size":2097152}]}`)
	require.NoError(t, err)
	require.Equal(t, `{"Sliced":[{"page_size":1048576,"pages":2,"max_slice":null,"grow":true},{"page_size":2097152,"pages":null,"max_slice":null}]}`, l.String())
	_, err = ParseLayout(`{"Sliced":[{"page_size":1048576,"grow":1}]}`)
	require.ErrorContains(t, err, "grow: want true or false")
}

// A plan outgrown in two of its pools warns once for the run, with what
// its capped pools hold together and what the pools then need.
func TestAnOutgrownPlanWarnsOnceWithPlannedAndNeededBytes(t *testing.T) {
	one := uint64(1)
	m, _ := newTestManager(t, SlicedLayout(SlicedPool{PageSize: 1 << 20, Pages: &one, Grow: true},
		SlicedPool{PageSize: 4 << 20, Pages: &one, Grow: true}))
	var logged bytes.Buffer
	m.SetLogger(slog.New(slog.NewTextHandler(&logged, nil)))
	for _, size := range []uint64{600 << 10, 3 << 20, 600 << 10, 3 << 20} {
		mustReserve(t, m, size, Eager)
	}
	require.Equal(t, uint64(2), m.Spills(), "a page past each pool's cap")
	require.Equal(t, 1, bytes.Count(logged.Bytes(), []byte("level=WARN")), logged.String())
	require.Contains(t, logged.String(), "planned_bytes=5242880")
	require.Contains(t, logged.String(), "needed_bytes=6291456", "both planned pages and the 1 MiB page past the first cap")
}

// A reservation that spills past a full capped pool to a growing one is one
// spill, whether the growing pool goes past its forecast for it or is a
// plan's way out.
func TestASpillToAGrowingPoolCountsOnce(t *testing.T) {
	m, _ := newTestManager(t, SlicedLayout(SlicedPool{PageSize: 512, Pages: u64(1)},
		SlicedPool{PageSize: 512, Pages: u64(1), Grow: true}, SlicedPool{PageSize: 1024, Grow: true}))
	m.SetLogger(slog.New(slog.DiscardHandler))
	mustReserve(t, m, 512, Eager) // the first pool
	require.Zero(t, m.Spills())
	mustReserve(t, m, 512, Eager) // spills to the second pool, within its forecast
	require.Equal(t, uint64(1), m.Spills())
	mustReserve(t, m, 512, Eager) // spills to the second pool, past its forecast
	require.Equal(t, uint64(2), m.Spills())

	m, _ = newTestManager(t, SlicedLayout(SlicedPool{PageSize: 512, Pages: u64(1)}, SlicedPool{PageSize: 1024, Grow: true}))
	m.SetLogger(slog.New(slog.DiscardHandler))
	mustReserve(t, m, 512, Eager)
	mustReserve(t, m, 512, Eager) // spills to the way out
	require.Equal(t, uint64(1), m.Spills())
	require.NoError(t, m.checkInvariants())
}
