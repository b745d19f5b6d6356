package wasmhost

import (
	"context"
	"fmt"
	"path/filepath"
	"sync"
	"testing"

	"github.com/stretchr/testify/require"
)

// Guests compiled at once on a host whose compilation cache holds them
// run: wazero handed the second compile the module the first had just read
// from the cache, before it had made its entry points, and the second's Run
// panicked (index out of range in the module engine).
func TestConcurrentCompilesFromTheCacheRun(t *testing.T) {
	c := openClient(t)
	dir := filepath.Join(t.TempDir(), "cache")
	wasm := guestWAT(t, "", `(drop (call $create (i64.const 4096) (i32.const 0)))`)
	warm := newHost(t, context.Background(), c, WithCompilationCacheDir(dir))
	compile(t, warm, wasm)
	for i := range 60 {
		h, err := New(context.Background(), c, WithCompilationCacheDir(dir))
		require.NoError(t, err)
		errs := make(chan error, 6)
		var wg sync.WaitGroup
		for range cap(errs) {
			wg.Go(func() {
				defer func() {
					if p := recover(); p != nil {
						errs <- fmt.Errorf("host %d: panic: %v", i, p)
					}
				}()
				m, err := h.Compile(context.Background(), wasm)
				if err != nil {
					errs <- err
					return
				}
				defer m.Close(context.Background())
				if _, err := h.Run(context.Background(), m); err != nil {
					errs <- err
				}
			})
		}
		wg.Wait()
		require.NoError(t, h.Close(context.Background()))
		close(errs)
		for err := range errs {
			require.NoError(t, err)
		}
	}
}
