package main

import (
	"testing"

	"github.com/stretchr/testify/require"

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
