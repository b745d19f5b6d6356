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
	"cmp"
	"errors"
	"fmt"
	"io"
	"os"
	"strings"
	"unicode"
	"unicode/utf8"

	"github.com/spf13/cobra"
	"github.com/spf13/pflag"

	"github.com/vkrt/vkrt/internal/printable"
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

func init() {
	rootCmd.SetHelpFunc(writeHelp)
	rootCmd.SetHelpCommand(&cobra.Command{
		Use:   "help [command]",
		Short: "Help about any command",
		Long:  "Help provides help for any command in the application.\nSimply type vkrt help [path to command] for full details.",
		// Completes the names of commands, as cobra's help command does.
		ValidArgsFunction: func(cmd *cobra.Command, args []string, toComplete string) ([]cobra.Completion, cobra.ShellCompDirective) {
			topic, _, err := cmd.Root().Find(args)
			if err != nil {
				return nil, cobra.ShellCompDirectiveNoFileComp
			}
			var names []cobra.Completion
			for _, sub := range topic.Commands() {
				if (sub.IsAvailableCommand() || sub == cmd) && strings.HasPrefix(sub.Name(), toComplete) {
					names = append(names, cobra.CompletionWithDesc(sub.Name(), sub.Short))
				}
			}
			return names, cobra.ShellCompDirectiveNoFileComp
		},
		Args: func(cmd *cobra.Command, args []string) error {
			_, err := helpTopic(cmd.Root(), args)
			return err
		},
		RunE: func(cmd *cobra.Command, args []string) error {
			topic, err := helpTopic(cmd.Root(), args)
			if err != nil {
				return err
			}
			topic.InitDefaultHelpFlag() // its --help, listed in its flags
			return printHelp(topic)
		},
	})
}

// helpTopic is the command vkrt help args names: an unknown one is an
// error (cobra's help printed vkrt's usage for it and exited 0).
func helpTopic(root *cobra.Command, args []string) (*cobra.Command, error) {
	topic, rest, err := root.Find(args)
	if err == nil && len(rest) > 0 && topic.HasSubCommands() {
		err = unknownCommand(topic, rest[0])
	}
	return topic, err
}

func unknownCommand(parent *cobra.Command, name string) error {
	return fmt.Errorf("unknown command %q for %q", name, parent.CommandPath())
}

// helpFailure is why the help text a command line asked for, in place of
// running a command (--help, or a command that only groups others), was
// not written: usage says the command line named no command.
var helpFailure struct {
	err   error
	usage bool
}

// writeHelp is rootCmd's help function. Cobra's drops the error of the
// write, so `vkrt --help > /dev/full` wrote nothing and exited 0; this one
// keeps it in helpFailure, and the command ends with it. A command that
// only groups others (vkrt completion) given a word none of them is, is
// refused as an unknown command: cobra printed its help and exited 0.
func writeHelp(c *cobra.Command, _ []string) {
	if rest := c.Flags().Args(); !c.Runnable() && len(rest) > 0 && !c.Flags().Changed("help") {
		helpFailure.err, helpFailure.usage = unknownCommand(c, rest[0]), true
		return
	}
	if err := printHelp(c); err != nil {
		helpFailure.err = err
	}
}

// printHelp writes c's help to its standard output, as cobra's help
// function lays it out: its long description (else its short one), then
// its usage.
func printHelp(c *cobra.Command) error {
	var b strings.Builder
	if text := strings.TrimRightFunc(cmp.Or(c.Long, c.Short), unicode.IsSpace); text != "" {
		b.WriteString(text + "\n\n")
	}
	if c.Runnable() || c.HasSubCommands() {
		b.WriteString(c.UsageString())
	}
	_, err := io.WriteString(c.OutOrStdout(), b.String())
	return err
}

func main() { os.Exit(runCommandLine(os.Args[1:], os.Stderr)) }

// runCommandLine runs the command line args, reports a failure on stderr and
// returns the exit status: 0 on success; a guest's own exit code when it
// exited non-zero (2 to 255); else 1.
func runCommandLine(args []string, stderr io.Writer) int {
	// An error before a command's RunE is the command line's: cobra checks
	// required flags only after every pre-run hook, so RunE is wrapped.
	// The help and completion commands cobra adds as it executes are added
	// first, so that theirs are wrapped too: an error of theirs is then
	// one of writing their output.
	rootCmd.InitDefaultHelpCmd()
	rootCmd.InitDefaultCompletionCmd()
	reachedRun := false
	defer onRun(rootCmd, func() { reachedRun = true })()
	defer setCommandLine(args)()
	defer func() { helpFailure.err, helpFailure.usage = nil, false }()
	cmd, err := rootCmd.ExecuteC()
	if err == nil && helpFailure.err != nil {
		err, reachedRun = helpFailure.err, !helpFailure.usage
	}
	if err == nil {
		return 0
	}
	line := errorLine(err)
	if !reachedRun && cmd != nil {
		// A bad flag or argument: say which command refused it and where
		// its usage is.
		line = fmt.Sprintf("%s: %s (see '%s --help')", cmd.CommandPath(), strings.TrimPrefix(withoutInnerPrefixes(err), "vkrt: "), cmd.CommandPath())
	}
	fmt.Fprintln(stderr, shownOnTerminal(line))
	return exitStatus(err)
}

// shownOnTerminal is the error text s with what a terminal would act on
// escaped as Go escapes it (a path named on the command line or matched by
// a glob, whose escape sequence cleared the screen or retitled the window
// when an error named it): each rune that is not printable, and each byte
// that is not UTF-8, as printable.Escaped writes them. Its lines and tabs
// are kept (a guest's stack trace), and so is the rest of the line: the
// quotes and backslashes of its words were escaped with the rune
// (`environment \"default\" does not exist` for a $VKRT_ENV_DIR holding
// an escape).
func shownOnTerminal(s string) string {
	var b strings.Builder
	for i := 0; i < len(s); {
		r, size := utf8.DecodeRuneInString(s[i:])
		if r == '\n' || r == '\t' || (unicode.IsPrint(r) && (r != utf8.RuneError || size > 1)) {
			b.WriteString(s[i : i+size])
		} else {
			b.WriteString(printable.Escaped(s[i : i+size]))
		}
		i += size
	}
	return b.String()
}

// onRun has each command under root with a RunE call reached as it starts
// it; the func it returns takes them back.
func onRun(root *cobra.Command, reached func()) (restore func()) {
	var restores []func()
	var wrap func(*cobra.Command)
	wrap = func(parent *cobra.Command) {
		for _, c := range parent.Commands() {
			if run := c.RunE; run != nil {
				c.RunE = func(cmd *cobra.Command, args []string) error {
					reached()
					return run(cmd, args)
				}
				restores = append(restores, func() { c.RunE = run })
			}
			wrap(c)
		}
	}
	wrap(root)
	return func() {
		for _, r := range restores {
			r()
		}
	}
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
	return "vkrt: " + strings.TrimPrefix(withoutInnerPrefixes(err), "vkrt: ")
}

// withoutInnerPrefixes is err's message with the "vkrt: " that a wrapped
// error's own message starts with (the runtime's sentinels: "vkrt: buffer
// too big for every pool") dropped where the wrapping put words before it:
// "replay: …: vkrt: buffer too big…" said "vkrt:" twice on one line. Only
// the text of a wrapped error, where the message holds it, is changed: a
// file name that holds "vkrt: " is shown as it is.
func withoutInnerPrefixes(err error) string {
	msg := err.Error()
	var inner []error
	switch u := err.(type) {
	case interface{ Unwrap() error }:
		inner = []error{u.Unwrap()}
	case interface{ Unwrap() []error }:
		inner = u.Unwrap()
	}
	for _, e := range inner {
		if e == nil {
			continue
		}
		text := e.Error()
		// The wrapped text is the last of it in the message: what the
		// wrapping says comes before it ("%s: %w"), and a name before it
		// may hold the same words.
		at := strings.LastIndex(msg, text)
		if at < 0 {
			continue
		}
		shown := withoutInnerPrefixes(e)
		if at > 0 {
			shown = strings.TrimPrefix(shown, "vkrt: ")
		}
		msg = msg[:at] + shown + msg[at+len(text):]
	}
	return msg
}
