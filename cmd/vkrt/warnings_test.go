package main

import (
	"bytes"
	"log"
	"log/slog"
	"regexp"
	"strings"
	"testing"

	"github.com/stretchr/testify/require"
)

// hugeVirtual is a layout the pools take with a warning: it plans more
// than the device has.
const hugeVirtual = `{"Virtual":{"planned_bytes":18446744073709551615}}`

// A warning of the runtime's (the layout installed past the device) is a
// line of the command's own, on its stderr: it was Go's default log line,
// "2026/12/07 22:48:29 WARN memory: …", on the process's stderr.
func TestWarningsAreTheCommandsLines(t *testing.T) {
	tr := writeTrace(t, "x.trace", shortRun)
	for _, args := range [][]string{
		{"--layout", hugeVirtual, tr},
		{"--json", "--layout", hugeVirtual, tr},
	} {
		stdout, stderr, err := executeReplay(t, args...)
		require.NoError(t, err, "%v", args)
		require.NotContains(t, stdout, "warning", "%v: stdout holds the result alone", args)
		require.Equal(t, "vkrt: warning: memory: the layout asks for more than the device has "+
			`(layout=Virtual detail="the virtual plan expects 18446744073709551615 B, more than the device memory; it expects 150000000000 B")`+"\n",
			stderr, "%v", args)
	}
}

// Each level, attribute and group as the command writes it; what the log
// package writes goes the same way, with no date.
func TestCommandLogLines(t *testing.T) {
	var buf bytes.Buffer
	rootCmd.SetErr(&buf)
	defer rootCmd.SetErr(nil)

	slog.Info("vkrt: plain", "n", 3)
	slog.Warn("w", "empty", "", "odd", "a=b", "esc", "\x1b]0;t\a", slog.Group("g", "k", 1))
	slog.Error("e\x1b[2J")
	slog.Debug("hidden")
	slog.Default().With("pool", 2).WithGroup("grp").Warn("grouped", "k", "v")
	log.Print("from log")
	require.Equal(t, "vkrt: plain (n=3)\n"+
		`vkrt: warning: w (empty="" odd="a=b" esc="\x1b]0;t\a" g.k=1)`+"\n"+
		`vkrt: error: e\x1b[2J`+"\n"+
		"vkrt: warning: grouped (pool=2 grp.k=v)\n"+
		"vkrt: from log\n", buf.String())
	require.False(t, regexp.MustCompile(`\d{4}/\d\d/\d\d`).MatchString(buf.String()))
	require.False(t, strings.Contains(buf.String(), "hidden"))
}
