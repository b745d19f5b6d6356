package callgate

import (
	"testing"
	"time"

	"github.com/stretchr/testify/require"
)

// Close waits for the calls inside; calls after it are refused, and only
// the first Close reports that it closed the gate.
func TestCloseWaitsForRunningCallsAndRefusesLaterOnes(t *testing.T) {
	var g Gate
	require.True(t, g.Enter())
	closed := make(chan bool)
	go func() { closed <- g.Close() }()
	for !g.Closed() {
		time.Sleep(time.Millisecond)
	}
	require.False(t, g.Enter(), "a call after Close began")
	select {
	case <-closed:
		t.Fatal("Close returned with a call running")
	case <-time.After(20 * time.Millisecond):
	}
	g.Leave()
	require.True(t, <-closed)
	require.False(t, g.Close(), "a second Close")
}
