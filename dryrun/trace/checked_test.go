package trace

import (
	"bytes"
	"fmt"
	"math"
	"strings"
	"testing"

	"github.com/stretchr/testify/require"
)

// A trace Read made passes Check without a walk of its events, and one
// whose events were appended to or replaced since is walked again.
func TestCheckTrustsWhatReadCheckedAndNoMore(t *testing.T) {
	tr, err := Read("t", strings.NewReader("a 1 10 0\nf 1\n"))
	require.NoError(t, err)
	require.Equal(t, tr.as(), tr.checked)
	require.NoError(t, tr.Check())
	tr.Events = append(tr.Events, Event{Op: OpFree, Index: 0})
	require.ErrorIs(t, tr.Check(), ErrMalformed, "an event appended after Read")
	tr.Events = []Event{{Op: OpFree, Index: 0}, {Op: OpAlloc, Index: 0, Size: 10}}
	require.ErrorIs(t, tr.Check(), ErrMalformed, "events replaced after Read")
	tr.Events = tr.Events[1:]
	require.NoError(t, tr.Check())
	tr.Allocations = 0
	require.ErrorIs(t, tr.Check(), ErrMalformed, "allocations changed after Read")
}

// A trace built by hand that claims more allocations than it has events
// is refused before Check makes the state of each: one claiming more than
// an int holds panicked in make, and one claiming 2^40 asked for a
// terabyte.
func TestCheckRefusesMoreAllocationsThanEvents(t *testing.T) {
	one := []Event{{Op: OpAlloc, Index: 0, Size: 10}}
	for _, n := range []int{math.MaxInt, 1 << 40, 2} {
		tr := &Trace{Name: "hand", Allocations: n, Events: one}
		require.NotPanics(t, func() {
			err := tr.Check()
			require.ErrorIs(t, err, ErrMalformed)
			require.ErrorContains(t, err, fmt.Sprintf("%d allocations in 1 events", n))
		})
	}
	require.NoError(t, (&Trace{Name: "hand", Allocations: 1, Events: one}).Check())
}

// Check of a nil trace says so, ErrNil and not ErrMalformed: it panicked.
func TestCheckRefusesANilTrace(t *testing.T) {
	var tr *Trace
	require.NotPanics(t, func() {
		err := tr.Check()
		require.ErrorIs(t, err, ErrNil)
		require.NotErrorIs(t, err, ErrMalformed)
	})
}

// PeakLiveBytes of a trace that fails Check is 0, as it documents: an
// index past Allocations panicked, and a free of what was never allocated
// wrapped the live bytes past 2^64.
func TestPeakLiveBytesOfATraceThatFailsCheckIsZero(t *testing.T) {
	for name, tr := range map[string]*Trace{
		"nil":                   nil,
		"index past the allocs": {Allocations: 1, Events: []Event{{Op: OpAlloc, Index: 5, Size: 10}}},
		"negative index":        {Allocations: 1, Events: []Event{{Op: OpAlloc, Index: -1, Size: 10}}},
		"freed before made":     {Allocations: 2, Events: []Event{{Op: OpAlloc, Index: 1, Size: 10}, {Op: OpFree, Index: 0}, {Op: OpAlloc, Index: 0, Size: 7}}},
		"freed twice":           {Allocations: 2, Events: []Event{{Op: OpAlloc, Index: 0, Size: 10}, {Op: OpFree, Index: 0}, {Op: OpFree, Index: 0}, {Op: OpAlloc, Index: 1, Size: 5}}},
	} {
		require.Error(t, tr.Check(), name)
		require.NotPanics(t, func() { require.Zero(t, tr.PeakLiveBytes(), name) }, name)
	}
	ok := &Trace{Allocations: 2, Events: []Event{{Op: OpAlloc, Index: 0, Size: 10}, {Op: OpAlloc, Index: 1, Size: 7}, {Op: OpFree, Index: 0}}}
	require.Equal(t, uint64(17), ok.PeakLiveBytes())
}

// WriteTo refuses a trace that fails Check and writes nothing: it wrote
// an unknown op as a free and a negative index as a negative id, a text
// Read refuses, and panicked on a nil trace.
func TestWriteToRefusesATraceThatFailsCheck(t *testing.T) {
	for name, tr := range map[string]*Trace{
		"nil":            nil,
		"unknown op":     {Allocations: 1, Events: []Event{{Op: OpAlloc, Index: 0, Size: 10}, {Op: 'x', Index: 0}}},
		"negative index": {Allocations: 1, Events: []Event{{Op: OpAlloc, Index: -1, Size: 10}}},
		"freed twice":    {Allocations: 1, Events: []Event{{Op: OpAlloc, Index: 0, Size: 10}, {Op: OpFree, Index: 0}, {Op: OpFree, Index: 0}}},
	} {
		var buf bytes.Buffer
		require.NotPanics(t, func() {
			n, err := tr.WriteTo(&buf)
			require.Error(t, err, name)
			require.EqualError(t, err, tr.Check().Error(), name)
			require.Zero(t, n, name)
		}, name)
		require.Zero(t, buf.Len(), name)
	}
}
