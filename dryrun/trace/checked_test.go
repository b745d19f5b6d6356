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
			require.ErrorContains(t, err, fmt.Sprintf("%d allocations in 1 event", n))
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

// Check names the event at fault as the replay's and the planner's errors
// do (Event.Where): its line, or the allocation it makes or frees, counted
// from 1; one whose index or op names no allocation by its place, counted
// from 1. It said "event 2 (index 0)", both counted from 0.
func TestCheckNamesTheEventAsWhereDoes(t *testing.T) {
	alloc := func(i int32) Event { return Event{Op: OpAlloc, Index: i, Size: 10} }
	free := func(i int32) Event { return Event{Op: OpFree, Index: i} }
	for want, events := range map[string][]Event{
		"h free of allocation 1: freed while not allocated":     {alloc(0), free(0), free(0)},
		"h allocation 2: allocated twice":                       {alloc(0), alloc(1), alloc(1)},
		"h allocation 2: an allocation of 0 bytes":              {alloc(0), {Op: OpAlloc, Index: 1}},
		"h event 3: index 7 outside the trace's 2 allocations":  {alloc(0), alloc(1), free(7)},
		"h event 1: index -1 outside the trace's 2 allocations": {alloc(-1), alloc(0)},
		"h event 2: unknown op 120":                             {alloc(0), {Op: 'x', Index: 1}},
	} {
		err := (&Trace{Name: "h", Allocations: 2, Events: events}).Check()
		require.ErrorIs(t, err, ErrMalformed, want)
		require.EqualError(t, err, "trace: malformed: "+want)
	}
	// Events read from a file keep their lines.
	tr, err := Read("t", strings.NewReader("a 1 10 0\n\nf 1\n"))
	require.NoError(t, err)
	tr.Events = append(tr.Events, tr.Events[1])
	require.EqualError(t, tr.Check(), "trace: malformed: t line 3: freed while not allocated")
	// A trace with no name is named by the event alone.
	err = (&Trace{Allocations: 1, Events: []Event{free(0)}}).Check()
	require.EqualError(t, err, "trace: malformed: free of allocation 1: freed while not allocated")
	err = (&Trace{Allocations: 2, Events: []Event{alloc(0)}}).Check()
	require.EqualError(t, err, "trace: malformed: 2 allocations in 1 event")
}
