package main

import (
	"bufio"
	"bytes"
	"errors"
	"fmt"
	"io"
	"io/fs"
	"os"
	"path/filepath"
	"strings"
	"syscall"

	json "github.com/goccy/go-json"
	"github.com/spf13/cobra"

	"github.com/vkrt/vkrt/client"
	"github.com/vkrt/vkrt/dryrun/plan"
	"github.com/vkrt/vkrt/dryrun/replay"
	"github.com/vkrt/vkrt/dryrun/trace"
	"github.com/vkrt/vkrt/internal/printable"
	"github.com/vkrt/vkrt/memory"
)

// planTraceLine is one stream's line of `vkrt plan TRACE... --json`.
type planTraceLine struct {
	Trace         string       `json:"trace"` // the trace's name itself
	PeakLiveBytes uint64       `json:"peak_live_bytes"`
	DryRun        planTraceRun `json:"dry_run"`
	Plan          planTraceRun `json:"plan"`
	Out           string       `json:"out"`
	FileBytes     int          `json:"file_bytes"`
	// shown is the trace's name as the table shows it (traceNames).
	shown string
}

type planTraceRun struct {
	ReservedPeakBytes uint64 `json:"reserved_peak_bytes"`
	DriverAllocs      uint64 `json:"driver_allocs"`
	Binds             uint64 `json:"binds"`
	BindCalls         uint64 `json:"bind_calls"`
	Spills            uint64 `json:"spills"`
}

func runFigures(r *replay.Result) planTraceRun {
	return planTraceRun{ReservedPeakBytes: r.ReservedPeakBytes, DriverAllocs: r.DriverAllocs, Binds: r.Binds,
		BindCalls: r.BindCalls, Spills: r.Spills}
}

// planTraces plans from allocation streams: runs of one workload, the
// first of which the plan places. It writes the plan file to out and
// reports each stream with no plan and under the plan. A terminal sees
// the planning's progress (it takes tens of seconds on a million events)
// and that of long replays.
func planTraces(cmd *cobra.Command, paths []string, out string, asJSON bool) error {
	if out == "" {
		// A trace that is not there is said first, the missing flag
		// after it: the --out line alone sent the user to add a flag, to
		// be told then that the trace did not exist.
		return errors.Join(checkTraceArgs(paths), errors.New("plan: --out FILE is needed to plan from traces"))
	}
	// A plan that cannot be written is found now, not after the planning.
	if err := checkOutput("--out", out, paths...); err != nil {
		return err
	}
	if err := checkTraceArgs(paths); err != nil {
		return err
	}
	names, plain := traceNames(paths)
	// Too many traces, or names too long for a plan file, are refused
	// before any is read, not once every one was.
	if err := plan.CheckTraceNames(plain); err != nil {
		return err // it says "plan:" itself
	}
	bar := newReplayProgress(cmd.ErrOrStderr())
	defer bar.clear()
	streams := make([]*trace.Trace, len(paths))
	for i, p := range paths {
		t, err := readTrace(p, bar)
		if err != nil {
			return err
		}
		t.Name = names[i]
		streams[i] = t
	}
	bar.stage("planning "+streams[0].Name, bar.total(true, 1))
	pf, err := plan.Runs(streams, plan.Options{Strength: plan.Strong, Progress: bar.setTotal})
	if err != nil {
		return err
	}
	// The file is JSON, which escapes a name on its own: it names the
	// runs by their names, not as a terminal shows them.
	pf.Traces = plain
	data, err := pf.Encode(plan.CompressedName(out))
	if err != nil {
		return err
	}
	lines := make([]planTraceLine, len(streams))
	for i, t := range streams {
		long := len(t.Events) >= replayProgressEvents
		opts := replay.Options{Device: pf.Device, Progress: bar.set}
		bar.stage("replaying "+t.Name, bar.total(long, len(t.Events)))
		dry, err := replay.Run(t, memory.VirtualLayout(memory.VirtualPlan{}), opts)
		if err != nil {
			return err
		}
		bar.stage("replaying "+t.Name+" under the plan", bar.total(long, len(t.Events)))
		under, err := replay.Run(t, pf.Layout, opts)
		if err != nil {
			return fmt.Errorf("replaying %s under the plan: %w", t.Name, err)
		}
		lines[i] = planTraceLine{Trace: plain[i], shown: t.Name, PeakLiveBytes: dry.PeakLiveBytes, DryRun: runFigures(dry),
			Plan: runFigures(under), Out: out, FileBytes: len(data)}
	}
	bar.clear()
	// The plan is written once every stream has replayed under it.
	if err := writeOutput("--out", out, func(w io.Writer) error {
		_, err := w.Write(data)
		return err
	}); err != nil {
		return err
	}
	return writePlanTraces(summaryOut(cmd, out), lines, asJSON)
}

// summaryOut is where plan writes its summary (and a guest its output):
// stdout, unless --out writes the plan file there (/dev/stdout), which
// the summary after it would spoil: then stderr.
func summaryOut(cmd *cobra.Command, out string) io.Writer {
	if namesStdout(out, false) {
		return cmd.ErrOrStderr()
	}
	return cmd.OutOrStdout()
}

func writePlanTraces(w io.Writer, lines []planTraceLine, asJSON bool) error {
	if asJSON {
		for _, l := range lines {
			b, err := json.Marshal(l)
			if err != nil {
				return err
			}
			if _, err := w.Write(append(b, '\n')); err != nil {
				return err
			}
		}
		return nil
	}
	t := textTable{alignRight: true}
	t.row("trace", "peak live", "no plan", "driver allocs", "bind calls", "under the plan", "driver allocs", "bind calls", "spills")
	for _, l := range lines {
		ratio := func(r planTraceRun) string {
			return fmt.Sprintf("%.4f×", float64(r.ReservedPeakBytes)/float64(max(l.PeakLiveBytes, 1)))
		}
		t.row(l.shown, memory.FormatBytes(l.PeakLiveBytes), ratio(l.DryRun), fmt.Sprint(l.DryRun.DriverAllocs), fmt.Sprint(l.DryRun.BindCalls),
			ratio(l.Plan), fmt.Sprint(l.Plan.DriverAllocs), fmt.Sprint(l.Plan.BindCalls), fmt.Sprint(l.Plan.Spills))
	}
	if err := t.write(w); err != nil {
		return err
	}
	if len(lines) > 0 {
		fmt.Fprintf(w, "\nplan: %s (%s)\n", printable.Label(lines[0].Out), memory.FormatBytes(uint64(lines[0].FileBytes)))
	}
	return nil
}

// layoutFile reads a file --layout names: a plan file `vkrt plan` wrote,
// which must be for the replay's device model, or a layout.
func layoutFile(path string) (memory.Layout, error) {
	l, pf, err := readLayoutArg(path)
	if err != nil || pf == nil {
		return l, err
	}
	if l, err = pf.For(replay.H200(), replay.H200Granule); err != nil {
		// "This one" is no device the user named: say which it is.
		return memory.Layout{}, fmt.Errorf("%s: %w (the replay's H200 device model; it takes the plans vkrt plan makes of traces)", path, err)
	}
	return l, nil
}

// guestLayout reads a guest's --layout as replayLayout does, but a plan
// file (`vkrt plan --out`, of traces or of a guest) is returned unchecked,
// with its layout: the device it must be for is the one the guest runs
// on, which checkPlanOn checks it against once the client is open.
func guestLayout(arg string) (memory.Layout, *plan.File, error) {
	if l, err := memory.ParseLayout(arg); err == nil {
		return l, nil, nil
	}
	if _, err := os.Stat(arg); err != nil {
		l, err := layoutFlag("--layout", arg) // says why arg is none of the three
		return l, nil, err
	}
	l, pf, err := readLayoutArg(arg)
	if err != nil {
		return memory.Layout{}, nil, fmt.Errorf("--layout: %w", err)
	}
	return l, pf, nil
}

// readLayoutArg reads the file (or pipe: /dev/stdin, a shell's <(…)) a
// --layout names, once: whether it holds a plan file is told from its head,
// unpacked where it is gzipped and past any whitespace (a few megabytes of
// it pack into a few kilobytes), and the bytes read to tell go back in
// front of the rest. pf is the plan file, nil for a layout.
func readLayoutArg(path string) (_ memory.Layout, pf *plan.File, _ error) {
	f, err := os.Open(path)
	if err != nil {
		return memory.Layout{}, nil, err
	}
	defer f.Close()
	if fi, err := f.Stat(); err == nil && fi.IsDir() {
		// Its read said the name twice: "DIR: read DIR: is a directory".
		return memory.Layout{}, nil, &isDirectoryError{path: path}
	}
	br := bufio.NewReader(f)
	// JSON may start with any amount of whitespace: the head is past it.
	if err := plan.SkipSpace(br); err != nil {
		if pe := (*fs.PathError)(nil); errors.As(err, &pe) && pe.Path == path {
			return memory.Layout{}, nil, err // it names the file
		}
		return memory.Layout{}, nil, fmt.Errorf("%s: %w", path, err)
	}
	var seen bytes.Buffer
	isPlan := plan.IsFileHead(io.TeeReader(br, &seen))
	rest := io.MultiReader(&seen, br)
	if !isPlan {
		head := bytes.Clone(seen.Bytes()[:min(seen.Len(), len(wasmMagic))]) // rest drains seen
		l, err := memory.ReadLayout(rest, path)
		if err != nil {
			if what := notALayout(path, head); what != "" {
				err = fmt.Errorf("%w; %s", err, what)
			}
		}
		return l, nil, err
	}
	read, err := plan.Read(rest, path)
	if err != nil {
		return memory.Layout{}, nil, err
	}
	return read.Layout, &read, nil
}

// isDirectoryError is an input named on the command line that is a
// directory: "PATH is a directory", or "PATH is a directory, not WANT"
// where want says what the input is, matching syscall.EISDIR.
type isDirectoryError struct{ path, want string }

func (e *isDirectoryError) Error() string {
	if e.want != "" {
		return e.path + " is a directory, not " + e.want
	}
	return e.path + " is a directory"
}

func (e *isDirectoryError) Unwrap() error { return syscall.EISDIR }

// notALayout says what the file at path, whose first bytes are head, is
// where it is another of vkrt's inputs, not a layout: a WebAssembly
// workload, or an allocation trace (named NAME.trace or NAME.trace.gz);
// "" for anything else.
func notALayout(path string, head []byte) string {
	switch {
	case bytes.HasPrefix(head, wasmMagic):
		return fmt.Sprintf("%s is a WebAssembly workload, not a layout: run it (vkrt run %s) or plan it (vkrt plan %s)", path, path, path)
	case namedAsTrace(path):
		return fmt.Sprintf("%s is an allocation trace, not a layout: replay it (vkrt replay %s) or plan from it (vkrt plan %s --out FILE)", path, path, path)
	}
	return ""
}

// namedAsTrace says whether the file at path is named as an allocation
// trace is: NAME.trace or NAME.trace.gz.
func namedAsTrace(path string) bool {
	return strings.HasSuffix(strings.TrimSuffix(filepath.Base(path), ".gz"), ".trace")
}

// checkPlanOn checks the --layout a guest runs under on client c: layout,
// read from arg. A plan file pf (`vkrt plan --out`) records the device it
// was made for: the replay's device model for traces, the device measured
// for a guest. A run places on c's device, so a plan made for another
// alignment or sparse granule is a *plan.DeviceMismatchError. A virtual
// plan on a device without sparse residency builds the SubSlices pools and
// plans nothing: stderr is told once.
func checkPlanOn(arg string, pf *plan.File, layout memory.Layout, c *client.Client, stderr io.Writer) error {
	granule := c.SparseGranule()
	if pf != nil {
		// Memory size and page size are left out: the plan's bytes are a
		// forecast the pools grow past (a device with less fails only when
		// the run needs the memory), and a plan file's slots are a virtual
		// plan's, which no page size bounds (the H200's Vulkan driver caps
		// pages 2 MiB under the replay model's).
		props := c.Properties()
		props.MemorySize, props.MaxPageSize = pf.Device.MemorySize, pf.Device.MaxPageSize
		if _, err := pf.For(props, granule); err != nil {
			return fmt.Errorf("%s: %w", arg, err)
		}
	}
	if v, ok := layout.Virtual(); ok && v.PlannedBytes != 0 && granule == 0 {
		fmt.Fprintf(stderr, "vkrt: --layout is a virtual plan (%s in %s), but this device has no sparse residency: the guest runs under the SubSlices pools, unplanned\n",
			memory.FormatBytes(v.PlannedBytes), printable.Count(len(v.Slots), "slot"))
	}
	return nil
}
