package wasmhost

import (
	"context"
	"errors"
	"fmt"
	"io"
	"path/filepath"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/vkrt/vkrt/client"
	"github.com/vkrt/vkrt/internal/envtest"
	"github.com/vkrt/vkrt/runtime/environment"
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

// holdABufferOfAnotherGuest runs a guest on h that makes a buffer of
// 3,000,001 B and sleeps a second, and returns once the buffer is live; the
// channel gets the guest's end.
func holdABufferOfAnotherGuest(t *testing.T, h *Host, c *client.Client) <-chan error {
	holder := compile(t, h, wat(t, `(module
  (import "vkrt_v1" "buffer_create" (func $create (param i64 i32) (result i32)))
  (import "wasi_snapshot_preview1" "poll_oneoff" (func $poll (param i32 i32 i32 i32) (result i32)))
  (memory (export "memory") 1)
  (data (i32.const 24) "\00\ca\9a\3b\00\00\00\00") ;; 1 s
  (func (export "_start")
    (if (call $create (i64.const 3000001) (i32.const 4096)) (then unreachable))
    (drop (call $poll (i32.const 0) (i32.const 1024) (i32.const 1) (i32.const 2048)))))`))
	done := make(chan error, 1)
	go func() {
		_, err := h.Run(context.Background(), holder, WithClocks(), WithDeadline(time.Minute))
		done <- err
	}()
	require.Eventually(t, func() bool { return liveBuffers(c) == 1 }, 5*time.Second, 10*time.Millisecond)
	return done
}

// A guest whose allocation the device refuses reads of its own request
// and pools in last_error, nothing of another guest's: the message was the
// client's, which lists every stream's largest live buffers (another
// guest's buffer of 3,000,001 B, its stream) and the device's bytes in use.
func TestLastErrorOfARefusedAllocationNamesNoOtherGuest(t *testing.T) {
	c := openClient(t, client.WithMemoryLimit(64<<20))
	h := newHost(t, context.Background(), c)
	done := holdABufferOfAnotherGuest(t, h, c)
	asker := compile(t, h, guestWAT(t, "", `(drop (call $create (i64.const 40000000) (i32.const 0)))`))
	res, err := h.Run(context.Background(), asker)
	require.NoError(t, err)
	require.NoError(t, <-done)
	require.Equal(t, uint64(1), res.FailedCalls)
	msg := res.LastError
	require.Contains(t, msg, "40000000 B")
	require.Contains(t, msg, "out of memory")
	for _, other := range []string{"3000001", "3.00 MB", "stream", "limit", "in use 3"} {
		require.NotContains(t, msg, other, "last_error: %s", msg)
	}
}

// The same of an allocation the guest's own capped pools refuse: the
// message was the client's for that refusal too, naming another guest's
// buffer, its stream and its size.
func TestLastErrorOfACappedPoolsRefusalNamesNoOtherGuest(t *testing.T) {
	c := openClient(t)
	h := newHost(t, context.Background(), c)
	done := holdABufferOfAnotherGuest(t, h, c)
	layout := `{"Sliced":[{"page_size":65536,"pages":1,"max_slice":null}]}`
	asker := compile(t, h, guestWAT(t, fmt.Sprintf("(data (i32.const 1024) %q)", layout), fmt.Sprintf(`
    (if (call $install (i32.const 1024) (i32.const %d)) (then unreachable))
    (if (call $create (i64.const 65536) (i32.const 0)) (then unreachable))
    (call $exit (call $create (i64.const 65536) (i32.const 4)))`, len(layout))))
	res, err := h.Run(context.Background(), asker)
	var exit *ExitError
	require.ErrorAs(t, err, &exit)
	require.Equal(t, uint32(ENOMEM), exit.Code, "the second page does not fit the capped pool")
	require.NoError(t, <-done)
	msg := res.LastError
	require.Contains(t, msg, "65536 B")
	require.Contains(t, msg, "pool capacity exceeded")
	require.Contains(t, msg, "this guest's pools hold")
	for _, other := range []string{"3000001", "3.00 MB", "stream", "largest"} {
		require.NotContains(t, msg, other, "last_error: %s", msg)
	}
}

// recordThenExitWAT records once and exits with memory_record's status.
const recordThenExitWAT = `(module
  (import "vkrt_v1" "memory_record" (func $record (param i32 i32) (result i32)))
  (import "wasi_snapshot_preview1" "proc_exit" (func $exit (param i32)))
  (memory (export "memory") 1)
  (data (i32.const 16) "waits")
  (func (export "_start") (call $exit (call $record (i32.const 16) (i32.const 5)))))`

// A host call the deadline cuts short ends the guest at its deadline, as
// a sleep does: the guest was handed the failure (EIO from a record
// waiting on another writer's lock) and exited with it, so the run read
// as the guest's own exit code 29, not as a deadline.
func TestTheDeadlineEndsAGuestInsideAHostCall(t *testing.T) {
	dir := t.TempDir()
	c := openClient(t, client.WithEnvironment("locked", environment.WithDir(dir)))
	h := newHost(t, context.Background(), c)
	m := compile(t, h, wat(t, recordThenExitWAT))
	envtest.HoldWriteLock(t, filepath.Join(dir, "locked.sqlite"))

	start := time.Now()
	res, err := h.Run(context.Background(), m, WithDeadline(300*time.Millisecond))
	require.ErrorIs(t, err, ErrDeadline)
	var exit *ExitError
	require.False(t, errors.As(err, &exit), "the guest's exit after the deadline: %v", err)
	require.Zero(t, res.ExitCode)
	require.Less(t, time.Since(start), 5*time.Second)
}

// writerWAT writes 64 KiB to standard output, again and again.
const writerWAT = `(module
  (import "wasi_snapshot_preview1" "fd_write" (func $write (param i32 i32 i32 i32) (result i32)))
  (memory (export "memory") 2)
  (func (export "_start")
    (i32.store (i32.const 0) (i32.const 1024))
    (i32.store (i32.const 4) (i32.const 65536))
    (loop $l (drop (call $write (i32.const 1) (i32.const 0) (i32.const 1) (i32.const 8))) (br $l))))`

// A guest whose standard output blocks (a pipe nobody reads) ends at its
// deadline, and when the host closes, as a sleeping one does: its write
// held it, and Close with it, until the reader went away.
func TestTheDeadlineEndsAGuestWhoseOutputBlocks(t *testing.T) {
	c := openClient(t)
	h := newHost(t, context.Background(), c)
	m := compile(t, h, wat(t, writerWAT))
	r, w := io.Pipe()
	t.Cleanup(func() { r.Close() })
	go func() { r.Read(make([]byte, 100<<10)) }() // the first write goes through, then nothing is read

	start := time.Now()
	res, err := h.Run(context.Background(), m, WithStdout(w), WithDeadline(300*time.Millisecond))
	require.ErrorIs(t, err, ErrDeadline)
	require.Zero(t, res.ExitCode)
	require.Less(t, time.Since(start), 5*time.Second, "the guest's write held it past its deadline")

	done := make(chan error, 1)
	go func() {
		_, err := h.Run(context.Background(), m, WithStdout(w))
		done <- err
	}()
	time.Sleep(200 * time.Millisecond) // the guest's write blocks
	start = time.Now()
	require.NoError(t, h.Close(context.Background()))
	require.ErrorIs(t, <-done, ErrClosed)
	require.Less(t, time.Since(start), 5*time.Second, "Close waited for the guest's write")
}
