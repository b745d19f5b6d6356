package client

import (
	"context"
	"sync"
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/vkrt/vkrt/dryrun"
	vkruntime "github.com/vkrt/vkrt/runtime"
)

// Back under a dry run checks its buffer and gives it no device memory,
// as every other use under a dry run; a real run's Back then does.
func TestBackUnderADryRunHoldsNothing(t *testing.T) {
	ctx := context.Background()
	c := openOnCPU(t, nil)
	s, err := c.NewStream()
	require.NoError(t, err)
	b, err := s.Empty(dryrun.With(ctx), 3<<20)
	require.NoError(t, err)
	held := c.Device().Storage().Allocated()
	require.NoError(t, s.Back(dryrun.With(ctx), b))
	require.Equal(t, held, c.Device().Storage().Allocated(), "a dry run holds no device memory")
	require.NoError(t, s.Back(ctx, b))
	require.Greater(t, c.Device().Storage().Allocated(), held)

	require.NoError(t, s.Free(b))
	require.ErrorIs(t, s.Back(dryrun.With(ctx), b), vkruntime.ErrNotFound)
	other, err := c.NewStream()
	require.NoError(t, err)
	live, err := other.Empty(dryrun.With(ctx), 1)
	require.NoError(t, err)
	require.ErrorIs(t, s.Back(dryrun.With(ctx), live), ErrForeignBuffer)
	require.NoError(t, other.Close())
	require.ErrorIs(t, other.Back(dryrun.With(ctx), live), ErrClosed)
	require.ErrorIs(t, other.Back(ctx, live), ErrClosed)
}

// Streams making, backing and freeing buffers while others clean their
// pools and close: run with -race.
func TestBackAndCleanupRaceWithClose(t *testing.T) {
	ctx := context.Background()
	c := openOnCPU(t, nil)
	var wg sync.WaitGroup
	for range 4 {
		s, err := c.NewStream()
		require.NoError(t, err)
		wg.Add(2)
		go func() {
			defer wg.Done()
			for i := range 200 {
				b, err := s.Empty(dryrun.With(ctx), uint64(i+1)<<10)
				if err != nil {
					require.ErrorIs(t, err, ErrClosed)
					return
				}
				if err := s.Back(ctx, b); err != nil {
					require.ErrorIs(t, err, ErrClosed)
					return
				}
				got, err := s.ReadAt(ctx, b, 0, 16)
				if err != nil {
					require.ErrorIs(t, err, ErrClosed)
					return
				}
				require.Equal(t, make([]byte, 16), got)
				if err := s.Free(b); err != nil {
					require.ErrorIs(t, err, ErrClosed)
					return
				}
			}
		}()
		go func() {
			defer wg.Done()
			for i := range 100 {
				s.MemoryCleanup()
				c.MemoryCleanup(ctx)
				if i == 50 {
					require.NoError(t, s.Close())
				}
			}
		}()
	}
	wg.Wait()
	require.Zero(t, c.MemoryUsage(ctx).NumberAllocs)
}
