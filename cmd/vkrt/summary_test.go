package main

import (
	"bytes"
	"os"
	"path/filepath"
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/vkrt/vkrt/internal/strictjson"
	"github.com/vkrt/vkrt/memory"
)

func TestLayoutSummaryNeverCallsAnUncappedPoolCapped(t *testing.T) {
	pages := func(n uint64) *uint64 { return &n }
	for want, l := range map[string]memory.Layout{
		"sliced: 1 pool, uncapped":                                                    memory.SlicedLayout(memory.SlicedPool{PageSize: 4096}),
		"sliced: 2 pools capped at " + memory.FormatBytes(3*4096):                     memory.SlicedLayout(memory.SlicedPool{PageSize: 4096, Pages: pages(1)}, memory.SlicedPool{PageSize: 4096, Pages: pages(2)}),
		"sliced: 2 pools, 1 capped at " + memory.FormatBytes(2*4096) + ", 1 uncapped": memory.SlicedLayout(memory.SlicedPool{PageSize: 4096, Pages: pages(2)}, memory.SlicedPool{PageSize: 1 << 20}),
	} {
		require.Equal(t, want, summarizeLayout(l))
	}
	huge := memory.SlicedLayout(memory.SlicedPool{PageSize: 1 << 62, Pages: pages(65535)})
	require.Equal(t, "sliced: 1 pool capped at "+memory.FormatBytes(1<<64-1), summarizeLayout(huge), "a product past 2^64 saturates")
}

func TestReplayLayoutRefusesNumbersPastUint64(t *testing.T) {
	dir := t.TempDir()
	tr := smallTrace(t, dir)
	for _, doc := range []string{
		`{"Sliced":[{"page_size":99999999999999999999}]}`,
		`{"Sliced":[{"page_size":4096,"pages":36893488147419103233}]}`,
		`{"Sliced":[{"page_size":-1}]}`,
		`{"Sliced":[{"page_size":1e6}]}`,
	} {
		_, _, err := execute(t, "replay", "--layout", doc, tr)
		require.ErrorIs(t, err, strictjson.ErrNumberDoesNotFit, "literal %s", doc)
		file := filepath.Join(dir, "layout.json")
		require.NoError(t, os.WriteFile(file, []byte(doc), 0o644))
		_, _, err = execute(t, "replay", "--layout", file, tr)
		require.ErrorIs(t, err, strictjson.ErrNumberDoesNotFit, "file holding %s", doc)
	}
}

func TestReplayLayoutFileOfNonJSONGivesOneShortLine(t *testing.T) {
	dir := t.TempDir()
	file := filepath.Join(dir, "big.bin")
	require.NoError(t, os.WriteFile(file, bytes.Repeat([]byte("not json at all "), 4<<20/16), 0o644))
	_, _, err := execute(t, "replay", "--layout", file, smallTrace(t, dir))
	require.ErrorContains(t, err, "holds no layout")
	require.Less(t, len(errorLine(err)), 300)
	require.NotContains(t, errorLine(err), "\n")
}

// A layout whose capped pages add up past 2^64 plans as much as it can
// hold, not nothing: planCapacity wrapped to 0 and the table left out its
// spills column as for an unplanned layout.
func TestPlanCapacityPast2To64IsNotNoPlan(t *testing.T) {
	pages := func(n uint64) *uint64 { return &n }
	huge := memory.SlicedLayout(memory.SlicedPool{PageSize: 1 << 62, Pages: pages(4)})
	require.Equal(t, uint64(1<<64-1), planCapacity(huge))
	two := memory.SlicedLayout(memory.SlicedPool{PageSize: 1 << 63, Pages: pages(1)}, memory.SlicedPool{PageSize: 1 << 63, Pages: pages(1)})
	require.Equal(t, uint64(1<<64-1), planCapacity(two))

	out, _, err := executeReplay(t, "--layout", `{"Sliced":[{"page_size":4611686018427387904,"pages":4}]}`, smallTrace(t, t.TempDir()))
	require.NoError(t, err)
	require.Contains(t, out, "spills")
}

// Growth past a plan is measured without wrapping: a virtual plan of
// 2^64 - 1 planned bytes (a hand-written one) and a persistent pool
// holding bytes read as growth of what was reserved less the persistent
// bytes, plus one.
func TestGrowthPastAPlanNearTheTopOfUint64(t *testing.T) {
	require.Zero(t, growth(2<<20, 1<<64-1, 1000))
	require.Zero(t, growth(2<<20, 1000, 1<<64-1))
	require.Equal(t, uint64(1000), growth(3000, 1500, 500))
	require.Zero(t, growth(3000, 0, 0), "no plan, no growth")
}
