package main

import (
	"context"
	"errors"
	"fmt"
	"io"
	"path/filepath"
	"strconv"
	"strings"

	"github.com/spf13/cobra"

	"github.com/vkrt/vkrt/dryrun/trace"
	"github.com/vkrt/vkrt/internal/htmlreport"
	"github.com/vkrt/vkrt/internal/printable"
	"github.com/vkrt/vkrt/memory"
	"github.com/vkrt/vkrt/runtime/environment"
)

type reportFlags struct {
	html   string
	env    string
	layout string
	plan   string
}

// reportDefaultLayout is the layout the runs without a plan take unless
// --layout names another: the one vkrt replay takes.
const reportDefaultLayout = "virtual"

func newReportCmd() *cobra.Command {
	var f reportFlags
	cmd := &cobra.Command{
		Use:   "report --html FILE [--env NAME] [--layout L] [--plan PLAN] [TRACE...]",
		Short: "draw what the pools held over each stream, and what a plan saved, as one HTML page",
		Long: fmt.Sprintf(`Write one self-contained HTML page (no network: inline SVG and a small
script) that charts, for each trace, the live and reserved bytes of every pool
over the stream under a layout without a plan (--layout, as for vkrt replay)
and under a plan, with the peak-live floor, the figures to compare and a
one-line verdict; with --env, also the memory records of an environment in
the order they were written, one bar each, or past %d of them one bar per
group of records in a row drawing the record of the group that reserved the
most. A memory record that cannot be decoded is left out of that chart and
named under it and on stderr, and the command exits non-zero once the page
is written. An environment that holds no memory records is drawn as such,
stderr saying so and naming the kinds it holds, and the command succeeds,
as vkrt records does for it.

The plan is derived from each trace's own dry run, as 'vkrt replay --plan'
does, unless --plan names one (a preset, a layout JSON literal, or a file
holding one or a plan file: vkrt plan --out of traces; one made for another
device is refused), so a stream can be seen under the plan of another run. A
trace the planner refuses (one that allocates on several streams: pools and
plans are per stream) is drawn without a plan, the page and stderr saying
why, and the command exits non-zero once the page is written; --plan gives
such a trace a plan to be drawn under.

On a terminal, stderr shows the stage under way (replaying a trace,
planning it, replaying it under the plan) and its progress, as vkrt replay
does.`, htmlreport.MaxEnvBars),
		RunE: func(cmd *cobra.Command, args []string) error {
			return runReport(cmd, args, f)
		},
	}
	cmd.Flags().StringVar(&f.html, "html", "", "the HTML `FILE` to write")
	cmd.Flags().StringVar(&f.env, "env", "", "`NAME` of an environment whose memory records to chart")
	cmd.Flags().StringVar(&f.layout, "layout", reportDefaultLayout, "the `LAYOUT` without a plan: a preset, a layout JSON literal, or a file holding one or a plan file (vkrt plan --out)")
	cmd.Flags().StringVar(&f.plan, "plan", "", "the plan `LAYOUT` to replay under: a preset, a layout JSON literal, or a file holding one or a plan file (vkrt plan --out)")
	_ = cmd.MarkFlagRequired("html")
	return cmd
}

func runReport(cmd *cobra.Command, paths []string, f reportFlags) error {
	if len(paths) == 0 && f.env == "" {
		return errors.New("report: name a trace or an environment (--env)")
	}
	if len(paths) == 0 {
		// An environment's records are drawn as they were recorded: a
		// layout or plan would change nothing on the page.
		for _, fl := range []string{"layout", "plan"} {
			if cmd.Flags().Changed(fl) {
				return fmt.Errorf("report: --%s applies to traces, and none is named (--env draws the records as they were recorded)", fl)
			}
		}
	}
	// The layouts are read first: a stream one of them names with a trace
	// is refused before either takes its bytes.
	if err := checkStreamsReadOnce(append([]namedInput{layoutInput("--layout", f.layout), layoutInput("--plan", f.plan)}, traceInputs(paths)...)...); err != nil {
		return err
	}
	base, err := replayLayout(f.layout)
	if err != nil {
		return err
	}
	// A page that cannot be written is found now, not after the replays.
	if err := checkOutput("--html", f.html, append(append([]string{f.layout, f.plan}, envFiles(f.env)...), paths...)...); err != nil {
		return err
	}
	if err := checkTraceArgs(paths); err != nil {
		return err
	}
	layouts := htmlreport.Layouts{Default: base, DefaultName: "default layout"}
	if f.layout != reportDefaultLayout {
		layouts.DefaultName = "layout " + printable.Label(filepath.Base(f.layout))
	}
	if f.plan != "" {
		l, err := honouredLayout("--plan", f.plan)
		if err != nil {
			return err
		}
		layouts.Plan = &htmlreport.PlanFrom{Layout: l, Source: "given by --plan " + printable.Label(filepath.Base(f.plan))}
	}
	var page htmlreport.Page
	bar := newReplayProgress(cmd.ErrOrStderr())
	defer bar.clear()
	// The records are read before the traces are replayed: an environment
	// that does not exist (a misspelt --env) was found only after every
	// replay.
	var badRecords error
	if f.env != "" {
		bar.stage("reading the records of "+f.env, 0)
		if page.Env, badRecords, err = envRecords(cmd.Context(), f.env, cmd.ErrOrStderr()); err != nil {
			return err
		}
	}
	if page.Traces, err = reportTraces(paths, layouts, bar); err != nil {
		return err
	}
	var partial []error
	for _, tr := range page.Traces {
		if tr.NoPlan != nil {
			partial = append(partial, fmt.Errorf("report: %s is drawn without a plan: %w", tr.Name, tr.NoPlan))
		}
	}
	if badRecords != nil {
		partial = append(partial, badRecords)
	}
	bar.stage("writing "+f.html, 0)
	if err := writeReport(f.html, page); err != nil {
		return err
	}
	// The page is written with every record that decodes and every trace
	// without the plan it could not have; the command still fails so that a
	// script notices what was left out.
	return errors.Join(partial...)
}

// reportTraces reads and replays each trace under layouts, showing the work
// on bar as vkrt replay does: a bar for each stage of a trace whose replays
// are long or that is planned.
func reportTraces(paths []string, layouts htmlreport.Layouts, bar *replayProgress) ([]*htmlreport.TraceReport, error) {
	var traces []*htmlreport.TraceReport
	for _, path := range paths {
		t, err := readTrace(path, bar)
		if err != nil {
			return nil, err
		}
		long := len(t.Events) >= replayProgressEvents || layouts.Plan == nil
		tr, err := htmlreport.ReplayTrace(t, layouts, htmlreport.Buckets, htmlreport.Progress{
			Stage: func(desc string, steps int) { bar.stage(desc, bar.total(long, steps)) },
			Step:  bar.setTotal,
		})
		if err != nil {
			return nil, err
		}
		traces = append(traces, tr)
	}
	distinctNames(traces, paths)
	return traces, nil
}

// distinctNames names the traces as traceNames shows them.
func distinctNames(traces []*htmlreport.TraceReport, paths []string) {
	shown, _ := traceNames(paths)
	for i, name := range shown {
		traces[i].Name = name
	}
}

// traceNames are the names the traces at paths go by: their files'
// (trace.NameOf), but where traces share a name (a run and its second
// run in variants/), the paths they were read from, less the extensions,
// so that headings, rows and lines tell them apart; the same path given
// twice is numbered. shown is each name as a terminal, a table or a page
// shows it, quoted where trace.NameOf quotes it; plain is the name itself,
// for JSON, which escapes what it must on its own (shown's quotes and
// backslashes, escaped again, read "\"a\\nb\"" for a file named a, a
// newline and b).
func traceNames(paths []string) (shown, plain []string) {
	shown, plain = make([]string, len(paths)), make([]string, len(paths))
	count := map[string]int{}
	for i, p := range paths {
		shown[i] = trace.NameOf(p)
		plain[i] = shown[i]
		if strings.HasPrefix(plain[i], `"`) {
			// NameOf quotes a name as Go quotes it (printable.Label), and
			// no name it leaves as it is starts with a quote.
			if name, err := strconv.Unquote(plain[i]); err == nil {
				plain[i] = name
			}
		}
		count[plain[i]]++
	}
	for i, p := range paths {
		if dir := filepath.Dir(p); count[plain[i]] > 1 && dir != "." {
			dir = filepath.ToSlash(dir)
			shown[i] = printable.Label(dir) + "/" + shown[i]
			plain[i] = dir + "/" + plain[i]
		}
	}
	// A name given again (the same path twice) is numbered, past the
	// numbers another trace's own name holds: "x (2)" was both the second
	// x.trace and the file x (2).trace.
	taken := map[string]bool{}
	for _, name := range plain {
		taken[name] = true
	}
	given := map[string]int{}
	for i := range paths {
		if given[plain[i]]++; given[plain[i]] == 1 {
			continue
		}
		n := given[plain[i]]
		for taken[fmt.Sprintf("%s (%d)", plain[i], n)] {
			n++
		}
		given[plain[i]] = n
		suffix := fmt.Sprintf(" (%d)", n)
		taken[plain[i]+suffix] = true
		shown[i] += suffix
		plain[i] += suffix
	}
	return shown, plain
}

// envRecords reads an environment's memory records, oldest first. Those
// that cannot be decoded are named on the page and in undecodable, and the
// rest are drawn, as vkrt records lists them. An environment that holds
// none is said on stderr, as vkrt records says it: the page alone said so,
// and the command succeeded without a word.
func envRecords(ctx context.Context, name string, stderr io.Writer) (_ *htmlreport.EnvRecords, undecodable error, _ error) {
	out := &htmlreport.EnvRecords{Name: name}
	q := environment.Query{Kind: environment.KindMemory}
	bad, err := eachRecord(ctx, name, q, "left out of the records chart", noRecordsOfKind(stderr, name, q.Kind),
		func(e environment.Entry, rec *memory.Record, why error) error {
			switch {
			case rec != nil:
				out.Add(htmlreport.EnvRecord{ID: e.ID, Label: e.Label, Time: e.Time, Report: rec.Report})
			case why != nil:
				// Every one, which the page counts (bad names the first
				// maxUndecodableNamed).
				out.Undecodable = append(out.Undecodable, htmlreport.UndecodableRecord{ID: e.ID, Label: e.Label, Time: e.Time, Reason: why.Error()})
			}
			return nil
		})
	if err != nil {
		return nil, nil, err
	}
	if bad == nil {
		return out, nil, nil
	}
	return out, bad, nil
}

// writeReport renders the page to path (see writeOutput: a failed render
// leaves no half-written page and an old page stays intact).
func writeReport(path string, page htmlreport.Page) error {
	return writeOutput("--html", path, func(w io.Writer) error { return htmlreport.Render(w, page) })
}

func init() { rootCmd.AddCommand(newReportCmd()) }
