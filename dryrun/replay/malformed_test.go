package replay

import (
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/vkrt/vkrt/dryrun/trace"
	"github.com/vkrt/vkrt/memory"
)

// A trace built by hand (its fields are exported; the client builds its
// own) that Read could not have made is refused with trace.ErrMalformed
// before anything is replayed: an index past Allocations panicked, and an
// allocation of 0 bytes was replayed.
func TestAMalformedTraceIsRefused(t *testing.T) {
	alloc := func(i int32, size uint64) trace.Event { return trace.Event{Op: trace.OpAlloc, Index: i, Size: size} }
	free := func(i int32) trace.Event { return trace.Event{Op: trace.OpFree, Index: i} }
	for name, events := range map[string][]trace.Event{
		"free past Allocations":  {alloc(0, 10), free(5)},
		"alloc past Allocations": {alloc(3, 10)},
		"negative index":         {alloc(-1, 10)},
		"0 bytes":                {alloc(0, 0)},
		"allocated twice":        {alloc(0, 10), alloc(0, 10)},
		"freed twice":            {alloc(0, 10), free(0), free(0)},
		"freed before made":      {free(0), alloc(0, 10)},
		"unknown op":             {{Op: 'x', Index: 0}},
	} {
		tr := &trace.Trace{Name: "hand", Allocations: 1, Events: events}
		require.NotPanics(t, func() {
			_, err := Run(tr, memory.VirtualLayout(memory.VirtualPlan{}), Options{})
			require.ErrorIs(t, err, trace.ErrMalformed, name)
		}, name)
	}
	ok := &trace.Trace{Name: "hand", Allocations: 2, Events: []trace.Event{alloc(0, 10), alloc(1, 20), free(0)}}
	r, err := Run(ok, memory.VirtualLayout(memory.VirtualPlan{}), Options{})
	require.NoError(t, err)
	require.Equal(t, uint64(30), r.PeakLiveBytes)
}

// A nil trace is refused with trace.ErrNil, Run's and Measure's alike: it
// panicked on the nil dereference.
func TestANilTraceIsRefused(t *testing.T) {
	require.NotPanics(t, func() {
		r, err := Run(nil, memory.VirtualLayout(memory.VirtualPlan{}), Options{})
		require.ErrorIs(t, err, trace.ErrNil)
		require.NotErrorIs(t, err, trace.ErrMalformed)
		require.Nil(t, r)
		r, _, err = Measure(nil, memory.SubSlicesLayout(), Options{})
		require.ErrorIs(t, err, trace.ErrNil)
		require.ErrorContains(t, err, "replay: trace: a nil *Trace")
		require.Nil(t, r)
	})
}

// A trace with no name (built by hand, or read with none) is named in no
// error of its replay, as trace.Check names none: "replay:  line 2: …"
// and "replay: : memory: …" named nothing.
func TestAReplayOfATraceWithNoNameSaysNoName(t *testing.T) {
	big := &trace.Trace{Allocations: 2, Events: []trace.Event{
		{Op: trace.OpAlloc, Index: 0, Size: 100, Line: 1}, {Op: trace.OpAlloc, Index: 1, Size: 1 << 40, Line: 2}}}
	_, err := Run(big, memory.SubSlicesLayout(), Options{})
	require.ErrorContains(t, err, "replay: line 2: 1099511627776 B with 100 B live")

	bad := H200()
	bad.Alignment = 3
	_, err = Run(big, memory.SubSlicesLayout(), Options{Device: bad})
	require.ErrorContains(t, err, "replay: memory: NewManager: ")

	big.Name = "t"
	_, err = Run(big, memory.SubSlicesLayout(), Options{})
	require.ErrorContains(t, err, "replay: t line 2: 1099511627776 B with 100 B live")
	_, err = Run(big, memory.SubSlicesLayout(), Options{Device: bad})
	require.ErrorContains(t, err, "replay: t: memory: NewManager: ")
}
