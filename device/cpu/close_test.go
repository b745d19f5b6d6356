package cpu_test

import (
	"context"
	"errors"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/vkrt/vkrt/device/cpu"
	"github.com/vkrt/vkrt/kernel"
	vkruntime "github.com/vkrt/vkrt/runtime"
)

// lookCtx is a context that counts the device's looks at Err (once on
// entry, then between chunks of work) and lets a test act on each: onLook
// gets the look's number and returns what that look sees, or nil for the
// parent's Err.
type lookCtx struct {
	context.Context
	looks  atomic.Int64
	onLook func(n int64) error
}

func (c *lookCtx) Err() error {
	n := c.looks.Add(1)
	if c.onLook != nil {
		if err := c.onLook(n); err != nil {
			return err
		}
	}
	return c.Context.Err()
}

// Close waits for a dispatch in flight: it returned at once while the
// kernel still wrote into the pages Close had released. Calls made while
// it waits fail at once with ErrClosed, and a second Close waits too.
func TestCloseWaitsForCallsInFlight(t *testing.T) {
	d, err := cpu.New()
	require.NoError(t, err)
	const n = 1 << 17 // two chunks: the kernel looks at the context between them
	out, err := d.Storage().Alloc(4 * n)
	require.NoError(t, err)
	other, err := d.Storage().Alloc(4)
	require.NoError(t, err)

	// The second look is made from within the kernel: it waits there
	// until released.
	entered, release := make(chan struct{}), make(chan struct{})
	ctx := &lookCtx{Context: t.Context(), onLook: func(n int64) error {
		if n == 2 {
			close(entered)
			<-release
		}
		return nil
	}}
	dispatched := make(chan error, 1)
	go func() { dispatched <- d.Dispatch(ctx, []kernel.Op{kernel.FillWords(n, 1).With(out)}) }()
	<-entered

	closed := make(chan struct{}, 2)
	go func() { require.NoError(t, d.Close()); closed <- struct{}{} }()
	// Once Close has begun, new calls are refused without waiting.
	deadline := time.Now().Add(5 * time.Second)
	for err := d.Upload(t.Context(), other, []byte{1}); !errors.Is(err, vkruntime.ErrClosed); err = d.Upload(t.Context(), other, []byte{1}) {
		require.NoError(t, err)
		require.True(t, time.Now().Before(deadline), "Close never began")
		time.Sleep(time.Millisecond)
	}
	_, err = d.Storage().Alloc(4)
	require.ErrorIs(t, err, vkruntime.ErrClosed)
	go func() { require.NoError(t, d.Close()); closed <- struct{}{} }()
	select {
	case <-closed:
		t.Fatal("Close returned while a dispatch was running")
	case <-time.After(100 * time.Millisecond):
	}
	close(release)
	require.NoError(t, <-dispatched, "the dispatch admitted before Close ran to its end")
	<-closed
	<-closed
	require.Zero(t, d.Storage().Allocated())
	require.Zero(t, d.Storage().Allocations())
}

// Calls of every kind racing with Close either run whole or fail with
// ErrClosed (they failed with ErrNotFound for pages Close had just
// dropped), and once Close returns the storage holds nothing (an Alloc
// admitted before Close added its page after Close had released them all).
// Run with -race.
func TestCloseRacingWithCalls(t *testing.T) {
	const g = 4096
	for round := range 40 {
		d, err := cpu.New(cpu.WithSparseGranule(g))
		require.NoError(t, err)
		s := d.Storage().(*cpu.Storage)
		// Each worker has its own page and range: the calls race with
		// Close, not with one another over the same bytes.
		const workers = 8
		var pages, virtuals [workers]vkruntime.StorageHandle
		for w := range workers {
			pages[w], err = s.Alloc(2 * g)
			require.NoError(t, err)
			virtuals[w], err = s.ReserveVirtual(4 * g)
			require.NoError(t, err)
			require.NoError(t, s.Bind(virtuals[w].ID, []vkruntime.SparseBind{{Size: g, Memory: pages[w].ID}}))
		}

		var wg sync.WaitGroup
		var afterClose atomic.Bool
		errs := make(chan error, 1024)
		start := make(chan struct{})
		for w := range workers {
			wg.Go(func() {
				page, virtual := pages[w], virtuals[w]
				<-start
				for i := 0; i < 200; i++ {
					closedBefore := afterClose.Load()
					var err error
					switch (w + i) % 6 {
					case 0:
						var h vkruntime.StorageHandle
						if h, err = s.Alloc(g); err == nil {
							s.Dealloc(h.ID)
						}
					case 1:
						err = d.Upload(t.Context(), page, make([]byte, 2*g))
					case 2:
						err = d.Download(t.Context(), vkruntime.StorageHandle{ID: virtual.ID, Size: 2 * g}, make([]byte, 2*g))
					case 3:
						err = d.Dispatch(t.Context(), []kernel.Op{kernel.FillWords(2*g/4, uint32(i)).With(page)})
					case 4:
						err = d.Dispatch(t.Context(), []kernel.Op{kernel.ReLU(g/4).With(virtual, vkruntime.StorageHandle{ID: virtual.ID, Size: g})})
					case 5:
						err = s.Bind(virtual.ID, []vkruntime.SparseBind{{Offset: g, Size: g, Memory: page.ID, MemoryOffset: g}})
					}
					if err != nil && !errors.Is(err, vkruntime.ErrClosed) || closedBefore && err == nil {
						errs <- err
						return
					}
				}
			})
		}
		close(start)
		time.Sleep(time.Duration(round%4) * 100 * time.Microsecond)
		require.NoError(t, d.Close())
		afterClose.Store(true)
		require.Zero(t, s.Allocated(), "round %d: the storage holds memory after Close", round)
		require.Zero(t, s.Allocations(), "round %d", round)
		wg.Wait()
		close(errs)
		for err := range errs {
			t.Fatalf("round %d: a call racing with Close: %v (want nil or ErrClosed, and ErrClosed once Close returned)", round, err)
		}
	}
}
