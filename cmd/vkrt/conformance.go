package main

import (
	"context"
	"errors"
	"fmt"
	"io"
	"os"
	"path/filepath"
	"regexp"
	"strings"
	"time"

	"github.com/spf13/cobra"
	"golang.org/x/term"

	"github.com/vkrt/vkrt/conformance"
	"github.com/vkrt/vkrt/internal/printable"
)

type conformanceFlags struct {
	device  int
	json    string
	junit   string
	run     string
	timeout time.Duration
	list    bool
}

func newConformanceCmd() *cobra.Command {
	var f conformanceFlags
	cmd := &cobra.Command{
		Use:   "conformance",
		Short: "check a device against vkrt's contract: storage, memory, transfers, kernels, plans",
		Long: `Run the conformance suite on a Vulkan device: the storage checks on the
device's own storage, then the device checks through the client (zeroed
buffers, transfers at odd ranges, out of memory under a limit, every built-in
kernel against a CPU reference, dry-run fidelity, measured plans, install
errors, records, concurrent streams).

Each check has a stable name and a rule, and passes, fails, or is not
supported (a capability the device lacks, such as a memory budget). A line per
check goes to stderr on a terminal; a table of every check follows on stdout,
with the rule and the evidence under each failure. --json and --junit write
the report to files ("-" or /dev/stdout for stdout, the table then going to
stderr). The exit status is non-zero when any check fails. A device that
does not open fails the command before any check, and the reports still say
why: "not_started" in JSON and the JUnit suite's property of that name
("interrupted" too, as before), with every check not run (JSON's not_run,
JUnit <error> test cases).

SIGINT, SIGTERM or SIGHUP stops the suite: the reports and the table are
still written, with the checks done so far and the rest listed as not run
(the one stopped among them), and the command then ends with 128+N as the
signal would have ended it. A second signal ends it at once.

--list prints the checks and their rules.`,
		Args: cobra.NoArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			if f.timeout <= 0 {
				// The suite would take 0 or less as its default, 5
				// minutes: not what was asked.
				return fmt.Errorf("--timeout %s: want a positive duration", f.timeout)
			}
			if f.device < 0 {
				return fmt.Errorf("--device %d: want a device index, 0 or more (vkrt devices lists them)", f.device)
			}
			return runConformance(cmd.Context(), cmd.OutOrStdout(), cmd.ErrOrStderr(), conformance.DefaultDevice(f.device), f)
		},
	}
	cmd.Flags().IntVar(&f.device, "device", 0, "index `N` of the device to check, as 'vkrt devices' lists them")
	cmd.Flags().StringVar(&f.json, "json", "", "write the report as JSON to `FILE` (- for stdout)")
	cmd.Flags().StringVar(&f.junit, "junit", "", "write the report as JUnit XML to `FILE` (- for stdout)")
	cmd.Flags().StringVar(&f.run, "run", "", "run only the checks whose name matches `REGEXP`")
	cmd.Flags().BoolVar(&f.list, "list", false, "list the checks (those --run selects) with their rules and run none")
	durationVar(cmd.Flags(), &f.timeout, "timeout", conformance.DefaultTimeout, "a positive duration", "fail a check that runs longer than `DURATION`")
	return cmd
}

func init() { rootCmd.AddCommand(newConformanceCmd()) }

func runConformance(ctx context.Context, stdout, stderr io.Writer, open conformance.OpenClient, f conformanceFlags) error {
	if ctx == nil {
		ctx = context.Background()
	}
	o := conformance.Options{Timeout: f.timeout}
	if f.run != "" {
		re, err := regexp.Compile(f.run)
		if err != nil {
			return fmt.Errorf("--run %q: %w", f.run, err)
		}
		o.Run = re
	}
	if f.json != "" && f.junit != "" && sameOutput(f.json, f.junit, true) {
		// Two reports in one file or stream would leave only the last, or
		// two documents no reader takes.
		if namesStdout(f.json, true) {
			return fmt.Errorf("--json and --junit cannot both go to stdout")
		}
		return fmt.Errorf("--junit %s is the --json file too: each report needs a file of its own", f.junit)
	}
	var selected []conformance.Check
	for _, ch := range conformance.DeviceChecks() {
		if o.Run == nil || o.Run.MatchString(ch.Name) {
			selected = append(selected, ch)
		}
	}
	if len(selected) == 0 {
		return fmt.Errorf("no check matches --run %q", f.run)
	}
	if f.list && (f.json != "" || f.junit != "") {
		// A CI step expecting the file got exit 0 and none.
		return errors.New("--list writes no report: --json and --junit need the suite run, without --list")
	}
	if f.list {
		w := &stickyWriter{w: stdout}
		for _, ch := range selected {
			fmt.Fprintf(w, "%s\n    %s\n", ch.Name, ch.Rule)
		}
		return w.err
	}
	// A report that cannot be written is found now, not after the suite.
	for _, out := range []struct{ flag, path string }{{"--json", f.json}, {"--junit", f.junit}} {
		if out.path != "" && out.path != "-" {
			if err := checkOutput(out.flag, out.path); err != nil {
				return err
			}
		}
	}
	if file, ok := stderr.(*os.File); ok && term.IsTerminal(int(file.Fd())) {
		o.Finished = func(i, n int, r conformance.Result) {
			fmt.Fprintf(stderr, "[%*d/%d] %s: %s (%s)\n", len(fmt.Sprint(n)), i+1, n, r.Check, r.Status, r.Duration.Round(time.Millisecond))
		}
	}
	// A device that does not open would fail every check for one reason:
	// say it once. The client names the report's target too, so the suite
	// does not open the device for it: only its checks do, each its own.
	cl, err := open(ctx, conformance.DeviceConfig{})
	if err != nil {
		return notStarted(stdout, f, selected, "the device did not open", noBackendWhy(err))
	}
	o.Target = cl.Device().Name()
	if err := cl.Close(); err != nil {
		return notStarted(stdout, f, selected, "the device did not close", err)
	}
	// A signal stops the suite, not the command: the checks run so far are
	// reported, those left listed as not run, and the command then ends as
	// the signal would have ended it.
	var rep conformance.Report
	stopped := whileInterruptible(ctx, func(ctx context.Context) { rep = conformance.RunDevice(ctx, open, o) })
	toStdout, writeErrs := writeReports(stdout, f, rep.WriteJSON, rep.WriteJUnit)
	table := stdout
	if toStdout {
		table = stderr
	}
	if err := rep.WriteTable(table); err != nil {
		writeErrs = append(writeErrs, err)
	}
	failed := rep.Failed()
	if stopped != nil {
		err := fmt.Errorf("%w: %d of %s not run", stopped, len(rep.NotRun), printable.Count(len(rep.Results)+len(rep.NotRun), "check"))
		if len(failed) > 0 {
			err = fmt.Errorf("%w; %d of those run failed: %v", err, len(failed), failed)
		}
		return errors.Join(append(writeErrs, err)...)
	}
	if len(failed) > 0 {
		return errors.Join(append(writeErrs, fmt.Errorf("%d of %s failed: %v", len(failed), printable.Count(len(rep.Results), "check"), failed))...)
	}
	return errors.Join(writeErrs...)
}

// writeReports writes the --json and --junit reports f asks for, with
// writeJSON and writeJUnit; toStdout says one went to stdout. A report that
// cannot be written (a disk filled during the run) leaves the others, and
// the table, to be written: the run is not lost with it.
func writeReports(stdout io.Writer, f conformanceFlags, writeJSON, writeJUnit func(io.Writer) error) (toStdout bool, errs []error) {
	for _, out := range []struct {
		flag, path string
		write      func(io.Writer) error
	}{{"--json", f.json, writeJSON}, {"--junit", f.junit, writeJUnit}} {
		switch out.path {
		case "":
		case "-":
			toStdout = true
			if err := out.write(stdout); err != nil {
				errs = append(errs, fmt.Errorf("%s -: %w", out.flag, err))
			}
		default:
			// A name of stdout (/dev/stdout) takes the table's place as
			// "-" does: after the report, the table would spoil it.
			toStdout = toStdout || namesStdout(out.path, false)
			if err := writeOutput(out.flag, out.path, out.write); err != nil {
				errs = append(errs, err)
			}
		}
	}
	return toStdout, errs
}

// notStarted ends a suite that could not start, with err, what saying why
// (the device did not open, or close, for its name): the --json and
// --junit reports are still written, so that a CI reading them finds why,
// as the error line says it: the report's NotStarted, with every selected
// check not run (not_run in JSON, JUnit <error> test cases whose message
// is why).
func notStarted(stdout io.Writer, f conformanceFlags, selected []conformance.Check, what string, err error) error {
	if f.json == "" && f.junit == "" {
		return err
	}
	why := what + ": " + strings.TrimPrefix(withoutInnerPrefixes(err), "vkrt: ")
	rep := conformance.Report{Suite: "device", Started: time.Now().UTC(), NotStarted: why}
	for _, ch := range selected {
		rep.NotRun = append(rep.NotRun, ch.Name)
	}
	_, writeErrs := writeReports(stdout, f, rep.WriteJSON, rep.WriteJUnit)
	return errors.Join(append(writeErrs, err)...)
}

// errProbe ends checkOutput's write before it writes anything.
var errProbe = errors.New("probe")

// checkOutput finds whether writeOutput can write path (flag names the flag,
// for errors) without writing it: it makes and removes the temporary file
// writeOutput would make, so neither an existing file nor a new one is
// touched. A FIFO or a device is left alone: opening one would wait for, or
// end, its reader; it is opened when the report is written.
func checkOutput(flag, path string, inputs ...string) error {
	if path == "-" {
		// conformance's reports take "-" for stdout; these outputs are
		// files, and "-" would make one of that name.
		return fmt.Errorf("%s -: name the file to write (it does not write to stdout)", flag)
	}
	if err := checkNotAnInput(flag, path, inputs...); err != nil {
		return err
	}
	if fd, ok := outputDescriptor(path, false); ok {
		// Checked here too: a descriptor of a pipe or a terminal is no
		// regular file, and was let through to fail once the work was done.
		if err := writableDescriptor(fd); err != nil {
			return fmt.Errorf("%s %s: %w", flag, path, err)
		}
	}
	target := path
	if resolved, err := filepath.EvalSymlinks(path); err == nil {
		target = resolved
	}
	if fi, err := os.Stat(target); err == nil && !fi.IsDir() && !fi.Mode().IsRegular() {
		return nil
	}
	if err := writeOutput(flag, path, func(io.Writer) error { return errProbe }); !errors.Is(err, errProbe) {
		return err
	}
	return nil
}
