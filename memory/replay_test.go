package memory_test

import (
	"path/filepath"
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/vkrt/vkrt/dryrun/trace"
	"github.com/vkrt/vkrt/memory"
	vkruntime "github.com/vkrt/vkrt/runtime"
)

// replayPlaces replays a trace lazily and returns where each allocation
// landed, and the report at the end.
func replayPlaces(t *testing.T, tr *trace.Trace, l memory.Layout) ([]vkruntime.StorageHandle, memory.Report, uint64) {
	t.Helper()
	m, err := memory.NewManager(&nullStorage{}, h200, l)
	require.NoError(t, err)
	handles := make([]memory.Handle, tr.Allocations)
	places := make([]vkruntime.StorageHandle, tr.Allocations)
	for _, e := range tr.Events {
		if e.Op == trace.OpAlloc {
			h, err := m.Reserve(e.Size, memory.Eager)
			require.NoError(t, err, "line %d", e.Line)
			handles[e.Index] = h
			places[e.Index], err = m.Resolve(h)
			require.NoError(t, err)
		} else {
			require.NoError(t, m.Free(handles[e.Index]), "line %d", e.Line)
		}
	}
	return places, m.Report(), m.Spills()
}

// The contract a measured plan rests on: replaying a stream against the
// same pools capped at the pages they peaked at fits, with every
// allocation at the same page and offset.
func TestShippedTracesFitTheirMeasuredCaps(t *testing.T) {
	for _, name := range []string{"resnet50_train", "bert_dynamic"} {
		tr, err := trace.ReadFile(filepath.Join("..", "testdata", "traces", name+".trace.gz"))
		require.NoError(t, err)
		// max_slice is the whole page, so capping changes no routing.
		pages := []uint64{2 << 20, 32 << 20, 256 << 20, 2 << 30}
		var uncapped []memory.SlicedPool
		for _, p := range pages {
			uncapped = append(uncapped, memory.SlicedPool{PageSize: p, MaxSlice: &p})
		}
		measured, report, _ := replayPlaces(t, tr, memory.SlicedLayout(uncapped...))

		capped := make([]memory.SlicedPool, len(uncapped))
		for i, p := range report.Dynamic {
			peak := max(p.PagesPeak, 1)
			capped[i] = memory.SlicedPool{PageSize: pages[i], MaxSlice: uncapped[i].MaxSlice, Pages: &peak}
		}
		replayed, again, spills := replayPlaces(t, tr, memory.SlicedLayout(capped...))
		require.Zero(t, spills, name)
		for i := range report.Dynamic {
			require.Equal(t, report.Dynamic[i].PagesPeak, again.Dynamic[i].PagesPeak, "%s pool %d", name, i)
		}
		// Storage ids may be numbered differently between runs: compare
		// offsets and sizes, and that the same allocations share a page.
		require.Len(t, replayed, len(measured))
		sameID := map[vkruntime.StorageID]vkruntime.StorageID{}
		for i := range measured {
			require.Equal(t, measured[i].Offset, replayed[i].Offset, "%s allocation %d", name, i)
			require.Equal(t, measured[i].Size, replayed[i].Size, "%s allocation %d", name, i)
			if id, ok := sameID[measured[i].ID]; ok {
				require.Equal(t, id, replayed[i].ID, "%s allocation %d changed page", name, i)
			}
			sameID[measured[i].ID] = replayed[i].ID
		}
	}
}
