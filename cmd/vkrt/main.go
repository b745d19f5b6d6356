// Command vkrt is the command line of the vkrt GPU compute runtime: list
// Vulkan devices (vkrt devices), replay recorded allocation streams and plan
// their pools (vkrt replay), read the memory records of an environment
// (vkrt records), check a device against the contract (vkrt
// conformance), chart pools over streams and records as an HTML page (vkrt
// report), run WebAssembly workloads on a device (vkrt run), and plan a
// workload's pools from a dry run or its recorded streams (vkrt plan).
//
// Each subcommand lives in its own file and registers itself on rootCmd from
// an init function.
package main

import (
	"errors"
	"fmt"
	"io"
	"os"
	"strings"

	"github.com/spf13/cobra"
	"github.com/spf13/pflag"
)

var rootCmd = &cobra.Command{
	Use:               "vkrt",
	Short:             "vkrt: a GPU compute runtime with measured memory pools",
	SilenceUsage:      true,
	SilenceErrors:     true,
	PersistentPreRunE: func(cmd *cobra.Command, _ []string) error { return refuseEmptyValues(cmd) },
}

// emptyMeans are the string flags an empty value is a choice for: the rest
// name a file, a layout, an environment or a kind, and an empty one (a
// variable that expanded to nothing) would be taken silently as the flag
// left out, or as every kind.
var emptyMeans = map[string]bool{
	"compile-cache": true, // compile every time
	"label":         true, // every label
	"run":           true, // every check
}

// refuseEmptyValues fails on a string flag given an empty value where an
// empty one means nothing.
func refuseEmptyValues(cmd *cobra.Command) error {
	var err error
	cmd.Flags().VisitAll(func(f *pflag.Flag) {
		if err == nil && f.Changed && f.Value.Type() == "string" && f.Value.String() == "" && !emptyMeans[f.Name] {
			err = fmt.Errorf("--%s is empty: give it a value or leave it out", f.Name)
		}
	})
	return err
}

func main() { os.Exit(runCommandLine(os.Args[1:], os.Stderr)) }

// runCommandLine runs the command line args, reports a failure on stderr and
// returns the exit status: 0 on success; a guest's own exit code when it
// exited non-zero (2 to 255); else 1.
func runCommandLine(args []string, stderr io.Writer) int {
	// An error before a command's RunE is the command line's: cobra checks
	// required flags only after every pre-run hook, so RunE is wrapped.
	reachedRun := false
	for _, c := range rootCmd.Commands() {
		if run := c.RunE; run != nil {
			c.RunE = func(cmd *cobra.Command, args []string) error {
				reachedRun = true
				return run(cmd, args)
			}
			defer func() { c.RunE = run }()
		}
	}
	defer setCommandLine(args)()
	cmd, err := rootCmd.ExecuteC()
	if err == nil {
		return 0
	}
	line := errorLine(err)
	if !reachedRun && cmd != nil {
		// A bad flag or argument: say which command refused it and where
		// its usage is.
		line = fmt.Sprintf("%s: %s (see '%s --help')", cmd.CommandPath(), strings.TrimPrefix(err.Error(), "vkrt: "), cmd.CommandPath())
	}
	fmt.Fprintln(stderr, line)
	return exitStatus(err)
}

// commandLine is the arguments rootCmd runs with: a command whose flags
// could not be parsed reads the rest of them there (vkrt run --json gives
// its line for a run refused so, wherever --json stands).
var commandLine []string

// setCommandLine has rootCmd run with args; the func it returns clears them.
func setCommandLine(args []string) (clear func()) {
	commandLine = args
	rootCmd.SetArgs(args)
	return func() { commandLine = nil; rootCmd.SetArgs(nil) }
}

// exitStatus is the status vkrt ends with after err.
func exitStatus(err error) int {
	// A guest that exited non-zero gives vkrt its own exit code.
	var guest *exitCode
	var interrupted *interruptedError
	switch {
	case err == nil:
		return 0
	case errors.As(err, &guest) && guest.code > 1 && guest.code < 256:
		return guest.code
	case errors.As(err, &interrupted):
		// As a shell reports a command the signal ended.
		return 128 + int(interrupted.signal)
	}
	return 1
}

// errorLine is how the command reports a failure: one "vkrt:" prefix, even
// when the error comes from a package whose errors already start with it.
// Failures joined (errors.Join: vkrt replay's traces that failed) are a
// line each, each with the prefix: the second and later had none.
func errorLine(err error) string {
	if joined, ok := err.(interface{ Unwrap() []error }); ok {
		var lines, texts []string
		for _, e := range joined.Unwrap() {
			if e != nil {
				lines, texts = append(lines, errorLine(e)), append(texts, e.Error())
			}
		}
		// Only a join puts one error's message on a line of its own;
		// fmt.Errorf's several %w keep theirs on one line.
		if len(lines) > 1 && err.Error() == strings.Join(texts, "\n") {
			return strings.Join(lines, "\n")
		}
	}
	return "vkrt: " + strings.TrimPrefix(err.Error(), "vkrt: ")
}
