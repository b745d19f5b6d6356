package wasmhost

import (
	"context"
	"fmt"
	"path/filepath"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/stretchr/testify/require"
	"github.com/tetratelabs/wazero/api"
	"github.com/tetratelabs/wazero/experimental"

	"github.com/vkrt/vkrt/client"
	"github.com/vkrt/vkrt/internal/envtest"
	"github.com/vkrt/vkrt/runtime/environment"
)

// Close ends the guests that run: their Runs fail with ErrClosed (not nil,
// as a guest that returned), with their buffers freed, and Close returns
// once they have. A Run or Compile after Close is ErrClosed too.
func TestCloseEndsRunningGuestsWithErrClosed(t *testing.T) {
	c := openClient(t)
	h := newHost(t, context.Background(), c)
	spin := compile(t, h, guestWAT(t, "", `
    (drop (call $create (i64.const 4096) (i32.const 0)))
    (loop $forever (br $forever))`))

	type outcome struct {
		res *Result
		err error
	}
	done := make(chan outcome, 1)
	go func() {
		res, err := h.Run(context.Background(), spin)
		done <- outcome{res, err}
	}()
	require.Eventually(t, func() bool { return liveBuffers(c) == 1 }, 30*time.Second, time.Millisecond, "the guest made its buffer")

	require.NoError(t, h.Close(context.Background()))
	// Run has returned once Close has: what it does before it returns, the
	// guest's buffer freed, is done. (Its result reaches done a moment
	// later: the goroutine sends it after Run returns, so a receive that
	// did not wait failed 9 runs in 30 under -race.)
	require.Zero(t, liveBuffers(c), "Close returned before the guest's Run freed its buffer")
	var got outcome
	select {
	case got = <-done:
	case <-time.After(30 * time.Second):
		t.Fatal("the guest's Run did not return")
	}
	require.ErrorIs(t, got.err, ErrClosed)
	require.NotNil(t, got.res)

	_, err := h.Run(context.Background(), spin)
	require.ErrorIs(t, err, ErrClosed)
	_, err = h.Compile(context.Background(), guestWAT(t, "", ""))
	require.ErrorIs(t, err, ErrClosed)
	require.NoError(t, h.Close(context.Background()), "a second Close does nothing")
}

// A Compile that Close overtakes is ErrClosed or a module: Close closed the
// runtime under the compile, whose wazero then panicked (a write to the map
// the close had cleared), and Compile said the module was refused.
func TestCompileRacingCloseIsErrClosed(t *testing.T) {
	c := openClient(t)
	// Functions enough that a compile takes a while for Close to overtake.
	var extra strings.Builder
	for i := range 200 {
		fmt.Fprintf(&extra, "(func $f%d (result i32) (i32.add (i32.const %d) (call $h0)))\n", i, i)
	}
	wasm := guestWAT(t, extra.String(), `(drop (call $create (i64.const 4096) (i32.const 0)))`)
	for i := range 300 {
		h, err := New(context.Background(), c)
		require.NoError(t, err)
		var wg sync.WaitGroup
		errs := make([]error, 4)
		for j := range errs {
			wg.Go(func() {
				m, err := h.Compile(context.Background(), wasm)
				errs[j] = err
				if m != nil {
					m.Close(context.Background())
				}
			})
		}
		// Close at a different point of the compiles each time.
		time.Sleep(time.Duration(i%20) * 50 * time.Microsecond)
		require.NoError(t, h.Close(context.Background()))
		wg.Wait()
		for _, err := range errs {
			if err != nil {
				require.ErrorIs(t, err, ErrClosed, "iteration %d", i)
			}
		}
	}
}

// A second Close, while the first waits for a guest, returns once the
// guest's Run has, as the first does: it returned at once, with the guest
// still inside a host call (held there by a listener that, as a device's
// wait might, does not end when the guest's context does).
func TestASecondCloseWaitsForTheGuests(t *testing.T) {
	h, ran, release := heldInAHostCall(t)
	first := make(chan error, 1)
	go func() { first <- h.Close(context.Background()) }()
	require.Eventually(t, h.isClosed, 10*time.Second, time.Millisecond)
	second := make(chan error, 1)
	go func() { second <- h.Close(context.Background()) }()
	select {
	case err := <-second:
		second <- err
		t.Error("the second Close returned while a guest still ran")
	case <-time.After(200 * time.Millisecond):
	}
	release()
	require.NoError(t, <-first)
	require.NoError(t, <-second)
	// Close returns once Run has; the result reaches ran a moment later
	// (it is sent after Run returns), so the receive waits for it.
	select {
	case err := <-ran:
		require.ErrorIs(t, err, ErrClosed)
	case <-time.After(30 * time.Second):
		t.Fatal("the guest's Run did not return")
	}
}

// A guest Close ends while it is inside a host call gets ErrClosed however
// it then ends: returning, or exiting 0 by proc_exit, which Run took for a
// guest that finished (nil), as wazero does not look at a closed module's
// state on the way into proc_exit.
func TestAGuestClosedInAHostCallIsErrClosedHoweverItEnds(t *testing.T) {
	for _, ending := range []string{"", "(call $exit (i32.const 0))"} {
		h, ran, release := heldInARecord(t, ending)
		closed := make(chan error, 1)
		go func() { closed <- h.Close(context.Background()) }()
		require.Eventually(t, h.isClosed, 10*time.Second, time.Millisecond)
		require.NoError(t, release())
		require.NoError(t, <-closed)
		require.ErrorIs(t, <-ran, ErrClosed, "ending %q", ending)
	}
}

// Close ends a guest waiting inside a host call that watches its context
// (a record waiting on another writer's lock here): it cancels every
// guest's context before it closes the runtime, rather than closing the
// guests' modules under them, and so returns with the lock still held.
func TestCloseEndsAGuestWaitingInAHostCall(t *testing.T) {
	h, ran, release := heldInARecord(t, "")
	t.Cleanup(func() { _ = release() })
	closed := make(chan error, 1)
	go func() { closed <- h.Close(context.Background()) }()
	select {
	case err := <-closed:
		require.NoError(t, err)
	case <-time.After(10 * time.Second):
		require.NoError(t, release())
		t.Fatal("Close waited for the other writer's lock")
	}
	require.ErrorIs(t, <-ran, ErrClosed)
}

// heldInAHostCall runs a guest that calls memory_record and holds it on
// the way in, inside the host call, until release: Close's cancelling of
// its context does not end the wait.
func heldInAHostCall(t *testing.T) (h *Host, ran <-chan error, release func()) {
	t.Helper()
	gate := make(chan struct{})
	var released sync.Once
	release = func() { released.Do(func() { close(gate) }) }
	h, ran = runRecorder(t, openClient(t), "", gate, func() {})
	t.Cleanup(release) // before the host's Close, which waits for the guest
	return h, ran, release
}

// heldInARecord is a host running a guest that records, then does ending,
// with a lock held on the record's environment: it returns once the guest
// is inside the host call, where it waits until release; ran gets its
// Run's error.
func heldInARecord(t *testing.T, ending string) (h *Host, ran <-chan error, release func() error) {
	t.Helper()
	dir := t.TempDir()
	c := openClient(t, client.WithEnvironment("locked", environment.WithDir(dir)))
	h, ran = runRecorder(t, c, ending, nil, func() {
		release = envtest.HoldWriteLock(t, filepath.Join(dir, "locked.sqlite"))
	})
	return h, ran, release
}

// runRecorder runs, on a host over c, a guest that records its memory and
// then ends as ending says, once start has run, and returns when the
// guest is on its way into the record; a gate that is not nil holds it
// there until closed.
func runRecorder(t *testing.T, c *client.Client, ending string, gate <-chan struct{}, start func()) (*Host, <-chan error) {
	t.Helper()
	entered := make(chan struct{})
	var once sync.Once
	ctx := experimental.WithFunctionListenerFactory(context.Background(), experimental.FunctionListenerFactoryFunc(
		func(def api.FunctionDefinition) experimental.FunctionListener {
			if def.Name() != "memory_record" {
				return nil
			}
			return experimental.FunctionListenerFunc(func(context.Context, api.Module, api.FunctionDefinition, []uint64, experimental.StackIterator) {
				once.Do(func() { close(entered) })
				if gate != nil {
					<-gate
				}
			})
		}))
	h := newHost(t, ctx, c)
	recorder := compile(t, h, wat(t, `(module
  (import "vkrt_v1" "memory_record" (func $record (param i32 i32) (result i32)))
  (import "wasi_snapshot_preview1" "proc_exit" (func $exit (param i32)))
  (memory (export "memory") 1)
  (data (i32.const 16) "waits")
  (func (export "_start") (drop (call $record (i32.const 16) (i32.const 5))) `+ending+`))`))
	start()
	result := make(chan error, 1)
	go func() {
		_, err := h.Run(context.Background(), recorder)
		result <- err
	}()
	select {
	case <-entered:
	case err := <-result:
		t.Fatalf("the guest ended before its record: %v", err)
	}
	return h, result
}

// A Run that loads a module while the module's Close runs is refused as
// one after it, "the module is closed" (ErrRefused), where wazero's words
// came through: "source module must be compiled before instantiation".
// Runs in a loop on several goroutines, one of them is caught between its
// check of the module and the load in most rounds.
func TestARunRacingModuleCloseSaysTheModuleIsClosed(t *testing.T) {
	c := openClient(t)
	h := newHost(t, context.Background(), c)
	src := guestWAT(t, "", ``)
	for round := range 20 {
		m := compile(t, h, src)
		var wg sync.WaitGroup
		errs := make(chan error, 8)
		for range 8 {
			wg.Add(1)
			go func() {
				defer wg.Done()
				for {
					if _, err := h.Run(context.Background(), m); err != nil {
						errs <- err
						return
					}
				}
			}()
		}
		time.Sleep(time.Duration(round%5) * time.Millisecond)
		require.NoError(t, m.Close(context.Background()))
		wg.Wait()
		close(errs)
		for err := range errs {
			require.ErrorIs(t, err, ErrRefused)
			require.ErrorContains(t, err, "wasmhost: module refused: the module is closed")
		}
	}
}
