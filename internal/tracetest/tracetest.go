// Package tracetest gives tests the allocation streams shipped with the
// repository (testdata/traces) and small inline ones, and says when a test
// should stay quick.
package tracetest

import (
	"path/filepath"
	goruntime "runtime"
	"strings"
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/vkrt/vkrt/dryrun/trace"
)

// Dir is the directory of the shipped traces, found from this file so that
// tests of any package reach it.
func Dir() string {
	_, file, _, _ := goruntime.Caller(0)
	return filepath.Join(filepath.Dir(file), "..", "..", "testdata", "traces")
}

// Path is the file of the shipped trace called name.
func Path(name string) string { return filepath.Join(Dir(), name+".trace.gz") }

// Shipped lists the shipped traces' files.
func Shipped(tb testing.TB) []string {
	tb.Helper()
	paths, err := filepath.Glob(filepath.Join(Dir(), "*.trace.gz"))
	require.NoError(tb, err)
	require.NotEmpty(tb, paths, "the shipped traces are missing")
	return paths
}

// Quick is true under -short or the race detector, which slows planning
// about tenfold: whole-trace tests then take the smallest shipped trace
// only, and the plain run covers the rest.
func Quick() bool { return testing.Short() || RaceEnabled }

// Planned are the shipped traces whole-trace planning tests take: all of
// them, or only the smallest when Quick.
func Planned(tb testing.TB) []string {
	if Quick() {
		return []string{Path("resnet50_train")}
	}
	return Shipped(tb)
}

// Read parses the shipped trace called name.
func Read(tb testing.TB, name string) *trace.Trace {
	tb.Helper()
	tr, err := trace.ReadFile(Path(name))
	require.NoError(tb, err)
	return tr
}

// Inline parses a trace written in the test, named "inline".
func Inline(tb testing.TB, text string) *trace.Trace {
	tb.Helper()
	tr, err := trace.Read("inline", strings.NewReader(text))
	require.NoError(tb, err)
	return tr
}
