package main

import (
	"os"
	"path/filepath"
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/vkrt/vkrt/runtime/environment"
)

// An output named as one of the command's inputs, by its own name or
// through a link, is refused before anything is written: the input is
// still there, byte for byte.
func TestAnOutputThatIsAnInputIsRefused(t *testing.T) {
	dir := t.TempDir()
	tr := writeTrace(t, "run.trace", shortRun)
	original, err := os.ReadFile(tr)
	require.NoError(t, err)
	link := filepath.Join(dir, "link.trace")
	require.NoError(t, os.Symlink(tr, link))
	guest := watFile(t, `(module (memory (export "memory") 1) (func (export "_start")))`)
	module, err := os.ReadFile(guest)
	require.NoError(t, err)

	for _, c := range []struct {
		name  string
		args  []string
		input string
	}{
		{"plan --out the trace", []string{"plan", tr, "--out", tr}, tr},
		{"plan --out a link to the trace", []string{"plan", tr, "--out", link}, tr},
		{"report --html the trace", []string{"report", "--html", tr, tr}, tr},
		{"plan --out the guest", []string{"plan", guest, "--out", guest}, guest},
	} {
		t.Run(c.name, func(t *testing.T) {
			_, _, err := execute(t, c.args[0], c.args[1:]...)
			require.ErrorContains(t, err, "is the input file")
			got, err := os.ReadFile(c.input)
			require.NoError(t, err)
			want := original
			if c.input == guest {
				want = module
			}
			require.Equal(t, want, got, "the input is untouched")
		})
	}

	// The environment a report reads or a guest records into is an input
	// too: written over, it was lost with exit 0 ("not a SQLite file").
	envDir := t.TempDir()
	t.Setenv(environment.DirEnvVar, envDir)
	seedEnvironment(t, "lab")
	envPath := filepath.Join(envDir, "lab.sqlite")
	envBytes, err := os.ReadFile(envPath)
	require.NoError(t, err)
	for name, args := range map[string][]string{
		"report --html the environment":  {"report", "--html", envPath, "--env", "lab"},
		"plan --out the guest's records": {"plan", guest, "--env", "lab", "--out", envPath},
	} {
		_, _, err := execute(t, args[0], args[1:]...)
		require.ErrorContains(t, err, "is the input file", name)
		got, err := os.ReadFile(envPath)
		require.NoError(t, err)
		require.Equal(t, envBytes, got, "%s: the environment is untouched", name)
	}
	_, _, err = execute(t, "records", "--env", "lab")
	require.NoError(t, err)

	// Two reports in one file would leave only the last.
	both := filepath.Join(dir, "report.json")
	_, _, err = execute(t, "conformance", "--run", "^storage/alloc-fresh-handle$", "--json", both, "--junit", both)
	require.ErrorContains(t, err, "each report needs a file of its own")
	_, err = os.Stat(both)
	require.ErrorIs(t, err, os.ErrNotExist, "nothing was written")
}
