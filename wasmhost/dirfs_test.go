package wasmhost

import (
	"context"
	"errors"
	"fmt"
	"io/fs"
	"os"
	"path/filepath"
	"syscall"
	"testing"
	"time"

	"github.com/stretchr/testify/require"
)

// readerWAT opens name in the first granted directory and reads up to 64
// bytes of it: it exits with 100 plus the errno where the open fails, 200
// plus it where the read does, and the bytes read otherwise.
func readerWAT(name string) string {
	return fmt.Sprintf(`(module
  (import "wasi_snapshot_preview1" "path_open" (func $open (param i32 i32 i32 i32 i32 i64 i64 i32 i32) (result i32)))
  (import "wasi_snapshot_preview1" "fd_read" (func $read (param i32 i32 i32 i32) (result i32)))
  (import "wasi_snapshot_preview1" "proc_exit" (func $exit (param i32)))
  (memory (export "memory") 1)
  (data (i32.const 0) %q)
  (func (export "_start") (local $e i32)
    (local.set $e (call $open (i32.const 3) (i32.const 1) (i32.const 0) (i32.const %d) (i32.const 0)
      (i64.const 2) (i64.const 0) (i32.const 0) (i32.const 512)))
    (if (local.get $e) (then (call $exit (i32.add (i32.const 100) (local.get $e)))))
    (i32.store (i32.const 520) (i32.const 1024))
    (i32.store (i32.const 524) (i32.const 64))
    (local.set $e (call $read (i32.load (i32.const 512)) (i32.const 520) (i32.const 1) (i32.const 528)))
    (if (local.get $e) (then (call $exit (i32.add (i32.const 200) (local.get $e)))))
    (call $exit (i32.load (i32.const 528)))))`, name, len(name))
}

// A granted directory reads its regular files and directories only, and
// nothing outside it: a FIFO in it held the guest inside the host's open,
// past the run's deadline and the host's Close (now it opens, to be
// listed and stat'd, and reads nothing), and a symbolic link in it led to
// any file of the host.
func TestAGrantedDirectoryReadsItsRegularFilesOnly(t *testing.T) {
	dir, outside := t.TempDir(), t.TempDir()
	require.NoError(t, os.WriteFile(filepath.Join(dir, "data"), []byte("hello"), 0o644))
	require.NoError(t, os.WriteFile(filepath.Join(outside, "secret"), []byte("not yours"), 0o644))
	require.NoError(t, os.Symlink(filepath.Join(outside, "secret"), filepath.Join(dir, "out")))
	require.NoError(t, os.Symlink("data", filepath.Join(dir, "in")))
	fifo := filepath.Join(dir, "fifo")
	require.NoError(t, syscall.Mkfifo(fifo, 0o644))

	c := openClient(t)
	h := newHost(t, context.Background(), c)
	run := func(name string) (uint32, error) {
		t.Helper()
		m := compile(t, h, wat(t, readerWAT(name)))
		done := make(chan error, 1)
		go func() {
			_, err := h.Run(context.Background(), m, WithReadOnlyDir(dir, "/data"), WithDeadline(time.Minute))
			done <- err
		}()
		select {
		case err := <-done:
			var exit *ExitError
			if err == nil {
				return 0, nil
			}
			if !errors.As(err, &exit) {
				return 0, err
			}
			return exit.Code, nil
		case <-time.After(10 * time.Second):
			// Let a guest blocked opening the FIFO go, so the test ends.
			if w, err := os.OpenFile(fifo, os.O_WRONLY, 0); err == nil {
				w.Close()
			}
			<-done
			return 0, fmt.Errorf("%s: the guest was still inside the host's open after 10 s", name)
		}
	}

	code, err := run("data")
	require.NoError(t, err)
	require.Equal(t, uint32(5), code, "the regular file's 5 bytes")
	code, err = run("in")
	require.NoError(t, err)
	require.Equal(t, uint32(5), code, "a link to a file inside reads it")
	for _, name := range []string{"out", "../" + filepath.Base(outside) + "/secret"} {
		code, err = run(name)
		require.NoError(t, err)
		require.True(t, code > 100 && code < 200, "%s: the open was not refused (exit %d)", name, code)
	}
	code, err = run("fifo")
	require.NoError(t, err)
	require.True(t, code > 200 && code < 300, "fifo: the read was not refused (exit %d)", code)
}

// A granted directory that cannot be opened is refused as the host's
// option (ErrInvalidOption) before anything is made for the guest: it was
// ErrRefused, which blames the module.
func TestAGrantedDirectoryThatCannotBeOpenedIsAnInvalidOption(t *testing.T) {
	c := openClient(t)
	h := newHost(t, context.Background(), c)
	m := compile(t, h, guestWAT(t, "", `(drop (call $sync))`))
	streams := len(c.Streams())
	missing := filepath.Join(t.TempDir(), "missing")
	res, err := h.Run(context.Background(), m, WithReadOnlyDir(t.TempDir(), "/ok"), WithReadOnlyDir(missing, "/data"))
	require.ErrorIs(t, err, ErrInvalidOption)
	require.ErrorIs(t, err, fs.ErrNotExist)
	require.NotErrorIs(t, err, ErrRefused, "the module is not to blame")
	require.ErrorContains(t, err, "wasmhost: invalid option: WithReadOnlyDir: the directory granted at /data: ")
	require.Nil(t, res)
	require.Len(t, c.Streams(), streams, "no stream was made for the guest")
}

// A directory grant no guest can be given, an empty or NUL-holding path, a
// relative or unclean guest path (which wazero took for another) or a
// guest path granted twice (the later hid the earlier), is refused as the
// host's option (ErrInvalidOption), naming the path and why: by New where
// WithDefaults gives it, by Run before anything is made for the guest.
// New took each of them, and Run all but the empty host directory.
func TestAGrantedDirectoryOfABadPathIsAnInvalidOption(t *testing.T) {
	dir, other := t.TempDir(), t.TempDir()
	for _, tc := range []struct {
		name string
		opts []RunOption
		want string
	}{
		{"empty host", []RunOption{WithReadOnlyDir("", "/data")}, `the host directory for "/data" is empty`},
		{"NUL host", []RunOption{WithReadOnlyDir(dir+"\x00x", "/data")}, `the host directory "` + dir + `\x00x" holds a NUL byte`},
		{"empty guest", []RunOption{WithReadOnlyDir(dir, "")}, `the guest path for "` + dir + `" is empty; want an absolute path ("/" for the root)`},
		{"NUL guest", []RunOption{WithReadOnlyDir(dir, "/da\x00ta")}, `the guest path "/da\x00ta" holds a NUL byte`},
		{"relative guest", []RunOption{WithReadOnlyDir(dir, "data")}, `the guest path "data" is relative; want an absolute path such as "/data"`},
		{"dot guest", []RunOption{WithReadOnlyDir(dir, "./data")}, `the guest path "./data" is relative`},
		{"trailing slash", []RunOption{WithReadOnlyDir(dir, "/data/")}, `the guest path "/data/" is not clean; want "/data"`},
		{"dot-dot", []RunOption{WithReadOnlyDir(dir, "/a/../b")}, `the guest path "/a/../b" is not clean; want "/b"`},
		{"twice", []RunOption{WithReadOnlyDir(dir, "/data"), WithReadOnlyDir(other, "/data")},
			`the guest path "/data" is granted twice, "` + dir + `" and "` + other + `"`},
	} {
		t.Run(tc.name, func(t *testing.T) {
			c := openClient(t)
			h, err := New(context.Background(), c, WithDefaults(tc.opts...))
			require.ErrorIs(t, err, ErrInvalidOption)
			require.ErrorContains(t, err, "WithReadOnlyDir: "+tc.want)
			require.Nil(t, h)

			h = newHost(t, context.Background(), c)
			m := compile(t, h, guestWAT(t, "", `(drop (call $sync))`))
			streams := len(c.Streams())
			res, err := h.Run(context.Background(), m, tc.opts...)
			require.ErrorIs(t, err, ErrInvalidOption)
			require.NotErrorIs(t, err, ErrRefused, "the module is not to blame")
			require.ErrorContains(t, err, "wasmhost: invalid option: WithReadOnlyDir: "+tc.want)
			require.Nil(t, res)
			require.Len(t, c.Streams(), streams, "no stream was made for the guest")
		})
	}
	// One grant at a guest path by the host's defaults and another by Run's
	// options is the same guest path granted twice.
	c := openClient(t)
	h := newHost(t, context.Background(), c, WithDefaults(WithReadOnlyDir(dir, "/data")))
	m := compile(t, h, guestWAT(t, "", `(drop (call $sync))`))
	_, err := h.Run(context.Background(), m, WithReadOnlyDir(other, "/data"))
	require.ErrorIs(t, err, ErrInvalidOption)
	require.ErrorContains(t, err, "is granted twice")
	_, err = h.Run(context.Background(), m, WithReadOnlyDir(other, "/other"))
	require.NoError(t, err, "a second guest path takes another directory")
	_, err = h.Run(context.Background(), m, WithReadOnlyDir(other, "/"))
	require.NoError(t, err, "the root is a guest path")
}
