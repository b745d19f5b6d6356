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
		cmd := exec.Command(os.Args[0], "-test.run=^TestSignalDuringWriteOutputLeavesNoTemporaryFile$")
		cmd.Env = append(os.Environ(), "VKRT_SIGNAL_HELPER_DIR="+dir)
		stdout, err := cmd.StdoutPipe()
		require.NoError(t, err)
		require.NoError(t, cmd.Start())
		line, err := bufio.NewReader(stdout).ReadString('\n')
		require.NoError(t, err)
		require.Equal(t, "writing\n", line)
		require.NoError(t, cmd.Process.Signal(sig))
		err = cmd.Wait()
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
