package main

import (
	"os"
	"path/filepath"
	"sync/atomic"
	"syscall"
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/vkrt/vkrt/internal/gzread"
)

// A pipe gives its bytes once: --layout /dev/stdin, or a shell's <(…),
// must read the same as the file it carries, whether that holds a plan,
// a gzipped plan or a layout.
func TestLayoutFromAPipeReadsAsTheFile(t *testing.T) {
	first, second := writeTrace(t, "first.trace", shortRun), writeTrace(t, "second.trace", longRun)
	dir := t.TempDir()
	planOut := filepath.Join(dir, "workload.plan")
	_, _, err := execute(t, "plan", first, "--out", planOut)
	require.NoError(t, err)
	planBytes, err := os.ReadFile(planOut)
	require.NoError(t, err)
	layoutOut := filepath.Join(dir, "layout.json")
	require.NoError(t, os.WriteFile(layoutOut, []byte(`"Direct"`), 0o644))
	layoutBytes, err := os.ReadFile(layoutOut)
	require.NoError(t, err)

	// pipe serves data through a named pipe, once, as a shell's pipe does:
	// a reader that opens it again reads nothing (and does not hang).
	pipe := func(name string, data []byte) string {
		path := filepath.Join(dir, name)
		require.NoError(t, syscall.Mkfifo(path, 0o600))
		var done atomic.Bool
		go func() {
			for i := 0; ; i++ {
				f, err := os.OpenFile(path, os.O_WRONLY, 0)
				if err != nil {
					return
				}
				if i == 0 && !done.Load() {
					_, _ = f.Write(data)
				}
				f.Close()
				if done.Load() {
					return
				}
			}
		}()
		// The writer waits for a reader: one that opens and goes lets it
		// see it is done.
		t.Cleanup(func() {
			done.Store(true)
			if f, err := os.OpenFile(path, os.O_RDONLY|syscall.O_NONBLOCK, 0); err == nil {
				f.Close()
			}
		})
		return path
	}
	for _, c := range []struct {
		name, file string
		data       []byte
	}{
		{"plan", planOut, planBytes},
		{"gzipped plan", planOut, gzread.Pack(planBytes)},
		{"layout", layoutOut, layoutBytes},
		{"gzipped layout", layoutOut, gzread.Pack(layoutBytes)},
	} {
		t.Run(c.name, func(t *testing.T) {
			fromFile, _, err := executeReplay(t, "--layout", c.file, "--json", second)
			require.NoError(t, err)
			fromPipe, _, err := executeReplay(t, "--layout", pipe(filepath.Base(t.Name()), c.data), "--json", second)
			require.NoError(t, err)
			require.Equal(t, parseReplayLines(t, fromFile), parseReplayLines(t, fromPipe))
		})
	}
}

// A layout flag's error names the flag given and says what was wrong once:
// a JSON literal that does not decode is said to be one.
func TestLayoutErrorsNameTheFlagAndTheFault(t *testing.T) {
	tr := writeTrace(t, "run.trace", shortRun)
	_, _, err := executeReplay(t, "--layout", "{", tr)
	require.EqualError(t, err, `--layout: memory: layout "{": not valid JSON: unexpected end of JSON input`)
	_, _, err = executeReplay(t, "--layout", "junk", tr)
	require.ErrorContains(t, err, `--layout "junk" is neither a preset, a layout JSON literal nor a file`)
	_, _, err = execute(t, "report", "--html", filepath.Join(t.TempDir(), "r.html"), "--plan", "junk", tr)
	require.ErrorContains(t, err, `--plan "junk" is neither`)
}
