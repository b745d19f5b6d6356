package client

import (
	"context"
	"errors"
	"fmt"
	"sync"
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/vkrt/vkrt/dryrun"
	"github.com/vkrt/vkrt/internal/cpuref"
	"github.com/vkrt/vkrt/kernel"
	"github.com/vkrt/vkrt/memory"
	"github.com/vkrt/vkrt/runtime/environment"
)

func TestConcurrentStreams(t *testing.T) {
	env, err := environment.Open("concurrent", environment.WithDir(t.TempDir()))
	require.NoError(t, err)
	defer env.Close()
	c := openClient(t, UseEnvironment(env))
	streams := []*Stream{c.DefaultStream()}
	for range 3 {
		s, err := c.NewStream()
		require.NoError(t, err)
		streams = append(streams, s)
	}
	const workers, rounds = 8, 6
	errs := make(chan error, workers+2)
	var wg sync.WaitGroup
	for w := range workers {
		wg.Go(func() {
			ctx := WithStream(context.Background(), streams[w%len(streams)])
			if w == workers-1 {
				ctx = dryrun.With(ctx) // one worker measures while the others run
			}
			if err := concurrentWorker(ctx, c, w, rounds); err != nil {
				errs <- fmt.Errorf("worker %d: %w", w, err)
			}
		})
	}
	done := make(chan struct{})
	var background sync.WaitGroup
	background.Go(func() {
		// Cleanups and installs race the workers: an install may be refused
		// while buffers are live, never anything worse.
		ctx := WithStream(context.Background(), streams[1])
		for i := 0; ; i++ {
			select {
			case <-done:
				return
			default:
			}
			c.MemoryCleanup(ctx)
			_ = c.MemoryUsage(ctx)
			err := c.InstallMemoryPools(ctx, memory.SubSlicesLayout())
			var ie *memory.InstallError
			if err != nil && !(errors.As(err, &ie) && ie.Kind == memory.PoolsInUse) {
				errs <- fmt.Errorf("install %d: %w", i, err)
				return
			}
		}
	})
	wg.Wait()
	close(done)
	background.Wait()
	close(errs)
	for err := range errs {
		require.NoError(t, err)
	}
	recs, err := MemoryRecords(context.Background(), env, environment.Query{})
	require.NoError(t, err)
	require.Len(t, recs, workers*rounds)
	require.Zero(t, c.MemoryUsage(context.Background()).NumberAllocs, "every worker freed what it made")
}

func concurrentWorker(ctx context.Context, c *Client, w, rounds int) error {
	dry := dryrun.Active(ctx)
	for r := range rounds {
		n := 64*(w+1) + 17*r
		a, b := make([]float32, n), make([]float32, n)
		for i := range a {
			a[i], b[i] = float32(w*1000+i), float32(r)-float32(i)/2
		}
		ba, err := c.Create(ctx, cpuref.Bytes(a))
		if err != nil {
			return err
		}
		bb, err := c.Create(ctx, cpuref.Bytes(b))
		if err != nil {
			return err
		}
		out, err := c.Empty(ctx, uint64(4*n))
		if err != nil {
			return err
		}
		if err := c.Run(ctx, kernel.Add(uint32(n)), ba, bb, out); err != nil {
			return err
		}
		raw, err := out.Read(ctx)
		if err != nil {
			return err
		}
		for i, v := range cpuref.Floats(raw) {
			want := a[i] + b[i]
			if dry {
				want = 0
			}
			if v != want {
				return fmt.Errorf("round %d element %d: got %v, want %v", r, i, v, want)
			}
		}
		if _, err := c.RecordMemory(ctx, fmt.Sprintf("worker %d round %d", w, r)); err != nil {
			return err
		}
		for _, buf := range []*Buffer{ba, bb, out} {
			if err := buf.Free(); err != nil {
				return err
			}
		}
	}
	return nil
}
