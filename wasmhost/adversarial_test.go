package wasmhost

import (
	"context"
	"errors"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	"github.com/stretchr/testify/require"
)

// endCase is a guest that ends badly, or is refused, and how.
type endCase struct {
	name   string
	wasm   func(t testing.TB) []byte
	opts   []RunOption
	host   []Option
	want   error  // what Compile or Run fails with
	detail string // a part of the error's message
	check  func(t *testing.T, res *Result)
}

func watGuest(extra, body string) func(t testing.TB) []byte {
	return func(t testing.TB) []byte { return guestWAT(t, extra, body) }
}

func rawWAT(src string) func(t testing.TB) []byte {
	return func(t testing.TB) []byte { return wat(t, src) }
}

const holdThree = `(drop (call $create (i64.const 4096) (i32.const 0))) (drop (call $create (i64.const 65536) (i32.const 4))) (drop (call $create (i64.const 16) (i32.const 8)))`

func endCases() []endCase {
	held := func(n uint64) func(t *testing.T, res *Result) {
		return func(t *testing.T, res *Result) {
			require.Equal(t, n, res.PeakHandles, "the guest held buffers when it ended")
		}
	}
	pages := func(n uint32) func(t *testing.T, res *Result) {
		return func(t *testing.T, res *Result) {
			require.Equal(t, n, res.MemoryPages, "the size the guest's memory starts at")
		}
	}
	return []endCase{
		{name: "infinite loop under a deadline, holding buffers", wasm: watGuest("", holdThree+`(loop $l (br $l))`),
			opts: []RunOption{WithDeadline(300 * time.Millisecond)}, want: ErrDeadline, check: held(3)},
		{name: "infinite loop of host calls under a deadline", wasm: watGuest("", `(loop $l (drop (call $sync)) (br $l))`),
			opts: []RunOption{WithDeadline(300 * time.Millisecond)}, want: ErrDeadline},
		{name: "memory bomb", host: []Option{WithMaxMemoryPages(256)},
			wasm: watGuest("", holdThree+`(loop $l (br_if $l (i32.ne (memory.grow (i32.const 1)) (i32.const -1)))) unreachable`),
			want: ErrTrapped, detail: "unreachable", check: func(t *testing.T, res *Result) {
				require.Equal(t, uint32(256), res.MemoryPages, "memory grew to the limit and no further")
			}},
		{name: "memory above the limit from the start", host: []Option{WithMaxMemoryPages(256)},
			wasm: rawWAT(`(module (memory 300 300) (func (export "_start")))`), want: &MemoryLimitError{Pages: 300, MaxPages: 256},
			detail: "its memory starts at 300 pages of 64 KiB (19660800 B); the host allows at most 256 pages (16777216 B)"},
		{name: "a memory at the host's limit, with a larger maximum", host: []Option{WithMaxMemoryPages(256)}, wasm: rawWAT(`(module (memory 256 1000) (func (export "_start")))`)},
		{name: "trap holding buffers", wasm: watGuest("", holdThree+`unreachable`), want: ErrTrapped, check: held(3)},
		{name: "deep recursion", wasm: watGuest(`(func $deep (param i64) (call $deep (i64.add (local.get 0) (i64.const 1))))`, holdThree+`(call $deep (i64.const 0))`),
			want: ErrTrapped, detail: "stack overflow", check: held(3)},
		{name: "load past the end of memory", wasm: watGuest("", `(drop (i32.load (i32.const 70000)))`), want: ErrTrapped, detail: "out of bounds"},
		{name: "integer division by zero", wasm: watGuest("", `(drop (i32.div_u (i32.const 1) (i32.const 0)))`), want: ErrTrapped, detail: "divide by zero"},
		{name: "proc_exit with a code, holding buffers", wasm: watGuest("", holdThree+`(call $exit (i32.const 7))`),
			want: &ExitError{Code: 7}, check: held(3)},
		{name: "proc_exit(0) is success", wasm: watGuest("", holdThree+`(call $exit (i32.const 0))`), check: held(3)},
		{name: "proc_exit with the code wazero gives a deadline, no deadline set", wasm: watGuest("", holdThree+`(call $exit (i32.const 0xefffffff))`),
			want: &ExitError{Code: 0xefffffff}, check: held(3)},
		{name: "trap in the start function, holding buffers", wasm: watGuest(`(func $init `+holdThree+` unreachable) (start $init)`, ""),
			want: ErrTrapped, detail: "unreachable", check: held(3)},
		{name: "proc_exit in the start function, holding buffers", wasm: watGuest(`(func $init `+holdThree+` (call $exit (i32.const 7))) (start $init)`, ""),
			want: &ExitError{Code: 7}, check: held(3)},
		{name: "proc_exit(0) in the start function is success", wasm: watGuest(`(func $init (call $exit (i32.const 0))) (start $init)`, "unreachable")},
		{name: "trap in the start function, with a memory of 3 pages", wasm: rawWAT(`(module (memory 3) (func $s unreachable) (start $s) (func (export "_start")))`),
			want: ErrTrapped, detail: "unreachable", check: pages(3)},
		{name: "proc_exit in the start function, with a memory of 3 pages",
			wasm: rawWAT(`(module (import "wasi_snapshot_preview1" "proc_exit" (func $exit (param i32))) (memory 3) (func $s (call $exit (i32.const 7))) (start $s) (func (export "_start")))`),
			want: &ExitError{Code: 7}, check: pages(3)},
		// The host sees no memory of a module whose start function ended
		// it: what that function grew is not counted.
		{name: "a start function that grows its memory, then traps", wasm: rawWAT(`(module (memory 3) (func $s (drop (memory.grow (i32.const 2))) unreachable) (start $s) (func (export "_start")))`),
			want: ErrTrapped, detail: "unreachable", check: pages(3)},
		{name: "missing import of vkrt_v1", wasm: rawWAT(`(module (import "vkrt_v1" "buffer_resize" (func (param i32 i64) (result i32))) (func (export "_start")))`),
			want: ErrRefused, detail: "vkrt_v1.buffer_resize, which ABI version 1 does not have"},
		{name: "missing import of another module", wasm: rawWAT(`(module (import "env" "abort" (func)) (func (export "_start")))`),
			want: ErrRefused, detail: "it imports env.abort; this host serves vkrt_v1 and wasi_snapshot_preview1 only"},
		{name: "import of another ABI version", wasm: rawWAT(`(module (import "vkrt_v2" "sync" (func (result i32))) (func (export "_start")))`),
			want: ErrRefused, detail: "it imports vkrt_v2.sync; this host serves vkrt_v1"},
		{name: "wrong import signature", wasm: rawWAT(`(module (import "vkrt_v1" "buffer_create" (func (param i32 i32) (result i32))) (func (export "_start")))`),
			want: ErrRefused, detail: "vkrt_v1.buffer_create as (i32 i32) -> (i32), the ABI's is (i64 i32) -> (i32)"},
		{name: "wrong result type", wasm: rawWAT(`(module (import "vkrt_v1" "sync" (func (result i64))) (func (export "_start")))`),
			want: ErrRefused, detail: "vkrt_v1.sync"},
		{name: "missing import of WASI", wasm: rawWAT(`(module (import "wasi_snapshot_preview1" "sock_listen" (func)) (func (export "_start")))`),
			want: ErrRefused, detail: "it imports wasi_snapshot_preview1.sock_listen, which this host's WASI does not have"},
		{name: "wrong WASI signature", wasm: rawWAT(`(module (import "wasi_snapshot_preview1" "fd_write" (func (param i32) (result i32))) (func (export "_start")))`),
			want: ErrRefused, detail: "it imports wasi_snapshot_preview1.fd_write as (i32) -> (i32), the host's is (i32 i32 i32 i32) -> (i32)"},
		{name: "a WASI function of no result, imported with one", wasm: rawWAT(`(module (import "wasi_snapshot_preview1" "proc_exit" (func (param i32) (result i32))) (func (export "_start")))`),
			want: ErrRefused, detail: "it imports wasi_snapshot_preview1.proc_exit as (i32) -> (i32), the host's is (i32) -> ()"},
		{name: "imported global of vkrt_v1", wasm: rawWAT(`(module (import "vkrt_v1" "calls" (global i32)) (func (export "_start")))`),
			want: ErrRefused, detail: "it imports global vkrt_v1.calls; the host provides functions only"},
		{name: "imported global of another module", wasm: rawWAT(`(module (import "env" "g" (global (mut i64))) (func (export "_start")))`),
			want: ErrRefused, detail: "it imports global env.g; the host provides functions only"},
		{name: "no _start", wasm: rawWAT(`(module (func (export "main")))`), want: ErrRefused, detail: "no _start"},
		{name: "_start with parameters and a result", wasm: rawWAT(`(module (func (export "_start") (param i32 i64) (result f32) (f32.const 0)))`),
			want: ErrRefused, detail: "its _start is (i32 i64) -> (f32); the host calls it as () -> ()"},
		{name: "imported memory", wasm: rawWAT(`(module (import "env" "memory" (memory 1)) (func (export "_start")))`), want: ErrRefused, detail: "memory env.memory"},
		{name: "not WebAssembly", wasm: func(testing.TB) []byte { return []byte("#!/bin/sh\necho hello\n") }, want: ErrRefused, detail: "not a WebAssembly binary"},
		{name: "empty file", wasm: func(testing.TB) []byte { return nil }, want: ErrRefused},
		{name: "WebAssembly magic, then garbage", wasm: func(testing.TB) []byte { return []byte("\x00asm\x01\x00\x00\x00\xff\xff\xff\xff") }, want: ErrRefused},
		{name: "table.grow", wasm: rawWAT(`(module (table 1 funcref) (func $grow (param funcref) (drop (table.grow 0 (local.get 0) (i32.const 1)))) (func (export "_start")))`),
			want: ErrRefused, detail: `table.grow invalid as feature "reference-types" is disabled`},
		{name: "table.fill", wasm: rawWAT(`(module (table 1 funcref) (func $fill (param funcref) (table.fill 0 (i32.const 0) (local.get 0) (i32.const 1))) (func (export "_start")))`),
			want: ErrRefused, detail: `table.fill invalid as feature "reference-types" is disabled`},
		{name: "ref.null", wasm: rawWAT(`(module (func (export "_start") (drop (ref.null func))))`),
			want: ErrRefused, detail: `ref.null invalid as feature "reference-types" is disabled`},
		{name: "two tables", wasm: rawWAT(`(module (table 1 funcref) (table 1 funcref) (func (export "_start")))`),
			want: ErrRefused, detail: `at most one table allowed in module as feature "reference-types" is disabled`},
		{name: "an imported table", wasm: rawWAT(`(module (import "wasi_snapshot_preview1" "table" (table 1 funcref)) (func (export "_start")))`),
			want: ErrRefused, detail: "it imports table wasi_snapshot_preview1.table; a guest defines its own"},
		{name: "a table past the default limit", wasm: rawWAT(`(module (table 1048577 funcref) (func (export "_start")))`),
			want: ErrRefused, detail: "it declares a table of 1048577 entries (8388616 B of host memory); the host allows at most 1048576"},
		{name: "a table past the host's limit", host: []Option{WithMaxTableEntries(65536)}, wasm: rawWAT(`(module (table 65537 65537 funcref) (func (export "_start")))`),
			want: ErrRefused, detail: "it declares a table of 65537 entries (524296 B of host memory); the host allows at most 65536"},
		{name: "a table at the host's limit, called through", host: []Option{WithMaxTableEntries(65536)}, wasm: rawWAT(`(module
			(import "wasi_snapshot_preview1" "proc_exit" (func $exit (param i32)))
			(type $answer (func (result i32)))
			(table 65536 funcref) (elem (i32.const 65534) $six $seven)
			(func $six (result i32) (i32.const 6)) (func $seven (result i32) (i32.const 7))
			(func (export "_start") (call $exit (call_indirect (type $answer) (i32.const 65535)))))`),
			want: &ExitError{Code: 7}},
		{name: "a memory starting past the default limit", wasm: rawWAT(`(module (memory 16385) (func (export "_start")))`),
			want:   &MemoryLimitError{Pages: 16385, MaxPages: DefaultMaxMemoryPages},
			detail: "its memory starts at 16385 pages of 64 KiB (1073807360 B); the host allows at most 16384 pages (1073741824 B)"},
		{name: "a table with a maximum of 2^32 - 1 (nothing can grow it)", wasm: rawWAT(`(module (table 1 0xffffffff funcref) (func (export "_start")))`)},
		{name: "100,000 handles, left for the host to free", wasm: watGuest("", `(local $i i32) (local $failed i32)
			(loop $l
				(if (call $create (i64.const 16) (i32.const 0)) (then (local.set $failed (i32.add (local.get $failed) (i32.const 1)))))
				(local.set $i (i32.add (local.get $i) (i32.const 1)))
				(br_if $l (i32.lt_u (local.get $i) (i32.const 100000))))
			(call $exit (local.get $failed))`), check: held(100000)},
		{name: "100,000 handles against a quota of 1,000", opts: []RunOption{WithMaxHandles(1000)}, wasm: watGuest("", `(local $i i32) (local $failed i32)
			(loop $l
				(if (call $create (i64.const 16) (i32.const 0)) (then (local.set $failed (i32.add (local.get $failed) (i32.const 1)))))
				(local.set $i (i32.add (local.get $i) (i32.const 1)))
				(br_if $l (i32.lt_u (local.get $i) (i32.const 100000))))
			(call $exit (local.get $failed))`), want: &ExitError{Code: 99000}, check: held(1000)},
	}
}

// TestGuestsEndAlone runs guests that loop, trap, blow their memory,
// recurse, exit or are refused, each next to a well-behaved guest on the
// same host (the MLP example; with -short a guest that writes, frees and
// checks buffers read back zeroed): each gets its error, everything it held
// is freed, and the neighbour is unaffected.
func TestGuestsEndAlone(t *testing.T) {
	c := openClient(t)
	var neighbourWasm []byte
	if testing.Short() {
		neighbourWasm = guestWAT(t, isolationWAT, `(call $fillAndFree) (call $checkZeros)`)
	} else {
		neighbourWasm = buildGuest(t, "examples/mlp")
	}
	for _, tc := range endCases() {
		t.Run(tc.name, func(t *testing.T) {
			h := newHost(t, context.Background(), c, tc.host...)
			neighbour := compile(t, h, neighbourWasm)
			var wg sync.WaitGroup
			var neighbourErr error
			wg.Add(1)
			go func() {
				defer wg.Done()
				_, neighbourErr = h.Run(context.Background(), neighbour)
			}()

			var res *Result
			m, err := h.Compile(context.Background(), tc.wasm(t))
			if err == nil {
				res, err = h.Run(context.Background(), m, tc.opts...)
				m.Close(context.Background())
			}
			wg.Wait()
			require.NoError(t, neighbourErr, "the guest next to it ran to the end and checked its numbers")
			switch want := tc.want.(type) {
			case nil:
				require.NoError(t, err)
			case *ExitError:
				var exit *ExitError
				require.ErrorAs(t, err, &exit)
				require.Equal(t, want.Code, exit.Code)
				require.Equal(t, want.Code, res.ExitCode)
			case *MemoryLimitError:
				var limit *MemoryLimitError
				require.ErrorAs(t, err, &limit)
				require.Equal(t, want, limit)
				require.ErrorIs(t, err, ErrRefused)
			default:
				require.ErrorIs(t, err, want)
			}
			if tc.detail != "" {
				require.ErrorContains(t, err, tc.detail)
			}
			if tc.check != nil {
				require.NotNil(t, res)
				tc.check(t, res)
			}
			require.Zero(t, liveBuffers(c), "nothing the guests held is left")
		})
	}
}

// isolationWAT: $fillAndFree fills a buffer of every size with 0xab, and frees
// it; $checkZeros makes buffers of the same sizes and exits 1 if any byte of
// them is not zero. Between the two, in one guest or two, freed memory is
// reused.
const isolationWAT = `
  (func $sizes (param $i i32) (result i64) (i64.shl (i64.const 256) (i64.extend_i32_u (local.get $i))))
  (func $fillAndFree (local $i i32)
    (memory.fill (i32.const 4096) (i32.const 0xab) (i32.const 32768))
    (loop $l
      (drop (call $create (call $sizes (local.get $i)) (i32.const 0)))
      (if (call $write (call $h0) (i64.const 0) (i32.const 4096) (i32.wrap_i64 (call $sizes (local.get $i)))) (then unreachable))
      (drop (call $free (call $h0)))
      (local.set $i (i32.add (local.get $i) (i32.const 1)))
      (br_if $l (i32.lt_u (local.get $i) (i32.const 8)))))
  (func $checkZeros (local $i i32) (local $p i32)
    (loop $l
      (if (call $create (call $sizes (local.get $i)) (i32.const 0)) (then unreachable))
      (memory.fill (i32.const 4096) (i32.const 0x5a) (i32.const 32768))
      (if (call $read (call $h0) (i64.const 0) (i32.const 4096) (i32.wrap_i64 (call $sizes (local.get $i)))) (then unreachable))
      (local.set $p (i32.const 4096))
      (loop $bytes
        (if (i32.load8_u (local.get $p)) (then (call $exit (i32.const 1))))
        (local.set $p (i32.add (local.get $p) (i32.const 1)))
        (br_if $bytes (i32.lt_u (local.get $p) (i32.add (i32.const 4096) (i32.wrap_i64 (call $sizes (local.get $i)))))))
      (local.set $i (i32.add (local.get $i) (i32.const 1)))
      (br_if $l (i32.lt_u (local.get $i) (i32.const 8)))))
`

// TestNoGuestSeesAnotherGuestsBytes: buffers another guest, or an earlier
// buffer of the same guest, filled and freed read as zeros, whether the
// guests run one after the other or side by side.
func TestNoGuestSeesAnotherGuestsBytes(t *testing.T) {
	c := openClient(t)
	h := newHost(t, context.Background(), c)
	writer := compile(t, h, guestWAT(t, isolationWAT, `(call $fillAndFree)`))
	checker := compile(t, h, guestWAT(t, isolationWAT, `(call $checkZeros)`))
	both := compile(t, h, guestWAT(t, isolationWAT, `(call $fillAndFree) (call $checkZeros)`))
	s, err := c.NewStream()
	require.NoError(t, err)
	defer s.Close()

	_, err = h.Run(context.Background(), both)
	require.NoError(t, err, "a guest's own freed buffers come back zeroed")
	_, err = h.Run(context.Background(), writer, OnStream(s))
	require.NoError(t, err)
	_, err = h.Run(context.Background(), checker, OnStream(s))
	require.NoError(t, err, "a guest on the same stream sees zeros where the last one wrote")

	var wg sync.WaitGroup
	errs := make([]error, 8)
	for i := range errs {
		wg.Add(1)
		go func() {
			defer wg.Done()
			m := writer
			if i%2 == 1 {
				m = checker
			}
			for range 5 {
				if _, err := h.Run(context.Background(), m); err != nil {
					errs[i] = err
					return
				}
			}
		}()
	}
	wg.Wait()
	require.NoError(t, errors.Join(errs...))
	require.Zero(t, liveBuffers(c))
}

// TestOtherGuestsHandles: a guest using the handles another guest of the
// same host holds at that moment gets EBADF; handles are per guest. The
// intruder exits with the two statuses it got, packed as 100a + b.
func TestOtherGuestsHandles(t *testing.T) {
	c := openClient(t)
	h := newHost(t, context.Background(), c)
	holder := compile(t, h, guestWAT(t, "", holdThree+`(loop $l (br $l))`))
	intruder := compile(t, h, guestWAT(t, "", `(call $exit (i32.add
		(i32.mul (call $free (i32.const 1048578)) (i32.const 100))
		(call $read (i32.const 1048579) (i64.const 0) (i32.const 0) (i32.const 16))))`))
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan error)
	go func() {
		_, err := h.Run(ctx, holder)
		done <- err
	}()
	require.Eventually(t, func() bool { return liveBuffers(c) == 3 }, 10*time.Second, time.Millisecond)
	_, err := h.Run(context.Background(), intruder)
	var exit *ExitError
	require.ErrorAs(t, err, &exit)
	require.Equal(t, uint32(100*EBADF+EBADF), exit.Code, "EBADF for both of the holder's handles")
	require.Equal(t, uint64(3), liveBuffers(c), "the holder's buffers are untouched")
	cancel()
	err = <-done
	require.ErrorIs(t, err, ErrCanceled, "the caller canceled the run; no deadline passed")
	require.NotErrorIs(t, err, ErrDeadline)
	require.ErrorIs(t, err, context.Canceled)
	require.Zero(t, liveBuffers(c))
}

// TestLargestGuestMemory: a host grants a guest at most MaxMemoryPages, one
// page short of 4 GiB (wazero traps every load and store of a 4 GiB memory,
// and a range ending at 2^32 wraps a u32 sum). A guest holding that much
// reaches its last bytes through the host, no further, and cannot grow. A
// limit outside 1 to MaxMemoryPages, like a compilation cache directory
// that is a file, fails New with ErrInvalidOption (both were of no kind).
func TestLargestGuestMemory(t *testing.T) {
	c := openClient(t)
	_, err := New(context.Background(), c, WithMaxMemoryPages(65536))
	require.ErrorContains(t, err, "memory limit of 65536 pages: want 1 to 65535")
	require.ErrorIs(t, err, ErrInvalidOption)
	_, err = New(context.Background(), c, WithMaxMemoryPages(0))
	require.EqualError(t, err, "wasmhost: invalid option: WithMaxMemoryPages: memory limit of 0 pages: want 1 to 65535")
	file := filepath.Join(t.TempDir(), "file")
	require.NoError(t, os.WriteFile(file, nil, 0o644))
	_, err = New(context.Background(), c, WithCompilationCacheDir(file))
	require.ErrorIs(t, err, ErrInvalidOption, "a cache directory that is a file")
	require.EqualError(t, err, "wasmhost: invalid option: WithCompilationCacheDir: mkdir "+file+": not a directory", "in Go's words, not wazero's")
	require.ErrorIs(t, err, syscall.ENOTDIR)

	h, log := newLoggedHost(t, c, WithMaxMemoryPages(MaxMemoryPages))
	src := strings.Replace(watPrelude, `(memory (export "memory") 1)`, `(memory (export "memory") 65535)`, 1) + `
  (func (export "_start")
    (if (i32.ne (memory.grow (i32.const 1)) (i32.const -1)) (then unreachable))
    (drop (call $create (i64.const 16) (i32.const 0)))
    (i32.store (i32.const 0xfffefffc) (i32.const 0x5a5a5a5a))
    (drop (call $write (call $h0) (i64.const 0) (i32.const 0xfffefff0) (i32.const 16)))
    (i32.store (i32.const 0xfffefffc) (i32.const 0))
    (drop (call $read (call $h0) (i64.const 0) (i32.const 0xfffefff0) (i32.const 16)))
    (if (i32.ne (i32.load (i32.const 0xfffefffc)) (i32.const 0x5a5a5a5a)) (then unreachable))
    (drop (call $read (call $h0) (i64.const 0) (i32.const 0xfffefff1) (i32.const 16)))))`
	res, err := h.Run(context.Background(), compile(t, h, wat(t, src)))
	require.NoError(t, err)
	require.Equal(t, uint32(MaxMemoryPages), res.MemoryPages)
	require.Equal(t, create16Log+`
==> vkrt_v1.buffer_write(handle=1048577,offset=0,src=-65552,len=16)
<== status=0
==> vkrt_v1.buffer_read(handle=1048577,offset=0,dst=-65552,len=16)
<== status=0
==> vkrt_v1.buffer_read(handle=1048577,offset=0,dst=-65551,len=16)
<== status=21`, hostCalls(log.String()))
	require.Contains(t, res.LastError, "[4294901745, 4294901761) is outside the guest's 4294901760 B of memory")
}
