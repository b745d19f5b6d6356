package memory

import (
	"bytes"
	"log/slog"
	"testing"

	"github.com/stretchr/testify/require"

	vkruntime "github.com/vkrt/vkrt/runtime"
)

// An exclusive pool of a plan gives each reservation a page of its own
// size, so a small buffer does not hold a page that a large one then
// needs: on a 10 MiB device a 2 MiB buffer and a 7 MiB one both fit, where
// sliced pages of 8 MiB took two pages, 16 MiB, and the device refused
// the second.
func TestAnExclusivePlanPoolGivesEachReservationItsOwnPage(t *testing.T) {
	props := vkruntime.DeviceProperties{Alignment: 256, MaxPageSize: 8 << 20, MemorySize: 10 << 20}
	two := uint64(2)
	for _, exclusive := range []bool{false, true} {
		l := SlicedLayout(SlicedPool{PageSize: 1 << 20, Pages: &two, MaxSlice: u64(256 << 10), Grow: true},
			SlicedPool{PageSize: 8 << 20, Pages: &two, Grow: true, Exclusive: exclusive})
		storage := newSparseStorage(64 << 10)
		storage.heapSize = props.MemorySize
		m, err := NewManager(storage, props, l)
		require.NoError(t, err)
		mustReserve(t, m, 2<<20, Eager)
		_, err = m.Reserve(7<<20, Eager)
		if !exclusive {
			require.ErrorIs(t, err, vkruntime.ErrOutOfDeviceMemory, "sliced pages of the largest buffer")
			continue
		}
		require.NoError(t, err)
		r := m.Report()
		require.Equal(t, ExclusiveKind{MaxAllocSize: 8 << 20, MaxPoolSize: u64(16 << 20)}, r.Dynamic[1].Kind, "two pages of at most 8 MiB")
		require.Equal(t, uint64(9<<20), r.Usage().BytesReserved, "each page is its reservation's size")
		require.Zero(t, m.Spills(), "two pages, as planned")
		require.NoError(t, m.checkInvariants())
	}
}

// An exclusive pool's cap counts the pages it holds at once. A user's cap
// is a limit: at it the pool gives back a free page too small for a
// reservation before it takes another, and refuses the page past it. A
// plan's is a forecast: the pool places as an uncapped one does (so a plan
// replays the run it was measured on, uncapped, as measured) and counts
// each page past the forecast as a spill, warning once.
func TestAnExclusivePoolsCapCountsItsPages(t *testing.T) {
	one := uint64(1)
	for _, grow := range []bool{false, true} {
		m, _ := newTestManager(t, SlicedLayout(SlicedPool{PageSize: 4 << 20, Pages: &one, Grow: grow, Exclusive: true}))
		var logged bytes.Buffer
		m.SetLogger(slog.New(slog.NewTextHandler(&logged, nil)))
		h := mustReserve(t, m, 1<<20, Eager)
		require.NoError(t, m.Free(h))
		mustReserve(t, m, 3<<20, Eager)
		r := m.Report()
		if !grow {
			require.Equal(t, uint64(1), r.Dynamic[0].Pages, "the free 1 MiB page went back for the 3 MiB one")
			require.Equal(t, uint64(3<<20), r.Dynamic[0].Usage.BytesReserved)
			_, err := m.Reserve(2<<20, Eager)
			require.ErrorIs(t, err, vkruntime.ErrPoolCapacityExceeded, "a user's cap is a limit")
			require.Zero(t, m.Spills())
			require.NoError(t, m.checkInvariants())
			continue
		}
		require.Equal(t, uint64(2), r.Dynamic[0].Pages, "the free 1 MiB page kept, as an uncapped pool keeps it")
		require.Equal(t, uint64(1), m.Spills(), "the 3 MiB page is past the forecast")
		mustReserve(t, m, 2<<20, Eager)
		r = m.Report()
		require.Equal(t, uint64(2), r.Dynamic[0].Pages, "the free 1 MiB page went back for the 2 MiB one: it holds half of it")
		require.Equal(t, uint64(2), m.Spills(), "each page past the forecast")
		require.Equal(t, 1, bytes.Count(logged.Bytes(), []byte("level=WARN")), logged.String())
		require.Contains(t, logged.String(), "planned_pages=1")
		require.Contains(t, logged.String(), "planned_bytes=4194304")
		require.NoError(t, m.checkInvariants())
	}
}
