package main

import (
	"bufio"
	"fmt"
	"io"
	"os"
	"os/exec"
	"path/filepath"
	"syscall"
	"testing"
	"time"

	"github.com/stretchr/testify/require"
)

// A command ended by SIGINT or SIGTERM while it writes an output leaves
// the old file as it was and no temporary file beside it, and still dies
// of the signal (a shell sees 130 or 143).
func TestSignalDuringWriteOutputLeavesNoTemporaryFile(t *testing.T) {
	if dir := os.Getenv("VKRT_SIGNAL_HELPER_DIR"); dir != "" {
		_ = writeOutput("--html", filepath.Join(dir, "r.html"), func(w io.Writer) error {
			if _, err := w.Write(make([]byte, 1<<20)); err != nil { // past the buffer: on disk
				return err
			}
			fmt.Println("writing")
			time.Sleep(time.Minute)
			return nil
		})
		os.Exit(3)
	}
	for _, sig := range []syscall.Signal{syscall.SIGINT, syscall.SIGTERM} {
		dir := t.TempDir()
		require.NoError(t, os.WriteFile(filepath.Join(dir, "r.html"), []byte("old"), 0o644))
		cmd, stdout, _ := startHelper(t, "TestSignalDuringWriteOutputLeavesNoTemporaryFile", "VKRT_SIGNAL_HELPER_DIR="+dir)
		awaitLine(t, stdout, "writing")
		require.NoError(t, cmd.Process.Signal(sig))
		err := cmd.Wait()
		var ee *exec.ExitError
		require.ErrorAs(t, err, &ee)
		ws := ee.Sys().(syscall.WaitStatus)
		require.True(t, ws.Signaled(), "%v: ended by the signal", sig)
		require.Equal(t, sig, ws.Signal())
		entries, err := os.ReadDir(dir)
		require.NoError(t, err)
		var names []string
		for _, e := range entries {
			names = append(names, e.Name())
		}
		require.Equal(t, []string{"r.html"}, names, "%v: no temporary file left", sig)
		data, err := os.ReadFile(filepath.Join(dir, "r.html"))
		require.NoError(t, err)
		require.Equal(t, "old", string(data))
	}
}

// startHelper starts this test binary running only the test named, with
// env added, and returns the process and its stdout and stderr. Read both
// to their end before waiting for it.
func startHelper(t *testing.T, test string, env ...string) (cmd *exec.Cmd, stdout, stderr *bufio.Reader) {
	t.Helper()
	cmd = exec.Command(os.Args[0], "-test.run=^"+test+"$")
	cmd.Env = append(os.Environ(), env...)
	out, err := cmd.StdoutPipe()
	require.NoError(t, err)
	errOut, err := cmd.StderrPipe()
	require.NoError(t, err)
	require.NoError(t, cmd.Start())
	return cmd, bufio.NewReader(out), bufio.NewReader(errOut)
}

// signalExit sends sig to a helper, reads what it writes until it ends,
// and checks that it ended with 128+N, as the signal would have ended it.
func signalExit(t *testing.T, cmd *exec.Cmd, stdout, stderr *bufio.Reader, sig syscall.Signal) (out, errOut []byte) {
	t.Helper()
	require.NoError(t, cmd.Process.Signal(sig))
	out, err := io.ReadAll(stdout)
	require.NoError(t, err)
	errOut, err = io.ReadAll(stderr)
	require.NoError(t, err)
	err = cmd.Wait()
	var ee *exec.ExitError
	require.ErrorAs(t, err, &ee, "%v: %s", sig, errOut)
	require.Equal(t, 128+int(sig), ee.ExitCode(), "%v: %s", sig, errOut)
	return out, errOut
}

// awaitLine reads the line a helper prints once it is where the caller
// sends its signal.
func awaitLine(t *testing.T, r *bufio.Reader, want string) {
	t.Helper()
	line, err := r.ReadString('\n')
	require.NoError(t, err)
	require.Equal(t, want+"\n", line)
}
