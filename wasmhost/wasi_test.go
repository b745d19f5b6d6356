package wasmhost

import (
	"bytes"
	"context"
	"io"
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

// randomWriter writes 16 bytes of WASI's random_get to standard output.
const randomWriter = `(module
  (import "wasi_snapshot_preview1" "random_get" (func $random (param i32 i32) (result i32)))
  (import "wasi_snapshot_preview1" "fd_write" (func $write (param i32 i32 i32 i32) (result i32)))
  (memory (export "memory") 1)
  (func (export "_start")
    (if (call $random (i32.const 64) (i32.const 16)) (then unreachable))
    (i32.store (i32.const 0) (i32.const 64))
    (i32.store (i32.const 4) (i32.const 16))
    (if (call $write (i32.const 1) (i32.const 0) (i32.const 1) (i32.const 8)) (then unreachable))))`

// TestRandomIsTheSameInEveryRunUnlessGranted: random_get gives the same
// bytes in every run, as a dry run and the run it plans must see, unless
// the run grants the host's cryptographic source.
func TestRandomIsTheSameInEveryRunUnlessGranted(t *testing.T) {
	c := openClient(t)
	h := newHost(t, context.Background(), c)
	m := compile(t, h, wat(t, randomWriter))
	bytesOf := func(opts ...RunOption) string {
		var out bytes.Buffer
		_, err := h.Run(context.Background(), m, append(opts, WithStdout(&out))...)
		require.NoError(t, err)
		require.Equal(t, 16, out.Len())
		return out.String()
	}
	first := bytesOf()
	require.Equal(t, first, bytesOf(), "the deterministic source gives the same bytes in every run")
	granted := bytesOf(WithRandomness())
	require.NotEqual(t, first, granted)
	require.NotEqual(t, granted, bytesOf(WithRandomness()), "16 random bytes twice the same")
}

// A writer that panics (a typed nil *bytes.Buffer given to WithStdout)
// fails the guest's write with EIO, as a writer's error does, and the
// host goes on: the panic, in the goroutine the write runs on, ended the
// process.
func TestAWriterThatPanicsFailsTheWrite(t *testing.T) {
	c := openClient(t)
	h := newHost(t, context.Background(), c)
	// fd_write's errno is the exit code.
	m := compile(t, h, wat(t, `(module
  (import "wasi_snapshot_preview1" "fd_write" (func $fdwrite (param i32 i32 i32 i32) (result i32)))
  (import "wasi_snapshot_preview1" "proc_exit" (func $exit (param i32)))
  (memory (export "memory") 1)
  (data (i32.const 16) "\18\00\00\00\01\00\00\00x")
  (func (export "_start")
    (call $exit (call $fdwrite (i32.const 1) (i32.const 16) (i32.const 1) (i32.const 8)))))`))
	for _, w := range []io.Writer{(*bytes.Buffer)(nil), writerFunc(func([]byte) (int, error) { panic("boom") })} {
		res, err := h.Run(context.Background(), m, WithStdout(w))
		var exit *ExitError
		require.ErrorAs(t, err, &exit, "%T", w)
		require.Equal(t, uint32(EIO), res.ExitCode, "%T", w)
	}
	var out bytes.Buffer
	_, err := h.Run(context.Background(), m, WithStdout(&out))
	require.NoError(t, err, "the host runs guests still")
	require.Equal(t, "x", out.String())
}
