package wasmhost

import (
	"context"
	"testing"

	"github.com/stretchr/testify/require"
)

// wasiProbe exits with a code that packs what WASI grants it: the number
// of arguments, of environment variables, and whether descriptor 3 (the
// first preopened directory) exists.
const wasiProbe = `(module
  (import "wasi_snapshot_preview1" "args_sizes_get" (func $args (param i32 i32) (result i32)))
  (import "wasi_snapshot_preview1" "environ_sizes_get" (func $env (param i32 i32) (result i32)))
  (import "wasi_snapshot_preview1" "fd_prestat_get" (func $prestat (param i32 i32) (result i32)))
  (import "wasi_snapshot_preview1" "proc_exit" (func $exit (param i32)))
  (memory (export "memory") 1)
  (func (export "_start")
    (drop (call $args (i32.const 0) (i32.const 4)))
    (drop (call $env (i32.const 8) (i32.const 12)))
    (call $exit (i32.add (i32.add
      (i32.mul (i32.load (i32.const 0)) (i32.const 100))
      (i32.mul (i32.load (i32.const 8)) (i32.const 10)))
      (i32.eqz (call $prestat (i32.const 3) (i32.const 16)))))))`

// TestWASIGrantsNothingUnlessAsked: a guest has no arguments, environment
// or filesystem unless its run grants them.
func TestWASIGrantsNothingUnlessAsked(t *testing.T) {
	c := openClient(t)
	h := newHost(t, context.Background(), c)
	m := compile(t, h, wat(t, wasiProbe))
	t.Setenv("VKRT_WASI_PROBE", "the host's environment")

	_, err := h.Run(context.Background(), m)
	require.NoError(t, err, "no arguments, no environment, no preopened directory: exit 0")

	_, err = h.Run(context.Background(), m, WithArgs("probe", "a"), WithEnv("A", "1"), WithEnv("B", "2"), WithReadOnlyDir(t.TempDir(), "/data"))
	var exit *ExitError
	require.ErrorAs(t, err, &exit)
	require.Equal(t, uint32(2*100+2*10+1), exit.Code)
}
