package main

import (
	"context"
	"encoding/json"
	"encoding/xml"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"syscall"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/vkrt/vkrt/client"
	"github.com/vkrt/vkrt/conformance"
	"github.com/vkrt/vkrt/device/cpu"
)

// SIGINT or SIGTERM during the suite stops it and still writes both
// reports and the table: the checks done, the one stopped and those after
// it as not run. The command then ends with 128+N, as a shell reports a
// command the signal ended.
func TestConformanceSignalWritesThePartialReport(t *testing.T) {
	if dir := os.Getenv("VKRT_CONFORMANCE_SIGNAL_DIR"); dir != "" {
		open := conformance.OnDevice(cpu.Open)
		opened := 0
		blocking := func(ctx context.Context, cfg conformance.DeviceConfig) (*client.Client, error) {
			// The first open is the command's own probe, which names the
			// device, the second the first check's: the second check's
			// waits for the signal.
			if opened++; opened == 3 {
				fmt.Println("blocking")
				if os.Getenv("VKRT_CONFORMANCE_SIGNAL_HANG") != "" {
					select {} // a check that does not stop
				}
				<-ctx.Done()
				return nil, ctx.Err()
			}
			return open(ctx, cfg)
		}
		err := runConformance(context.Background(), os.Stdout, os.Stderr, blocking, conformanceFlags{
			run: "^kernel/(fill|copy|add|mul)$", timeout: conformance.DefaultTimeout,
			json: filepath.Join(dir, "c.json"), junit: filepath.Join(dir, "c.xml"),
		})
		fmt.Fprintln(os.Stderr, errorLine(err))
		os.Exit(exitStatus(err))
	}
	for _, sig := range []syscall.Signal{syscall.SIGINT, syscall.SIGTERM} {
		dir := t.TempDir()
		cmd, stdout, stderr := startHelper(t, "TestConformanceSignalWritesThePartialReport", "VKRT_CONFORMANCE_SIGNAL_DIR="+dir)
		awaitLine(t, stdout, "blocking")
		table, errText := signalExit(t, cmd, stdout, stderr, sig)
		name := signalName(sig)
		require.Contains(t, string(errText), "vkrt: interrupted by "+name+": 3 of 4 checks not run")

		require.Contains(t, string(table), "interrupted (interrupted by "+name+"): 3 of 4 checks not run")
		require.Regexp(t, `(?m)^kernel/fill +pass `, string(table))
		require.Regexp(t, `(?m)^kernel/copy +not run +-$`, string(table))

		data, err := os.ReadFile(filepath.Join(dir, "c.json"))
		require.NoError(t, err)
		var rep struct {
			Results []struct {
				Check  string `json:"check"`
				Status string `json:"result"`
			} `json:"results"`
			Target      string   `json:"target"`
			Interrupted string   `json:"interrupted"`
			NotRun      []string `json:"not_run"`
		}
		require.NoError(t, json.Unmarshal(data, &rep))
		require.Len(t, rep.Results, 1)
		require.Equal(t, "kernel/fill", rep.Results[0].Check)
		require.Equal(t, "pass", rep.Results[0].Status)
		require.Equal(t, []string{"kernel/copy", "kernel/add", "kernel/mul"}, rep.NotRun)
		require.Equal(t, "interrupted by "+name, rep.Interrupted)
		require.NotEmpty(t, rep.Target, "the report names the device, as a whole run's does")

		data, err = os.ReadFile(filepath.Join(dir, "c.xml"))
		require.NoError(t, err)
		var doc struct {
			Tests  int `xml:"tests,attr"`
			Errors int `xml:"errors,attr"`
		}
		require.NoError(t, xml.Unmarshal(data, &doc))
		require.Equal(t, 4, doc.Tests)
		require.Equal(t, 3, doc.Errors)
		entries, err := os.ReadDir(dir)
		require.NoError(t, err)
		require.Len(t, entries, 2, "no temporary file left")
	}
}

// A second signal ends the command at once, as the signal would: a check
// that does not stop cannot hold it.
func TestConformanceSecondSignalEndsTheCommand(t *testing.T) {
	dir := t.TempDir()
	require.NoError(t, os.WriteFile(filepath.Join(dir, "c.json"), []byte("old"), 0o644))
	cmd, stdout, _ := startHelper(t, "TestConformanceSignalWritesThePartialReport",
		"VKRT_CONFORMANCE_SIGNAL_DIR="+dir, "VKRT_CONFORMANCE_SIGNAL_HANG=1")
	awaitLine(t, stdout, "blocking")
	require.NoError(t, cmd.Process.Signal(syscall.SIGINT))
	// The first stops the suite, which waits a second for the check; the
	// second comes well within it.
	time.Sleep(200 * time.Millisecond)
	require.NoError(t, cmd.Process.Signal(syscall.SIGINT))
	err := cmd.Wait()
	var ee *exec.ExitError
	require.ErrorAs(t, err, &ee)
	ws := ee.Sys().(syscall.WaitStatus)
	require.True(t, ws.Signaled(), "ended by the second signal, not after the report: %v", err)
	require.Equal(t, syscall.SIGINT, ws.Signal())
	data, err := os.ReadFile(filepath.Join(dir, "c.json"))
	require.NoError(t, err)
	require.Equal(t, "old", string(data))
}
