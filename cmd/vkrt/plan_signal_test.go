package main

import (
	"encoding/json"
	"os"
	"path/filepath"
	"syscall"
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/vkrt/vkrt/dryrun/plan"
	"github.com/vkrt/vkrt/runtime/environment"
)

// A guest that makes a buffer, then in the dry run returns and in the real
// run writes a line and loops until it is stopped.
const planThenLoopForReal = `(module
  (import "wasi_snapshot_preview1" "fd_write" (func $write (param i32 i32 i32 i32) (result i32)))
  (import "vkrt_v1" "buffer_create" (func $create (param i64 i32) (result i32)))
  (import "vkrt_v1" "is_dry_run" (func $dry (param i32) (result i32)))
  (memory (export "memory") 1)
  (data (i32.const 16) "running\n")
  (func (export "_start")
    (drop (call $create (i64.const 4096) (i32.const 32)))
    (drop (call $dry (i32.const 36)))
    (if (i32.load (i32.const 36)) (then (return)))
    (i32.store (i32.const 0) (i32.const 16))
    (i32.store (i32.const 4) (i32.const 8))
    (drop (call $write (i32.const 1) (i32.const 0) (i32.const 1) (i32.const 8)))
    (loop $l (br $l))))`

// A signal in the dry run stops the guest: there is no plan, none is
// written, and the command says so and ends with 128+N. A signal in the
// real run (--verify) stops it there: the plan, made from the whole dry
// run, is written, and the --json line gives the verification as failed,
// naming the signal.
func TestPlanSignalStopsTheGuest(t *testing.T) {
	if guest := os.Getenv("VKRT_PLAN_SIGNAL_GUEST"); guest != "" {
		out := os.Getenv("VKRT_PLAN_SIGNAL_OUT")
		os.Exit(runCommandLine([]string{"plan", "--compile-cache", "", "--json", "--verify", "--out", out, guest}, os.Stderr))
	}
	devicesOrSkip(t)
	for _, c := range []struct {
		name, guest string
		sig         syscall.Signal
		planned     bool
	}{
		{"dry run", announceThenLoop, syscall.SIGINT, false},
		{"real run", planThenLoopForReal, syscall.SIGTERM, true},
	} {
		t.Run(c.name, func(t *testing.T) {
			dir := t.TempDir()
			out := filepath.Join(dir, "plan.json")
			cmd, stdout, stderr := startHelper(t, "TestPlanSignalStopsTheGuest", "VKRT_PLAN_SIGNAL_GUEST="+watFile(t, c.guest),
				"VKRT_PLAN_SIGNAL_OUT="+out, environment.DirEnvVar+"="+dir)
			// With --json the guest writes to stderr: its line says it runs.
			awaitLine(t, stderr, "running")
			line, rest := signalExit(t, cmd, stdout, stderr, c.sig)
			require.Contains(t, string(rest), "vkrt: interrupted by "+signalName(c.sig))
			if !c.planned {
				require.Empty(t, line, "no plan, no line")
				require.Contains(t, string(rest), "dry run")
				require.NoFileExists(t, out)
				return
			}
			var got planWasmLine
			require.NoError(t, json.Unmarshal(line, &got), "%q", line)
			require.NotNil(t, got.Verify)
			require.False(t, got.Verify.OK)
			require.Contains(t, got.Verify.Error, "interrupted by "+signalName(c.sig))
			written, err := plan.ReadFile(out)
			require.NoError(t, err, "the plan is written")
			require.NotZero(t, written.Layout.Kind(), "the plan is the dry run's: %s", written.Layout)
		})
	}
}
