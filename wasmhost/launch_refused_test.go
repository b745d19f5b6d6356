package wasmhost

import (
	"context"
	"encoding/binary"
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/vkrt/vkrt/client"
	"github.com/vkrt/vkrt/runtime/environment"
	"github.com/vkrt/vkrt/wasmhost/guest"
)

// watBytes writes b as a WAT string literal.
func watBytes(b []byte) string {
	var s strings.Builder
	for _, c := range b {
		fmt.Fprintf(&s, `\%02x`, c)
	}
	return s.String()
}

// pushWords is push constants of 32-bit words v.
func pushWords(v ...uint32) []byte {
	var b []byte
	for _, w := range v {
		b = binary.LittleEndian.AppendUint32(b, w)
	}
	return b
}

// launchTellingLastError is a guest that makes two buffers, 256 B and
// 64 B (handles 0x100001 and 0x100002), launches what descriptor desc
// describes, and writes what last_error then says to standard output; the
// launch must answer status, unless it is ESUCCESS (any answer will do).
func launchTellingLastError(t *testing.T, desc []byte, status Errno) []byte {
	t.Helper()
	check := fmt.Sprintf(`(if (i32.ne (call $launch (i32.const 64) (i32.const %d)) (i32.const %d)) (then unreachable))`, len(desc), status)
	if status == ESUCCESS {
		check = fmt.Sprintf(`(drop (call $launch (i32.const 64) (i32.const %d)))`, len(desc))
	}
	return wat(t, watPreludeWithWrite+fmt.Sprintf(`(data (i32.const 64) "%s")
  (func (export "_start")
    (drop (call $create (i64.const 256) (i32.const 0)))
    (drop (call $create (i64.const 64) (i32.const 4)))
    %s
    (if (i32.ne (call $lasterr (i32.const 1024) (i32.const 4096) (i32.const 16)) (i32.const 0)) (then unreachable))
    (i32.store (i32.const 24) (i32.const 1024))
    (i32.store (i32.const 28) (i32.load (i32.const 16)))
    (drop (call $fdw (i32.const 1) (i32.const 24) (i32.const 1) (i32.const 32)))))`, watBytes(desc), check))
}

// A launch the kernel's checks refuse is told to the guest on its own
// handles, not on the client's buffer ids as storages, which the guest
// cannot map to its handles and which number the host's buffers. The
// host's own account (Result.LastError) keeps the client's words.
func TestRefusedLaunchNamesGuestHandles(t *testing.T) {
	c := openClient(t)
	h := newHost(t, context.Background(), c)
	// The guest's first buffers are handles 0x100001 and 0x100002.
	a, b := guest.BufferOf(0x100001, 256), guest.BufferOf(0x100002, 64)
	for _, tc := range []struct {
		name   string
		launch []guest.Launch
		want   string
	}{
		{"undersized", []guest.Launch{{Kernel: "fill", Grid: [3]uint32{1, 1, 1}, Push: pushWords(32, 7), Buffers: []*guest.Buffer{b}}},
			`launch: invalid dispatch of kernel "fill": binding 0 (out): handle 0x100002 [0, 64) holds 64 B, the push constants {n=32 value=7} call for 128 B`},
		{"aliased", []guest.Launch{
			{Kernel: "fill", Grid: [3]uint32{1, 1, 1}, Push: pushWords(16, 7), Buffers: []*guest.Buffer{b}},
			{Kernel: "transpose", Grid: [3]uint32{1, 1, 1}, Push: pushWords(8, 8), Buffers: []*guest.Buffer{a, a}}},
			`launch: op 1 of 2: invalid dispatch of kernel "transpose": binding 1 (out): handle 0x100001 [0, 256), written, and binding 0 (x): handle 0x100001 [0, 256) share bytes`},
	} {
		t.Run(tc.name, func(t *testing.T) {
			desc, err := guest.AppendDescriptor(nil, tc.launch...)
			require.NoError(t, err)
			wasm := launchTellingLastError(t, desc, EINVAL)
			var out strings.Builder
			res, err := h.Run(context.Background(), compile(t, h, wasm), WithStdout(&out))
			require.NoError(t, err)
			require.Equal(t, uint64(1), res.FailedCalls)
			require.Contains(t, out.String(), tc.want)
			require.NotContains(t, out.String(), "storage")
			require.Contains(t, res.LastError, "storage", "the host's account names the client's storages")
		})
	}
}

// A record the host's environment refuses is told to the guest by its kind,
// without the host's words for it, which name the environment's files.
func TestRefusedRecordHidesHostPaths(t *testing.T) {
	dir := t.TempDir()
	c := openClient(t, client.WithEnvironment("wasmhost-test", environment.WithDir(dir)))
	// Removed under the open environment, the file refuses the record.
	require.NoError(t, os.Remove(filepath.Join(dir, "wasmhost-test.sqlite")))
	h := newHost(t, context.Background(), c)
	wasm := wat(t, watPreludeWithWrite+`(data (i32.const 64) "label")
  (func (export "_start")
    (drop (call $create (i64.const 64) (i32.const 0)))
    (if (i32.ne (call $record (i32.const 64) (i32.const 5)) (i32.const 29)) (then unreachable))
    (if (i32.ne (call $lasterr (i32.const 1024) (i32.const 4096) (i32.const 16)) (i32.const 0)) (then unreachable))
    (i32.store (i32.const 24) (i32.const 1024))
    (i32.store (i32.const 28) (i32.load (i32.const 16)))
    (drop (call $fdw (i32.const 1) (i32.const 24) (i32.const 1) (i32.const 32)))))`)
	var out strings.Builder
	res, err := h.Run(context.Background(), compile(t, h, wasm), WithStdout(&out))
	require.NoError(t, err)
	require.Equal(t, "memory_record: the host's environment refused the record (environment: file removed or replaced while open)", out.String())
	require.Contains(t, res.LastError, dir, "the host's account names the file")
}
