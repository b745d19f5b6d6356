package client

import (
	"context"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/vkrt/vkrt/kernel"
	vkruntime "github.com/vkrt/vkrt/runtime"
)

// Close ends the launches and transfers in flight on the client's streams:
// they fail as closed (ErrClosed) where they held Close until they had run
// to their end. On the pure-Go device, whose speed every machine shares
// within a few times: a batch that would take minutes there is still
// running when Close comes (a GPU could finish it first). A device ends
// what it already runs before Close returns; vk leaves an abandoned
// submission to finish as a call's own context ending does.
func TestCloseEndsTheCallsInFlight(t *testing.T) {
	c := openOnCPU(t, nil)
	ctx := context.Background()
	const m = 512
	a, err := c.Empty(ctx, 4*m*m)
	require.NoError(t, err)
	b, err := c.Empty(ctx, 4*m*m)
	require.NoError(t, err)
	y, err := c.Empty(ctx, 4*m*m)
	require.NoError(t, err)
	var ops []LaunchOp
	for range 256 {
		ops = append(ops, Op(kernel.MatMul(m, m, m), a, b, y), Op(kernel.MatMul(m, m, m), y, b, a))
	}
	launched := make(chan error, 1)
	go func() { launched <- c.LaunchBatch(ctx, ops) }()
	time.Sleep(100 * time.Millisecond) // the batch is under way, or Close refuses it
	require.NoError(t, c.Close())
	err = <-launched
	require.ErrorIs(t, err, ErrClosed, "the batch was ended by Close, not run to its end")
	require.ErrorIs(t, err, vkruntime.ErrClosed)
	require.ErrorIs(t, err, context.Canceled, "the device's own error is kept")
	require.Equal(t, 1, strings.Count(err.Error(), "client: "), "%v", err)
	_, err = y.Read(ctx)
	require.ErrorIs(t, err, ErrClosed)
}

// Closed says false for an open client and true from Close on, read by
// other goroutines while Close runs (go test -race), and true for a nil or
// zero Client, which takes no work.
func TestClosedSaysWhetherCloseWasCalled(t *testing.T) {
	c := openOnCPU(t, nil)
	require.False(t, c.Closed())
	stop := make(chan struct{})
	var seen sync.WaitGroup
	for range 4 {
		seen.Add(1)
		go func() {
			defer seen.Done()
			for {
				select {
				case <-stop:
					return
				default:
					_ = c.Closed()
				}
			}
		}()
	}
	require.NoError(t, c.Close())
	require.True(t, c.Closed())
	close(stop)
	seen.Wait()
	_, err := c.NewStream()
	require.ErrorIs(t, err, ErrClosed, "a client that says it is closed refuses work")
	var nilClient *Client
	require.True(t, nilClient.Closed())
	require.True(t, (&Client{}).Closed())
}
