package wasmhost

import (
	"context"
	"testing"
	"time"

	"github.com/stretchr/testify/require"
)

// sleeperWAT sleeps 10 s in one poll_oneoff on a relative clock
// subscription (at 0: userdata, tag 0 = clock, clock id at +16, timeout
// at +24, precision at +32, flags 0 at +40) and returns.
const sleeperWAT = `(module
  (import "wasi_snapshot_preview1" "poll_oneoff" (func $poll (param i32 i32 i32 i32) (result i32)))
  (memory (export "memory") 1)
  (data (i32.const 24) "\00\e4\0b\54\02\00\00\00")
  (func (export "_start")
    (drop (call $poll (i32.const 0) (i32.const 1024) (i32.const 1) (i32.const 2048)))))`

// A guest granted clocks that sleeps past its deadline ends at the
// deadline: the sleep was time.Sleep, which nothing woke, and a guest of
// 300 ms ran 10 s.
func TestTheDeadlineEndsASleepingGuest(t *testing.T) {
	c := openClient(t)
	h := newHost(t, context.Background(), c)
	m := compile(t, h, wat(t, sleeperWAT))
	start := time.Now()
	_, err := h.Run(context.Background(), m, WithClocks(), WithDeadline(300*time.Millisecond))
	require.ErrorIs(t, err, ErrDeadline)
	require.Less(t, time.Since(start), 5*time.Second, "the guest slept past its deadline")

	// A short sleep still sleeps its time.
	short := compile(t, h, wat(t, `(module
  (import "wasi_snapshot_preview1" "poll_oneoff" (func $poll (param i32 i32 i32 i32) (result i32)))
  (memory (export "memory") 1)
  (data (i32.const 24) "\00\e1\f5\05\00\00\00\00") ;; 100 ms
  (func (export "_start")
    (drop (call $poll (i32.const 0) (i32.const 1024) (i32.const 1) (i32.const 2048)))))`))
	start = time.Now()
	_, err = h.Run(context.Background(), short, WithClocks(), WithDeadline(time.Minute))
	require.NoError(t, err)
	require.GreaterOrEqual(t, time.Since(start), 100*time.Millisecond)
}

// Close ends a sleeping guest and returns: it waited out the guest's
// sleep (10 s here).
func TestCloseEndsASleepingGuest(t *testing.T) {
	c := openClient(t)
	h := newHost(t, context.Background(), c)
	m := compile(t, h, wat(t, sleeperWAT))
	done := make(chan error, 1)
	started := time.Now()
	go func() {
		_, err := h.Run(context.Background(), m, WithClocks())
		done <- err
	}()
	time.Sleep(200 * time.Millisecond) // the guest is asleep
	require.NoError(t, h.Close(context.Background()))
	require.ErrorIs(t, <-done, ErrClosed)
	require.Less(t, time.Since(started), 5*time.Second, "Close waited out the guest's sleep")
}
