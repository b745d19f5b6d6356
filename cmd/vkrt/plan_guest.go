package main

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"io"
	"math"
	"math/bits"
	"os"
	"slices"
	"strings"

	json "github.com/goccy/go-json"
	"github.com/spf13/cobra"
	"github.com/spf13/pflag"

	"github.com/vkrt/vkrt/client"
	"github.com/vkrt/vkrt/dryrun/plan"
	"github.com/vkrt/vkrt/internal/printable"
	"github.com/vkrt/vkrt/internal/saturate"
	"github.com/vkrt/vkrt/memory"
	"github.com/vkrt/vkrt/wasmhost"
)

// isWasm says whether `vkrt plan` was given a guest rather than traces: a
// name ending in .wasm, or a regular file that begins as WebAssembly does
// (`vkrt run` takes a guest by any name). Only a regular file is opened
// here: a pipe's first bytes would be lost to the trace reader after it,
// and opening a named one waits for its writer.
func isWasm(path string) bool {
	if strings.HasSuffix(path, ".wasm") {
		return true
	}
	if fi, err := os.Stat(path); err != nil || !fi.Mode().IsRegular() {
		return false // the trace reader says why
	}
	f, err := os.Open(path)
	if err != nil {
		return false
	}
	defer f.Close()
	_, wasm, _ := readWasmHead(f)
	return wasm
}

// checkTraceArgs checks, before any work, that each of paths can be read
// as a trace: one missing, unreadable or a directory was found only when
// its turn came, after the traces before it had been replayed and printed.
// A WebAssembly workload or a plan file is refused as one, where the trace
// reader called it a malformed trace (a plan "line longer than 4096
// bytes", or an unknown event "{\"vkrt_plan\"…"). Only regular files are
// opened, once each: a pipe is read once, by the reader, and opening a
// named one waits for its writer.
func checkTraceArgs(paths []string) error {
	var streams []os.FileInfo // the pipes and devices named so far
	for _, p := range paths {
		if strings.HasSuffix(p, ".wasm") {
			return guestNotTrace(p)
		}
		fi, err := os.Stat(p)
		switch {
		case err != nil:
			return fmt.Errorf("trace: %w", pathHint(p, err))
		case fi.IsDir():
			return fmt.Errorf("trace: %w", &isDirectoryError{path: p})
		case !fi.Mode().IsRegular():
			// A pipe is read once: named again (/dev/stdin twice), it
			// was an empty trace, "holds no events (0 lines)".
			if slices.ContainsFunc(streams, func(seen os.FileInfo) bool { return os.SameFile(fi, seen) }) {
				return fmt.Errorf("trace: %s is given twice; it is a stream (a pipe or a device), not a file, and is read once", p)
			}
			streams = append(streams, fi)
			continue
		}
		f, err := os.Open(p)
		if err != nil {
			return fmt.Errorf("trace: %w", err)
		}
		head, wasm, _ := readWasmHead(f)
		isPlan := !wasm && plan.IsFileHead(io.MultiReader(bytes.NewReader(head), f))
		f.Close()
		switch {
		case wasm:
			return guestNotTrace(p)
		case isPlan:
			return fmt.Errorf("%s is a plan file, not a trace: give it to --layout (vkrt replay, vkrt run) or --plan (vkrt report)", p)
		}
	}
	return nil
}

// namedInput is a file a command reads, and what reads it: "a trace",
// "the workload", or a flag ("--layout").
type namedInput struct{ path, role string }

// layoutInput is the file a layout flag (--layout, --plan) reads: none
// ("") where arg is a preset or a layout JSON literal.
func layoutInput(flag, arg string) namedInput {
	if _, err := memory.ParseLayout(arg); err == nil {
		return namedInput{role: flag}
	}
	return namedInput{path: arg, role: flag}
}

// checkStreamsReadOnce refuses, before anything is read, a stream (a pipe
// or a device: /dev/stdin, a shell's <(…)) that two of inputs name: the
// first to read it took its bytes, and the second read none, or what the
// first left (vkrt replay --layout /dev/stdin /dev/stdin called the trace
// empty; vkrt run --layout /dev/stdin /dev/stdin read the workload's first
// bytes and the layout from the fifth byte on). A regular file is opened
// anew by each.
func checkStreamsReadOnce(inputs ...namedInput) error {
	var streams []namedInput
	var infos []os.FileInfo
	for _, in := range inputs {
		if in.path == "" {
			continue
		}
		fi, err := os.Stat(in.path)
		if err != nil || fi.IsDir() || fi.Mode().IsRegular() {
			continue // its reader says why it cannot be read
		}
		for i, seen := range infos {
			if !os.SameFile(fi, seen) {
				continue
			}
			if streams[i].role == in.role {
				return fmt.Errorf("%s is given twice as %s; it is a stream (a pipe or a device), not a file, and is read once", in.path, in.role)
			}
			return fmt.Errorf("%s is given as %s and as %s; it is a stream (a pipe or a device), not a file, and is read once", in.path, streams[i].role, in.role)
		}
		streams, infos = append(streams, in), append(infos, fi)
	}
	return nil
}

// traceInputs are paths as the inputs of a command that reads them as
// traces.
func traceInputs(paths []string) []namedInput {
	inputs := make([]namedInput, len(paths))
	for i, p := range paths {
		inputs[i] = namedInput{path: p, role: "a trace"}
	}
	return inputs
}

func guestNotTrace(p string) error {
	return fmt.Errorf("%s is a WebAssembly workload, not a trace: plan it alone (vkrt plan %s) or run it (vkrt run %s)", p, p, p)
}

// planWasmFlags are `vkrt plan WORKLOAD.wasm`'s flags.
type planWasmFlags struct {
	out    string
	verify bool
	json   bool
	guest  guestFlags
}

// planWasmLine is `vkrt plan WORKLOAD.wasm --json`'s line. It is written
// once the dry run has ended well, also when what came after it failed,
// as vkrt run --json writes its line for a run that failed: Plan is then
// nil where the planner refused the dry run, and Error says why the
// command fails, as its message on stderr does.
type planWasmLine struct {
	Workload string            `json:"workload"`
	DryRun   planDryRun        `json:"dry_run"`
	Plan     *memory.Layout    `json:"plan,omitempty"`
	Capacity uint64            `json:"plan_capacity_bytes"`
	Verify   *planVerification `json:"verify,omitempty"`
	Error    string            `json:"error,omitempty"`
}

type planDryRun struct {
	Report memory.Report `json:"report"`
	// DeviceBytes is the most device memory held during the dry run,
	// DeviceAllocs the device allocations it made: the device's own
	// figures.
	DeviceBytes       uint64  `json:"device_bytes"`
	DeviceAllocs      uint64  `json:"device_allocs"`
	PeakLiveBytes     uint64  `json:"peak_live_bytes"`
	ReservedPeakBytes uint64  `json:"reserved_peak_bytes"`
	WallS             float64 `json:"wall_s"`
}

type planVerification struct {
	OK                bool   `json:"ok"`
	Spills            uint64 `json:"spills"`
	PeakLiveBytes     uint64 `json:"peak_live_bytes"`
	ReservedPeakBytes uint64 `json:"reserved_peak_bytes"`
	// DeviceBytesPeak is the most device memory held at once, which the
	// dry run before held none of; DeviceAllocs the device allocations the
	// real run made, DeviceAllocationsPeak the most held at once,
	// DeviceBindCalls its sparse-binding submissions.
	DeviceBytesPeak       uint64  `json:"device_bytes_peak"`
	DeviceAllocs          uint64  `json:"device_allocs"`
	DeviceAllocationsPeak int     `json:"device_allocations_peak"`
	DeviceBindCalls       uint64  `json:"device_bind_calls"`
	PersistentBytes       uint64  `json:"persistent_bytes"`
	WallS                 float64 `json:"wall_s"`
	// PlanReplaced: the guest installed a layout of its own in the real
	// run (memory_install), so the run did not follow the plan, and its
	// spills and reservations are its own layout's: the verification
	// fails, as it checked nothing of the plan.
	PlanReplaced bool   `json:"plan_replaced"`
	Error        string `json:"error,omitempty"`
}

// planCapacity is what a plan expects to reserve: the pages of its capped
// pools and arena, or a virtual plan's planned bytes; 2^64 - 1 where they
// add up past it (a layout that asks that much plans something).
func planCapacity(l memory.Layout) uint64 {
	var n uint64
	if v, ok := l.Virtual(); ok {
		return v.PlannedBytes
	}
	if pools, ok := l.Sliced(); ok {
		for _, p := range pools {
			if p.Pages != nil {
				hi, lo := bits.Mul64(p.PageSize, *p.Pages)
				if hi != 0 {
					lo = math.MaxUint64
				}
				n = saturate.Add(n, lo)
			}
		}
	}
	if a, ok := l.Arena(); ok {
		for _, p := range a.Pages {
			n = saturate.Add(n, p)
		}
	}
	return n
}

// reportedCapacity is planCapacity as the pools hold it, from their
// report: a capped pool's pages rounded up to the device's alignment, as
// the pools round them (planCapacity takes the layout's figures as
// written, and a page of 1,000,001 B held 1,000,016 B, which read as
// growth past the plan with nothing spilled).
func reportedCapacity(rep memory.Report) uint64 {
	var n uint64
	add := func(b uint64) { n = saturate.Add(n, b) }
	for _, pr := range rep.Dynamic {
		switch k := pr.Kind.(type) {
		case memory.SlicedKind:
			if k.MaxPoolSize != nil {
				add(*k.MaxPoolSize)
			}
		case memory.ExclusiveKind:
			if k.MaxPoolSize != nil {
				add(*k.MaxPoolSize)
			}
		case memory.ArenaKind:
			add(k.PageBytes)
		case memory.VirtualKind:
			// What the pool expects: a plan past the device memory
			// expects the device's.
			add(k.PlannedBytes)
		}
	}
	return n
}

// planWasm measures a guest with a dry run, derives a plan from it,
// installs it, and with --verify runs the guest for real under it.
func planWasm(cmd *cobra.Command, path string, args []string, f planWasmFlags) error {
	ctx := cmd.Context()
	if ctx == nil {
		ctx = context.Background()
	}
	stdout := summaryOut(cmd, f.out)
	guestOut := stdout
	if f.json {
		guestOut = cmd.ErrOrStderr()
	}
	if f.out != "" {
		// A plan that cannot be written is found now, not after the runs.
		if err := checkOutput("--out", f.out, append([]string{path, f.guest.layout}, envFiles(f.guest.env)...)...); err != nil {
			return err
		}
	}
	s, err := openGuest(ctx, path, args, f.guest, guestOut, cmd.ErrOrStderr())
	if err != nil {
		return err
	}
	defer s.close(ctx)
	// A signal stops the guest as a cancellation does. In the dry run
	// there is no plan yet and none is written; in the real run the plan
	// is made, so it is written and reported with the run stopped. The
	// command then ends as the signal would have ended it.
	var (
		measure    *guestMeasurement
		measureErr error
	)
	stopped := whileInterruptible(ctx, func(ctx context.Context) { measure, measureErr = measureGuest(ctx, s, f) })
	err = stopped.around(measureErr)
	if measure == nil {
		return err
	}
	line := planWasmLine{Workload: path, DryRun: planDryRun{
		Report: measure.m.DryRun, DeviceBytes: measure.dryStats.BytesPeak, DeviceAllocs: measure.dry.DeviceAllocs, WallS: measure.m.DryWall.Seconds(),
		PeakLiveBytes: measure.dry.PeakBytes, ReservedPeakBytes: measure.dry.PeakReservedBytes,
	}}
	planned := measure.m.Plan.Kind() != 0 // else the planner refused the dry run
	if planned {
		line.Plan, line.Capacity = &measure.m.Plan, planCapacity(measure.m.Plan)
	}
	if measure.real != nil {
		line.Verify = &planVerification{
			OK: measureErr == nil, Spills: measure.m.Spills, PeakLiveBytes: measure.real.PeakBytes,
			ReservedPeakBytes: measure.real.PeakReservedBytes, DeviceBytesPeak: measure.realStats.BytesPeak,
			DeviceAllocs: measure.real.DeviceAllocs, DeviceAllocationsPeak: measure.realStats.AllocationsPeak,
			DeviceBindCalls: measure.realStats.BindCalls - measure.dryStats.BindCalls,
			WallS:           measure.m.RealWall.Seconds(), PersistentBytes: measure.real.Report.Persistent.Usage.BytesReserved,
			PlanReplaced: measure.m.PlanReplaced,
		}
		if measureErr != nil {
			line.Verify.Error = err.Error()
		}
	}
	if planned && f.out != "" {
		if werr := writePlanFile(f.out, s, measure.m.Plan); werr != nil {
			err = errors.Join(err, werr)
			if !f.json {
				// The summary would say the plan was written.
				return err
			}
		}
	}
	if err != nil {
		line.Error = err.Error()
	}
	if f.json {
		out, jerr := json.Marshal(line)
		if jerr != nil {
			return errors.Join(err, jerr)
		}
		if _, werr := fmt.Fprintf(stdout, "%s\n", out); werr != nil {
			return errors.Join(err, fmt.Errorf("writing the --json line: %w", werr))
		}
	} else if planned {
		if werr := printPlanWasm(stdout, line, f.out); werr != nil {
			return errors.Join(err, fmt.Errorf("writing the summary: %w", werr))
		}
	}
	return err
}

// writePlanFile writes the plan measured in session s to out: the plan
// file of traces, recording the device the plan was measured on, so that
// --layout checks it against the one it runs on.
func writePlanFile(out string, s *guestSession, l memory.Layout) error {
	pf := plan.File{Device: s.client.Properties(), Granule: s.client.SparseGranule(), Traces: []string{}, Layout: l}
	data, err := pf.Encode(plan.CompressedName(out))
	if err != nil {
		return fmt.Errorf("--out: %w", err)
	}
	return writeOutput("--out", out, func(w io.Writer) error {
		_, err := w.Write(data)
		return err
	})
}

type guestMeasurement struct {
	m         *client.Measurement
	dry, real *wasmhost.Result
	// dryStats and realStats are the device's figures after each run; the
	// client is the guest's alone, and the dry run comes first.
	dryStats, realStats client.StorageStats
}

// measureGuest runs the guest under client.MeasurePlan: dry on a probe
// stream, then, verifying, for real on the stream the plan was installed
// on.
func measureGuest(ctx context.Context, s *guestSession, f planWasmFlags) (*guestMeasurement, error) {
	var g guestMeasurement
	workload := func(ctx context.Context) error {
		res, err := s.host.Run(ctx, s.module, append(s.run, wasmhost.OnStream(s.client.Stream(ctx)))...)
		if res != nil && res.DryRun {
			g.dry, g.dryStats = res, s.client.StorageStats()
		} else {
			g.real, g.realStats = res, s.client.StorageStats()
		}
		return err
	}
	// The dry run is measured under the client's layout, --layout's.
	m, err := s.client.MeasurePlan(ctx, workload, client.MeasureOptions{
		Verify: f.verify, Plan: plan.Options{Strength: plan.Strong},
	})
	if m == nil || g.dry == nil {
		return nil, err
	}
	// The dry run ended well: a planner that refused it (m.Plan of kind 0)
	// still leaves its figures to report.
	// A guest that installed a layout of its own (memory_install) in the
	// real run fails it with client.ErrPlanReplaced: its spills were
	// counted from that install, under its own layout.
	g.m = m
	return &g, err
}

func printPlanWasm(to io.Writer, l planWasmLine, out string) error {
	w := &stickyWriter{w: to}
	fmt.Fprintf(w, "dry run:  %.2f s, %s of device memory held; the guest's buffers peaked at %s live, its pools at %s reserved\n",
		l.DryRun.WallS, memory.FormatBytes(l.DryRun.DeviceBytes), memory.FormatBytes(l.DryRun.PeakLiveBytes), memory.FormatBytes(l.DryRun.ReservedPeakBytes))
	fmt.Fprintf(w, "plan:     %s\n", describePlan(*l.Plan, l.Capacity))
	if v := l.Verify; out != "" && v != nil && v.PlanReplaced {
		fmt.Fprintf(w, "          written to %s, but the real run did not run under it (below)\n", printable.Label(out))
	} else if out != "" && v != nil && !v.OK {
		fmt.Fprintf(w, "          written to %s, but the real run under it failed (below)\n", printable.Label(out))
	} else if out != "" {
		fmt.Fprintf(w, "          written to %s (use it with --layout)\n", printable.Label(out))
	}
	if v := l.Verify; v != nil {
		verdict := "ok"
		if !v.OK {
			verdict = "FAILED"
		}
		binds := ""
		if v.DeviceBindCalls > 0 {
			binds = " and " + printable.Count(int(v.DeviceBindCalls), "sparse-binding submission")
		}
		// A run that spilled reserved past the plan, in the pools it
		// spilled to: the parts are said so that they add up.
		past := ""
		if planned := l.Capacity + v.PersistentBytes; v.ReservedPeakBytes > planned {
			past = fmt.Sprintf(", and %s past them", memory.FormatBytes(v.ReservedPeakBytes-planned))
		}
		fmt.Fprintf(w, "verify:   %s in %.2f s: %s; %s live and %s reserved at peak (the plan's %s and the persistent pool's %s%s), %s of device memory in %s%s\n",
			verdict, v.WallS, printable.Count(int(v.Spills), "spill"), memory.FormatBytes(v.PeakLiveBytes), memory.FormatBytes(v.ReservedPeakBytes),
			memory.FormatBytes(l.Capacity), memory.FormatBytes(v.PersistentBytes), past, memory.FormatBytes(v.DeviceBytesPeak), printable.Count(int(v.DeviceAllocs), "device allocation"), binds)
		if v.PlanReplaced {
			fmt.Fprintln(w, "          the guest installed a layout of its own (memory_install): the run did not follow the plan, and its spills and reservations are its own layout's")
		}
	}
	return w.err
}

// describePlan says in a line what a plan reserves and how.
func describePlan(l memory.Layout, capacity uint64) string {
	if a, ok := l.Arena(); ok {
		pages := fmt.Sprintf("%d pages", len(a.Pages))
		if len(a.Pages) == 1 {
			pages = "one page"
		}
		return fmt.Sprintf("an arena of %s, %s in all, with %s the dry run made outside persistent windows; anything else goes to growable pools",
			pages, memory.FormatBytes(capacity), placesFor(len(a.Slots)))
	}
	if pools, ok := l.Sliced(); ok {
		desc := fmt.Sprintf("%s capped at %s in all", printable.Count(len(pools), "sliced pool"), memory.FormatBytes(capacity))
		if brief := l.Brief(); strings.HasPrefix(brief, "{") { // the pools themselves, where they are few
			desc += ": " + brief
		}
		return desc
	}
	if v, ok := l.Virtual(); ok {
		return fmt.Sprintf("a virtual range expecting %s of device memory, with %s the dry run made outside persistent windows; the pool grows past it if the run needs more",
			memory.FormatBytes(v.PlannedBytes), placesFor(len(v.Slots)))
	}
	return l.String()
}

// placesFor is the plan's places for n buffers, in words.
func placesFor(n int) string {
	if n == 1 {
		return "a place for the one buffer"
	}
	return fmt.Sprintf("a place for each of the %d buffers", n)
}

// traceFlagsOnly refuses the flags of a guest's run when `vkrt plan` is
// given traces: the streams are replayed on the device model under the
// Virtual layout, with no device, guest or limits, and a flag that would be
// ignored is a mistake to report.
func traceFlagsOnly(cmd *cobra.Command) error {
	var ignored []string
	cmd.Flags().VisitAll(func(fl *pflag.Flag) {
		if fl.Changed && fl.Name != "out" && fl.Name != "json" {
			ignored = append(ignored, "--"+fl.Name)
		}
	})
	if len(ignored) > 0 {
		return fmt.Errorf("plan: %s: only for a WebAssembly workload; planning from traces takes --out and --json only",
			strings.Join(ignored, ", "))
	}
	return nil
}

func init() {
	var f planWasmFlags
	cmd := &cobra.Command{
		Use:   "plan WORKLOAD.wasm [-- ARGS...] | plan TRACE... --out FILE",
		Short: "dry-run a WebAssembly workload or replay allocation streams, and plan their pools",
		Long: `Measure a guest's memory pools with a dry run (the device holds none of its
memory and computes nothing), derive a plan from the dry run's exact
allocation stream, install it, and with --verify run the guest for real
under the plan: the run fits when nothing spills past the plan's caps. A
guest that installs a layout of its own in that run (memory_install)
replaces the plan: the run did not follow it, and the verification fails,
saying so.
--out writes the plan as a versioned plan file that records the device it
was measured on; --layout FILE of vkrt run and vkrt plan takes it back on a
device of the same alignment and sparse granule and refuses it on another
(its memory size and largest page may differ: the plan's bytes are a
forecast the pools grow past), as vkrt replay refuses it unless it was made
for its device model, those two included. --out /dev/stdout writes the
plan to stdout, and the guest's output and the summary to stderr. A file
holding a layout alone (what --out wrote before) is taken as it is.

SIGINT, SIGTERM or SIGHUP stops the guest: stopped in the dry run, the
command writes no plan; stopped in the --verify run, it writes the plan it
made and reports the verification as failed. It then ends with 128+N, as
the signal would have ended it; a second signal ends it at once.

Given allocation streams (TRACE..., runs of one workload), replay them on the
H200-like device model, plan from the first (its placement, and the device
memory the most demanding of them needs under it) and write a versioned plan
file to --out, which --layout FILE of vkrt replay takes back; each stream's
replay under the plan is reported. Planning from traces takes --out and
--json only: the other flags are a guest's.`,
		Args: cobra.MinimumNArgs(1),
		RunE: func(cmd *cobra.Command, args []string) error {
			if !isWasm(args[0]) {
				if err := traceFlagsOnly(cmd); err != nil {
					return err
				}
				// Arguments after "--" are a guest's: read as traces,
				// "-- --steps 3" was a trace named --steps that is not there.
				if at := cmd.ArgsLenAtDash(); at > 0 && at < len(args) {
					return fmt.Errorf("plan: %s after \"--\": arguments for a WebAssembly workload, and %s is a trace; planning from traces takes none",
						printable.Label(strings.Join(args[at:], " ")), printable.Label(args[0]))
				}
				return planTraces(cmd, args, f.out, f.json)
			}
			return planWasm(cmd, args[0], args[1:], f)
		},
	}
	f.guest.register(cmd)
	cmd.Flags().StringVar(&f.out, "out", "", "write the plan to `FILE`, a versioned plan file recording the device (the workload's) or the device model (traces') it was made for; gzipped where the name ends in .gz")
	cmd.Flags().BoolVar(&f.verify, "verify", false, "run the workload for real under the plan and check it fits (it fails where the guest installs a layout of its own)")
	cmd.Flags().BoolVar(&f.json, "json", false, "JSON: for a workload one object (dry_run, plan, verify; error where the command fails after the dry run), for traces one object per trace and line")
	rootCmd.AddCommand(cmd)
}
