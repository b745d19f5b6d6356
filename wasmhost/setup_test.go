package wasmhost

import (
	"bytes"
	"context"
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/stretchr/testify/require"
	"github.com/tetratelabs/wazero/experimental"
	"github.com/tetratelabs/wazero/experimental/logging"

	"github.com/vkrt/vkrt/client"
	"github.com/vkrt/vkrt/internal/devtest"
	"github.com/vkrt/vkrt/internal/wasmtest"
	"github.com/vkrt/vkrt/runtime/environment"
)

// scratch is a directory the whole test binary shares: the compilation
// cache of its hosts.
var scratch string

func TestMain(m *testing.M) {
	dir, err := os.MkdirTemp("", "wasmhost-test-")
	if err != nil {
		fmt.Fprintln(os.Stderr, err)
		os.Exit(1)
	}
	scratch = dir
	code := m.Run()
	os.RemoveAll(dir)
	os.Exit(code)
}

func init() { devtest.SelectDevice() }

// openClient opens a client on the default device (the first Vulkan device
// in a cgo build) whose records go to a fresh environment, skipping when
// there is none unless VKRT_REQUIRE_DEVICE=1 makes that a failure.
func openClient(t testing.TB, opts ...client.Option) *client.Client {
	t.Helper()
	opts = append([]client.Option{client.WithEnvironment("wasmhost-test", environment.WithDir(t.TempDir()))}, opts...)
	c, err := client.Open(context.Background(), opts...)
	devtest.SkipUnavailable(t, err)
	t.Cleanup(func() { require.NoError(t, c.Close()) })
	return c
}

// newHost starts a host over c sharing the test binary's compilation cache.
func newHost(t testing.TB, ctx context.Context, c *client.Client, opts ...Option) *Host {
	t.Helper()
	h, err := New(ctx, c, append([]Option{WithCompilationCacheDir(filepath.Join(scratch, "cache"))}, opts...)...)
	require.NoError(t, err)
	t.Cleanup(func() { require.NoError(t, h.Close(context.Background())) })
	return h
}

// newLoggedHost is newHost with wazero's logging listener writing every
// host call to the returned buffer.
func newLoggedHost(t testing.TB, c *client.Client, opts ...Option) (*Host, *bytes.Buffer) {
	var log bytes.Buffer
	ctx := experimental.WithFunctionListenerFactory(context.Background(), logging.NewHostLoggingListenerFactory(&log, logging.LogScopeAll))
	return newHost(t, ctx, c, opts...), &log
}

// hostCalls keeps the host calls of a log, one a line without indentation:
// the guest's own exported functions are left out.
func hostCalls(log string) string {
	var out []string
	for _, l := range strings.Split(log, "\n") {
		l = strings.TrimLeft(l, "\t")
		if strings.HasPrefix(l, "==>") || strings.HasPrefix(l, "<==") {
			out = append(out, l)
		}
	}
	return strings.Join(out, "\n")
}

// watPrelude imports every function of vkrt_v1 and proc_exit, and gives
// the guest one page of memory and helpers that load the handles
// buffer_create wrote at addresses 0 and 4.
const watPrelude = `(module
  (import "vkrt_v1" "buffer_create" (func $create (param i64 i32) (result i32)))
  (import "vkrt_v1" "buffer_write" (func $write (param i32 i64 i32 i32) (result i32)))
  (import "vkrt_v1" "buffer_read" (func $read (param i32 i64 i32 i32) (result i32)))
  (import "vkrt_v1" "buffer_free" (func $free (param i32) (result i32)))
  (import "vkrt_v1" "launch" (func $launch (param i32 i32) (result i32)))
  (import "vkrt_v1" "sync" (func $sync (result i32)))
  (import "vkrt_v1" "memory_usage" (func $usage (param i32) (result i32)))
  (import "vkrt_v1" "memory_report" (func $report (param i32 i32 i32) (result i32)))
  (import "vkrt_v1" "memory_record" (func $record (param i32 i32) (result i32)))
  (import "vkrt_v1" "memory_install" (func $install (param i32 i32) (result i32)))
  (import "vkrt_v1" "persistent_begin" (func $pbegin (result i32)))
  (import "vkrt_v1" "persistent_end" (func $pend (result i32)))
  (import "vkrt_v1" "is_dry_run" (func $dry (param i32) (result i32)))
  (import "vkrt_v1" "last_error" (func $lasterr (param i32 i32 i32) (result i32)))
  (import "wasi_snapshot_preview1" "proc_exit" (func $exit (param i32)))
  (memory (export "memory") 1)
  (func $h0 (result i32) (i32.load (i32.const 0)))
  (func $h1 (result i32) (i32.load (i32.const 4)))
`

// watPreludeWithWrite is watPrelude with WASI's fd_write as $fdw, for a
// guest that writes what it learns to standard output.
var watPreludeWithWrite = strings.Replace(watPrelude, `(memory (export "memory") 1)`,
	`(import "wasi_snapshot_preview1" "fd_write" (func $fdw (param i32 i32 i32 i32) (result i32))) (memory (export "memory") 1)`, 1)

// guestWAT is a guest of the prelude, extra definitions and a _start body.
func guestWAT(t testing.TB, extra, body string) []byte {
	return wat(t, watPrelude+extra+"\n  (func (export \"_start\")\n"+body+"))")
}

// wat assembles WebAssembly text.
func wat(t testing.TB, src string) []byte { return wasmtest.WAT(t, src) }

// buildGuest builds a Go guest (a package path from the module root) for
// wasip1.
func buildGuest(t testing.TB, pkg string) []byte { return wasmtest.Go(t, pkg) }

// compile compiles wasm on h, failing the test if h refuses it.
func compile(t testing.TB, h *Host, wasm []byte) *Module {
	t.Helper()
	m, err := h.Compile(context.Background(), wasm)
	require.NoError(t, err)
	t.Cleanup(func() { m.Close(context.Background()) })
	return m
}

// liveBuffers is how many live buffers every stream of c holds.
func liveBuffers(c *client.Client) uint64 {
	return c.MemoryUsage(context.Background()).NumberAllocs
}
