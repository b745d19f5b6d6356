package main

import (
	"encoding/json"
	"os"
	"syscall"
	"testing"

	"github.com/stretchr/testify/require"
)

// A guest that writes a line, then loops until it is stopped.
const announceThenLoop = `(module
  (import "wasi_snapshot_preview1" "fd_write" (func $write (param i32 i32 i32 i32) (result i32)))
  (memory (export "memory") 1)
  (data (i32.const 16) "running\n")
  (func (export "_start")
    (i32.store (i32.const 0) (i32.const 16))
    (i32.store (i32.const 4) (i32.const 8))
    (drop (call $write (i32.const 1) (i32.const 0) (i32.const 1) (i32.const 8)))
    (loop $l (br $l))))`

// SIGINT or SIGTERM while a guest runs stops it as a cancellation does:
// --json still gives the run's line, status canceled and the signal named,
// and the command ends with 128+N.
func TestRunSignalStopsTheGuestAndKeepsItsLine(t *testing.T) {
	if guest := os.Getenv("VKRT_RUN_SIGNAL_GUEST"); guest != "" {
		os.Exit(runCommandLine([]string{"run", "--compile-cache", "", "--json", guest}, os.Stderr))
	}
	devicesOrSkip(t)
	guest := watFile(t, announceThenLoop)
	for _, sig := range []syscall.Signal{syscall.SIGINT, syscall.SIGTERM} {
		cmd, stdout, stderr := startHelper(t, "TestRunSignalStopsTheGuestAndKeepsItsLine", "VKRT_RUN_SIGNAL_GUEST="+guest)
		// With --json the guest writes to stderr: its line says it runs.
		awaitLine(t, stderr, "running")
		out, rest := signalExit(t, cmd, stdout, stderr, sig)
		var line runLine
		require.NoError(t, json.Unmarshal(out, &line), "%q", out)
		require.Equal(t, "canceled", line.Status)
		require.Contains(t, line.Error, "interrupted by "+signalName(sig))
		require.Contains(t, string(rest), "vkrt: interrupted by "+signalName(sig))
	}
}
