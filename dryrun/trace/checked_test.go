package trace

import (
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
