package main

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"io"
	"io/fs"
	"os"
	"path/filepath"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/spf13/cobra"
	"github.com/spf13/pflag"
	"github.com/stretchr/testify/require"

	"github.com/vkrt/vkrt/runtime/environment"
)

// execute runs `vkrt name args...` in-process, with the subcommand's flags
// reset to their defaults first (cobra keeps flag values between runs), and
// returns what it wrote to stdout and to stderr.
func execute(t *testing.T, name string, args ...string) (stdout, stderr string, err error) {
	t.Helper()
	var sub *cobra.Command
	for _, c := range rootCmd.Commands() {
		if c.Name() == name {
			sub = c
		}
	}
	require.NotNil(t, sub, "%s is registered on the root command", name)
	sub.Flags().VisitAll(func(f *pflag.Flag) {
		require.NoError(t, f.Value.Set(f.DefValue))
		f.Changed = false
	})
	// pflag keeps where the last "--" stood until another parse meets
	// one: a parse of a lone "--" puts it back at 0, as no "--" reads.
	require.NoError(t, sub.Flags().Parse([]string{"--"}))
	var out, errOut bytes.Buffer
	rootCmd.SetOut(&out)
	rootCmd.SetErr(&errOut)
	defer setCommandLine(append([]string{name}, args...))()
	err = rootCmd.ExecuteContext(context.Background())
	return out.String(), errOut.String(), err
}

// The command line's exit status and error line: a bad flag or argument
// names the command that refused it and where its usage is; a failure of
// the work is one "vkrt:" line; both exit 1, success 0.
func TestUsageErrorsNameTheCommandAndExitNonZero(t *testing.T) {
	rootCmd.SetOut(io.Discard)
	defer rootCmd.SetOut(nil)
	for _, c := range []struct {
		args []string
		want string
	}{
		{[]string{"replay"}, "vkrt replay: requires at least 1 arg(s), only received 0 (see 'vkrt replay --help')\n"},
		{[]string{"replay", "--bogus", resnetTrace}, "vkrt replay: unknown flag: --bogus (see 'vkrt replay --help')\n"},
		{[]string{"records", "extra"}, "(see 'vkrt records --help')\n"},
		{[]string{"report", resnetTrace}, `vkrt report: required flag(s) "html" not set (see 'vkrt report --help')` + "\n"},
		{[]string{"bogus"}, `vkrt: unknown command "bogus" for "vkrt" (see 'vkrt --help')` + "\n"},
	} {
		var stderr bytes.Buffer
		require.Equal(t, 1, runCommandLine(c.args, &stderr), "%v", c.args)
		require.Contains(t, stderr.String(), c.want, "%v", c.args)
		require.Equal(t, 1, strings.Count(stderr.String(), "\n"), "one line: %q", stderr.String())
	}

	var stderr bytes.Buffer
	require.Equal(t, 1, runCommandLine([]string{"replay", "no-such.trace.gz"}, &stderr))
	require.True(t, strings.HasPrefix(stderr.String(), "vkrt: "), stderr.String())
	require.NotContains(t, stderr.String(), "--help", "the usage was right: the work failed")

	stderr.Reset()
	require.Equal(t, 0, runCommandLine([]string{"conformance", "--list", "--run", "^kernel/add$"}, &stderr))
	require.Empty(t, stderr.String())
}

// A string flag given an empty value (a variable that expanded to nothing)
// is refused where an empty value means nothing: it was taken as the flag
// left out (conformance --json ”), or as every kind (records --kind ”),
// and the run went on without the file asked for.
func TestEmptyFlagValuesAreRefused(t *testing.T) {
	for _, c := range []struct {
		cmd  string
		args []string
	}{
		{"conformance", []string{"--json", ""}},
		{"conformance", []string{"--junit", ""}},
		{"records", []string{"--kind", ""}},
		{"records", []string{"--env", ""}},
		{"plan", []string{resnetTrace, "--out", ""}},
		{"replay", []string{resnetTrace, "--layout", ""}},
		{"replay", []string{resnetTrace, "--plan", "--second-runs", ""}},
		{"report", []string{resnetTrace, "--html", ""}},
		{"report", []string{resnetTrace, "--html", filepath.Join(t.TempDir(), "r.html"), "--plan", ""}},
		{"run", []string{"guest.wasm", "--layout", ""}},
	} {
		_, _, err := execute(t, c.cmd, c.args...)
		name := c.args[len(c.args)-2]
		require.EqualError(t, err, name+" is empty: give it a value or leave it out", "%s %v", c.cmd, c.args)
	}
	// Where empty is a choice, it stays one.
	_, _, err := execute(t, "conformance", "--list", "--run", "")
	require.NoError(t, err)
}

// Failures joined, as vkrt replay's traces that failed, are a line each,
// each one starting "vkrt: ": the second and later had no prefix. Errors
// wrapped together on one line stay one line.
func TestJoinedFailuresAreALineEach(t *testing.T) {
	bad := writeTrace(t, "bad.trace", "a 1 10 0\nf 2\n")
	dup := writeTrace(t, "dup.trace", "a 1 10 0\na 1 10 0\n")
	// Flags keep the values earlier tests gave them: back to the defaults.
	for _, c := range rootCmd.Commands() {
		if c.Name() == "replay" {
			c.Flags().VisitAll(func(f *pflag.Flag) {
				require.NoError(t, f.Value.Set(f.DefValue))
				f.Changed = false
			})
		}
	}
	rootCmd.SetOut(io.Discard)
	defer rootCmd.SetOut(nil)
	var stderr bytes.Buffer
	require.Equal(t, 1, runCommandLine([]string{"replay", bad, resnetTrace, dup}, &stderr))
	lines := strings.Split(strings.TrimSuffix(stderr.String(), "\n"), "\n")
	require.Len(t, lines, 2, "%q", stderr.String())
	for _, l := range lines {
		require.True(t, strings.HasPrefix(l, "vkrt: trace: "), "%q", l)
	}
	require.Contains(t, lines[1], "dup.trace")

	wrapped := fmt.Errorf("%w: %w", &interruptedError{signal: syscall.SIGINT}, errors.New("vkrt: guest: trapped"))
	require.Equal(t, "vkrt: interrupted by SIGINT: guest: trapped", errorLine(wrapped))
	require.Equal(t, "vkrt: a\nvkrt: b", errorLine(errors.Join(errors.New("a"), nil, errors.New("vkrt: b"))))
}

// Help that cannot be written fails the command as any output does: cobra
// dropped the error, so `vkrt --help > /dev/full` wrote nothing and
// exited 0. A help topic or a subcommand of a group that does not exist
// is a usage error: cobra printed a usage or a help and exited 0.
func TestHelpThatCannotBeWrittenFails(t *testing.T) {
	// Cobra keeps flag values between runs: a command left with --help
	// set would print its help in later tests' runs.
	t.Cleanup(func() { resetHelpFlags(t, rootCmd) })
	rootCmd.SetOut(fullWriter{})
	defer rootCmd.SetOut(nil)
	for _, args := range [][]string{
		{}, {"--help"}, {"-h"}, {"help"}, {"help", "replay"}, {"replay", "--help"},
		{"plan", "-h"}, {"completion"},
	} {
		var stderr bytes.Buffer
		require.Equal(t, 1, runCommandLine(args, &stderr), "%v", args)
		require.Equal(t, "vkrt: "+syscall.ENOSPC.Error()+"\n", stderr.String(), "%v", args)
	}

	var stdout bytes.Buffer
	rootCmd.SetOut(&stdout)
	for _, c := range []struct {
		args []string
		want string
	}{
		{[]string{"help", "bogus"}, `vkrt help: unknown command "bogus" for "vkrt" (see 'vkrt help --help')`},
		{[]string{"help", "completion", "bogus"}, `vkrt help: unknown command "bogus" for "vkrt completion" (see 'vkrt help --help')`},
		{[]string{"completion", "bogus"}, `vkrt completion: unknown command "bogus" for "vkrt completion" (see 'vkrt completion --help')`},
	} {
		var stderr bytes.Buffer
		require.Equal(t, 1, runCommandLine(c.args, &stderr), "%v", c.args)
		require.Equal(t, c.want+"\n", stderr.String(), "%v", c.args)
		require.Empty(t, stdout.String(), "%v", c.args)
	}

	// Written, help is cobra's, and exits 0.
	var stderr bytes.Buffer
	require.Equal(t, 0, runCommandLine([]string{"help", "replay"}, &stderr))
	require.Empty(t, stderr.String())
	require.True(t, strings.HasPrefix(stdout.String(), "Replay allocation streams "), "%q", stdout.String())
	require.Contains(t, stdout.String(), "\nUsage:\n  vkrt replay ")
	require.Contains(t, stdout.String(), "-h, --help ")
}

// vkrt help completes the names of commands in a shell, as cobra's help
// command did.
func TestHelpCompletesCommandNames(t *testing.T) {
	var stdout, stderr bytes.Buffer
	rootCmd.SetOut(&stdout)
	defer rootCmd.SetOut(nil)
	require.Equal(t, 0, runCommandLine([]string{"__complete", "help", "rep"}, &stderr), stderr.String())
	lines := strings.Split(strings.TrimSpace(stdout.String()), "\n")
	require.Equal(t, []string{
		"replay\t" + findCommand(t, "replay").Short,
		"report\t" + findCommand(t, "report").Short,
		":4",
	}, lines)
}

func findCommand(t *testing.T, name string) *cobra.Command {
	t.Helper()
	c, _, err := rootCmd.Find([]string{name})
	require.NoError(t, err)
	return c
}

// The error line shows what a terminal acts on escaped: a file name with
// an escape sequence (a glob matched it) cleared the screen when the error
// named it. Lines and tabs stay as they are: a guest's stack trace is
// several lines, each led by a tab.
func TestErrorLineEscapesWhatATerminalActsOn(t *testing.T) {
	rootCmd.SetOut(io.Discard)
	defer rootCmd.SetOut(nil)
	name := filepath.Join(t.TempDir(), "a\x1b[2Jb\u202ec\xff.trace")
	var stderr bytes.Buffer
	require.Equal(t, 1, runCommandLine([]string{"replay", name}, &stderr))
	require.NotContains(t, stderr.String(), "\x1b")
	require.NotContains(t, stderr.String(), "\u202e")
	require.Contains(t, stderr.String(), `a\x1b[2Jb\u202ec\xff.trace`)

	stderr.Reset()
	require.Equal(t, 1, runCommandLine([]string{"replay", "--x\x1b]0;title\a", name}, &stderr))
	require.Equal(t, "vkrt replay: unknown flag: --x\\x1b]0;title\\a (see 'vkrt replay --help')\n", stderr.String())

	require.Equal(t, "trap\n\tat f\\x1b\n\tat g", shownOnTerminal("trap\n\tat f\x1b\n\tat g"))

	// Only what does not show is escaped: the quotes and backslashes of
	// the rest of the line stay as they are.
	require.Equal(t, `name "a" in C:\dir\x1b[2J, \xff \u202e �`, shownOnTerminal("name \"a\" in C:\\dir\x1b[2J, \xff \u202e \ufffd"))
	dir := filepath.Join(t.TempDir(), "env\x1b[2J")
	t.Setenv(environment.DirEnvVar, dir)
	stderr.Reset()
	require.Equal(t, 1, runCommandLine([]string{"records", "--env", "default"}, &stderr))
	require.Equal(t, fmt.Sprintf("vkrt: environment \"default\" does not exist (no file %s\\x1b[2J/default.sqlite): file does not exist\n", filepath.Dir(dir)+"/env"), stderr.String())
}

func resetHelpFlags(t *testing.T, c *cobra.Command) {
	if f := c.Flags().Lookup("help"); f != nil {
		require.NoError(t, f.Value.Set("false"))
		f.Changed = false
	}
	for _, sub := range c.Commands() {
		resetHelpFlags(t, sub)
	}
}

// Every flag that takes a value names it in the help (FILE, N, LAYOUT),
// as vkrt conformance did: the rest showed their type ("--layout string",
// "--passes int", "--max-device-bytes uint").
func TestHelpNamesEveryFlagsValue(t *testing.T) {
	rootCmd.InitDefaultHelpCmd()
	rootCmd.InitDefaultCompletionCmd()
	var walk func(c *cobra.Command)
	walk = func(c *cobra.Command) {
		c.Flags().VisitAll(func(f *pflag.Flag) {
			if f.NoOptDefVal != "" {
				return // a bool: no value
			}
			name, _ := pflag.UnquoteUsage(f)
			require.Contains(t, f.Usage, "`"+name+"`", "%s --%s names its value %q, its type", c.CommandPath(), f.Name, name)
		})
		for _, sub := range c.Commands() {
			walk(sub)
		}
	}
	walk(rootCmd)

	for _, name := range []string{"replay", "plan", "report", "run", "records", "conformance"} {
		stdout, _, err := execute(t, "help", name)
		require.NoError(t, err)
		require.Contains(t, stdout, "Flags:", name)
		require.NotRegexp(t, `--[a-z-]+ (string|int|uint|uint32|uint64|duration)\s`, stdout, name)
	}
}

// An empty argument (a variable that expanded to nothing) where a file is
// named says so: it read "stat : no such file or directory" for a trace
// and "open : no such file or directory" for a workload.
func TestAnEmptyFileArgumentSaysItIsEmpty(t *testing.T) {
	tr := writeTrace(t, "run.trace", shortRun)
	for _, args := range [][]string{
		{"replay", tr, ""},
		{"plan", "", "--out", filepath.Join(t.TempDir(), "p.plan")},
		{"report", "--html", filepath.Join(t.TempDir(), "r.html"), ""},
		{"run", ""},
		{"run", "--json", ""},
	} {
		_, _, err := execute(t, args[0], args[1:]...)
		require.ErrorIs(t, err, fs.ErrNotExist, "%q", args)
		require.ErrorContains(t, err, "an empty argument names no file", "%q", args)
		require.NotContains(t, err.Error(), " : ", "%q", args)
	}
}

// A directory given as the workload is told as one, as a trace that is a
// directory is: it read "read PATH: is a directory". It matches
// syscall.EISDIR, as a directory given as a trace, a layout or an output
// does: only --layout's did.
func TestAWorkloadThatIsADirectoryIsToldAsOne(t *testing.T) {
	dir := filepath.Join(t.TempDir(), "guest.wasm")
	require.NoError(t, os.Mkdir(dir, 0o755))
	for _, name := range []string{"run", "plan"} {
		_, _, err := execute(t, name, dir)
		require.EqualError(t, err, dir+" is a directory, not a WebAssembly workload", name)
		require.ErrorIs(t, err, syscall.EISDIR, name)
	}
	traceDir := t.TempDir()
	for _, args := range [][]string{{"replay", traceDir}, {"plan", traceDir}} {
		_, _, err := execute(t, args[0], args[1:]...)
		require.ErrorIs(t, err, syscall.EISDIR, "%v", args)
	}
	_, _, err := execute(t, "plan", writeTrace(t, "x.trace", shortRun), "--out", traceDir)
	require.EqualError(t, err, "--out "+traceDir+": is a directory")
	require.ErrorIs(t, err, syscall.EISDIR)
}

// A --timeout past the longest duration, or misspelt, says what the flag
// takes and up to what: it read only as Go's `time: invalid duration
// "99999999h"`.
func TestTimeoutRefusalSaysTheRange(t *testing.T) {
	for _, c := range []struct{ cmd, arg, want string }{
		{"conformance", "99999999h", `time: invalid duration "99999999h": want a positive duration such as 90s, 5m or 1h30m, at most 2562047h (about 292 years)`},
		{"run", "99999999h", `time: invalid duration "99999999h": want 0 (no deadline) or a positive duration such as 90s, 5m or 1h30m, at most 2562047h (about 292 years)`},
		{"run", "5x", `time: unknown unit "x" in duration "5x": want 0 (no deadline) or a positive duration`},
	} {
		_, _, err := execute(t, c.cmd, "--timeout", c.arg, "x.wasm")
		require.ErrorContains(t, err, c.want, "%s --timeout %s", c.cmd, c.arg)
	}
	// The flag still reads a duration, and the help its default.
	var d time.Duration
	fs := pflag.NewFlagSet("t", pflag.ContinueOnError)
	durationVar(fs, &d, "timeout", time.Minute, "a positive duration", "")
	require.Equal(t, "1m0s", fs.Lookup("timeout").DefValue)
	require.NoError(t, fs.Parse([]string{"--timeout", "1h30m"}))
	require.Equal(t, 90*time.Minute, d)
	durationVar(fs, &d, "none", 0, "0", "")
	require.Equal(t, "0", fs.Lookup("none").DefValue)
}
