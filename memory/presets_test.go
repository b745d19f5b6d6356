package memory

import (
	"bytes"
	"log/slog"
	"testing"

	"github.com/stretchr/testify/require"

	vkruntime "github.com/vkrt/vkrt/runtime"
)

// TestPresetPoolsFitTheirPagesAtEveryAlignment: whatever the device's
// alignment, every sliced pool a preset builds has pages that are multiples
// of it and a largest slice no larger than its page, and a small
// reservation returns.
func TestPresetPoolsFitTheirPagesAtEveryAlignment(t *testing.T) {
	for align := uint64(16); align <= 1<<30; align <<= 1 {
		for _, maxPage := range []uint64{align, 4 * align, 128 << 20, 4 << 30} {
			if maxPage%align != 0 {
				continue
			}
			props := vkruntime.DeviceProperties{Alignment: align, MaxPageSize: maxPage, MemorySize: 16 << 30}
			for _, l := range []Layout{SubSlicesLayout(), ExclusivePagesLayout(), ArenaLayout(ArenaPlan{Pages: []uint64{align}})} {
				s := newFakeStorage()
				m, err := NewManager(s, props, l)
				require.NoError(t, err, "alignment %d, max page %d, %s", align, maxPage, l)
				m.SetLogger(slog.New(slog.DiscardHandler))
				for _, p := range m.Report().Dynamic {
					if k, ok := p.Kind.(SlicedKind); ok {
						require.Zero(t, k.PageSize%align, "alignment %d, max page %d: page %d", align, maxPage, k.PageSize)
						require.LessOrEqual(t, k.MaxSliceSize, k.PageSize, "alignment %d, max page %d: %+v", align, maxPage, k)
						require.Zero(t, k.MaxSliceSize%align)
					}
				}
				h, err := m.Reserve(100, Eager)
				require.NoError(t, err, "alignment %d", align)
				require.NoError(t, m.Free(h))
			}
		}
	}
}

func TestPageLargerThanTheDeviceMemoryShrinksWithAWarning(t *testing.T) {
	props := vkruntime.DeviceProperties{Alignment: 256, MaxPageSize: 4 << 30, MemorySize: 16 << 30}
	m, err := NewManager(newFakeStorage(), props, DirectLayout())
	require.NoError(t, err)
	var logged bytes.Buffer
	m.SetLogger(slog.New(slog.NewTextHandler(&logged, nil)))
	require.NoError(t, m.Install(SlicedLayout(SlicedPool{PageSize: 200_000_000_000})))
	require.Equal(t, uint64(16<<30), m.Report().Dynamic[0].Kind.(SlicedKind).PageSize)
	require.Contains(t, logged.String(), "page_size 200000000000 B is larger than the device memory; the page shrinks to 17179869184 B")

	logged.Reset()
	require.NoError(t, m.Install(SlicedLayout(SlicedPool{PageSize: 16 << 30})))
	require.Empty(t, logged.String(), "a page that fits is no news")

	require.NoError(t, m.Install(ArenaLayout(ArenaPlan{Pages: []uint64{4096}, Fallback: []SlicedPool{{PageSize: 1 << 40}}})))
	require.Contains(t, logged.String(), "arena fallback pool 0: page_size 1099511627776 B")
}

// An arena page cannot shrink (its slots are placed in it), but a plan
// from a dry run, which needs no device memory, may hold pages larger than
// the device that runs another run of the workload: the layout installs
// with a warning, and the device is never asked for that page. Slots on
// the pages that fit are taken as planned; a reservation on the large
// page's slot misses the plan and goes to the fallback pools as a spill.
func TestAnArenaPageLargerThanTheDeviceMemorySendsItsSlotsToTheFallback(t *testing.T) {
	props := vkruntime.DeviceProperties{Alignment: 256, MaxPageSize: 4 << 30, MemorySize: 16 << 30}
	s := newRefusingStorage()
	m, err := NewManager(s, props, DirectLayout())
	require.NoError(t, err)
	var logged bytes.Buffer
	m.SetLogger(slog.New(slog.NewTextHandler(&logged, nil)))
	require.NoError(t, m.Install(ArenaLayout(ArenaPlan{
		Pages:    []uint64{4096, 200_000_000_000},
		Slots:    []ArenaSlot{{Size: 4096, Page: 0, Offset: 0}, {Size: 1 << 20, Page: 1, Offset: 0}},
		Fallback: []SlicedPool{{PageSize: 8 << 20}},
	})))
	require.Contains(t, logged.String(), "arena page 1: 200000000000 B is larger than the device memory of 17179869184 B; its slots go to the fallback pools")

	small := mustReserve(t, m, 4096, Eager)
	require.Equal(t, where{pool: 0, page: 0, offset: 0, size: 4096}, locate(t, m, small), "a page that fits keeps its slots")
	big := mustReserve(t, m, 1<<20, Eager)
	require.Equal(t, 1, locate(t, m, big).pool, "the fallback pool, after the arena")
	require.Equal(t, uint64(1), m.Spills())
	require.Equal(t, []uint64{4096, 8 << 20}, s.liveSizes(), "the device was never asked for the large page")
	require.NoError(t, m.Free(big))
	require.NoError(t, m.Free(small))
}

// Properties a manager refuses have no SubSlices ladder: an alignment of
// 0 gave a page of 0 B, one of 3 a page of 9 B in slices of 3 B.
func TestSubSlicesPagesOfInvalidPropertiesIsNil(t *testing.T) {
	for _, p := range []vkruntime.DeviceProperties{
		{},
		{Alignment: 3, MaxPageSize: 9},
		{Alignment: 16},
		{Alignment: 16, MaxPageSize: 8},
	} {
		require.Error(t, p.Validate())
		require.Nil(t, SubSlicesPages(p), "%+v", p)
		_, err := NewManager(newFakeStorage(), p, SubSlicesLayout())
		require.Error(t, err)
	}
	// Valid ones have the ladder the manager builds.
	p := vkruntime.DeviceProperties{Alignment: 16, MaxPageSize: 64 << 20}
	m, err := NewManager(newFakeStorage(), p, SubSlicesLayout())
	require.NoError(t, err)
	pages := SubSlicesPages(p)
	require.NotEmpty(t, pages)
	for i, k := range pages {
		require.Equal(t, k, m.Report().Dynamic[i].Kind)
	}
}
