package main

import (
	"errors"
	"fmt"
	"io"
	"math"
	"math/bits"
	"os"
	goruntime "runtime"
	"slices"
	"strings"
	"syscall"
	"time"

	json "github.com/goccy/go-json"
	"github.com/schollz/progressbar/v3"
	"github.com/spf13/cobra"
	"golang.org/x/term"

	"github.com/vkrt/vkrt/dryrun/plan"
	"github.com/vkrt/vkrt/dryrun/replay"
	"github.com/vkrt/vkrt/dryrun/trace"
	"github.com/vkrt/vkrt/internal/printable"
	"github.com/vkrt/vkrt/internal/saturate"
	"github.com/vkrt/vkrt/internal/tlsfref"
	"github.com/vkrt/vkrt/internal/torchalloc"
	"github.com/vkrt/vkrt/memory"
)

type replayFlags struct {
	layout   string
	plan     bool
	json     bool
	bench    bool
	passes   int
	markdown bool
	pytorch  bool
	// secondRuns is a directory of second runs of the traces, by name;
	// seconds, the second run found there of each trace's path, as the
	// command checked them before the first replay.
	secondRuns string
	seconds    map[string]string
}

func init() {
	var f replayFlags
	cmd := &cobra.Command{
		Use:   "replay TRACE...",
		Short: "replay allocation streams dry; with --plan, measure, derive a plan, replay under it and compare",
		Long: `Replay allocation streams (one event a line: "a <id> <bytes> <stream>" or
"f <id>", gzip allowed) against the memory pools of an H200-like device over a
storage that counts device allocations and holds no memory.

--layout is a preset (virtual, the default; sub-slices, exclusive-pages,
direct), a layout JSON literal, or a file holding one or a plan file (vkrt
plan --out of traces: one made for another device is refused). The device model has
sparse residency in 64 KiB granules, as the H200's Vulkan driver reports: the virtual layout
binds device memory under live bytes only, and the replay counts the binds (with --json the
memory they bind and unbind too: bound_bytes, unbound_bytes). With --plan the replay is the dry run: a plan
is derived from it and the stream is replayed again under the plan.

--bench times the layout beside a reference, in this process and on the
same stream: AMD's Vulkan Memory Allocator's TLSF placement in a virtual
block (written again in Go, internal/tlsfref; one 32 GiB block, or the
power of two a stream needs past it, alignment 32), the peer
testdata/traces/README.md records. Each side's ns/event is the
wall-clock time from the stream's first event to its last over its events,
the setup (reading, making the pools) not counted. The two sides run one
after the other, alternating, each pass after a garbage collection, and
the best pass of each side is kept: on a busy machine a pass only ever gets
slower. By default they pass as many times as fill 2 s of the two sides
together, 5 to 1,000 times each: the best of 7 passes of a shipped stream
moved by up to a fifth between two runs of the command, the best of 50 by
under a tenth. --passes N times N passes each. "ns ratio" is the layout's over the
reference's, "ref extent" the highest end the reference's block reached
over peak live bytes. With --plan the stream is timed under its plan too,
alternating with as many more passes of the reference ("plan ns/event",
"plan ns ratio"; plan_ns_per_event and plan_ns_ratio in --json).

--pytorch replays each stream through a model of PyTorch's CUDA caching
allocator as well (internal/torchalloc: PyTorch 2.11's rules, which give the
figures recorded in testdata/traces/README.md on the shipped streams, but
for llama_generate's default mode: 1.127× (110) against 1.129× (111)), with
its default segments and with expandable segments: reserved peak over peak
live bytes, and device allocations (cudaMalloc calls, or mapping calls).`,
		Args: cobra.MinimumNArgs(1),
		RunE: func(cmd *cobra.Command, args []string) error {
			return runReplay(cmd, args, f)
		},
	}
	cmd.Flags().StringVar(&f.layout, "layout", "virtual", "pool `LAYOUT`: a preset, a layout JSON literal, or a file holding one or a plan file (vkrt plan --out)")
	cmd.Flags().BoolVar(&f.plan, "plan", false, "derive a plan from the replay and replay under it")
	cmd.Flags().BoolVar(&f.json, "json", false, "one JSON object per trace and line")
	cmd.Flags().BoolVar(&f.bench, "bench", false, "report the cost of one replayed event, beside VMA's TLSF placement on the same stream")
	cmd.Flags().IntVar(&f.passes, "passes", 0, "with --bench: `N` timed passes of each side, alternating, the best of each kept (at most 10,000); 0: as many as fill 2 s of both, 5 to 1,000")
	cmd.Flags().StringVar(&f.secondRuns, "second-runs", "", "with --plan: a directory `DIR` of second runs of the traces (same names: NAME.trace.gz or NAME.trace, not both); each runs under the first run's plan and the other way round")
	cmd.Flags().BoolVar(&f.pytorch, "pytorch", false, "also replay each stream through a model of PyTorch's caching allocator (default and expandable segments)")
	cmd.Flags().BoolVar(&f.markdown, "markdown", false, "the table in Markdown, deterministic figures only (the README's plan table)")
	rootCmd.AddCommand(cmd)
}

// replayLayout reads --layout: a preset name or JSON literal, else a file
// holding one, checked on the replay's device model.
func replayLayout(arg string) (memory.Layout, error) { return honouredLayout("--layout", arg) }

// layoutFlag is replayLayout for a flag of another name (report's --plan).
func layoutFlag(flag, arg string) (memory.Layout, error) {
	l, err := memory.ParseLayout(arg)
	if err == nil {
		return l, nil
	}
	if _, statErr := os.Stat(arg); statErr != nil {
		// A literal of more than a file name's 255 bytes (a plan pasted
		// from --json) is no name at all: its mistake was told as "open
		// {…}: file name too long".
		if plan.IsFile([]byte(arg)) {
			// A plan file's text ("$(cat plan.json)") was told it has
			// two variants, "vkrt_plan" and "device".
			return memory.Layout{}, fmt.Errorf("%s holds a plan file's JSON, not a layout: give the plan file's name (%s FILE), which is read with the device it was made for", flag, flag)
		}
		if t := strings.TrimSpace(arg); t == "" || t[0] == '{' || t[0] == '"' {
			// A literal that does not hold, or none at all: memory says
			// which, where "neither a preset, a layout JSON literal nor a
			// file" said nothing of a blank one.
			return memory.Layout{}, fmt.Errorf("%s: %w", flag, err)
		}
		if _, err := os.Lstat(arg); err == nil && errors.Is(statErr, os.ErrNotExist) {
			// A link whose file is gone was told it is no file at all.
			return memory.Layout{}, fmt.Errorf("%s %s is a symbolic link to a file that is not there: %w", flag, quoteArg(arg), statErr)
		}
		if errors.Is(statErr, os.ErrNotExist) || errors.Is(statErr, syscall.ENAMETOOLONG) {
			return memory.Layout{}, fmt.Errorf("%s %s is neither a preset, a layout JSON literal nor a file: %w", flag, quoteArg(arg), err)
		}
	}
	if l, err = layoutFile(arg); err != nil {
		return memory.Layout{}, fmt.Errorf("%s: %w", flag, err)
	}
	return l, nil
}

// honouredLayout is layoutFlag's layout, checked on the replay's device
// model as a replay checks it, building a stream's pools: one the pools
// cannot honour (an empty pool list, a page of 0 B) is the flag's error,
// said once, before any trace is read; it was each trace's, the same
// words a trace each ("replay: NAME: the pool layout cannot be honoured:
// …"), after the trace was read.
func honouredLayout(flag, arg string) (memory.Layout, error) {
	l, err := layoutFlag(flag, arg)
	if err != nil {
		return l, err
	}
	// The pools of a replay's stream, on its storage; what the layout asks
	// past the device the replay itself warns of.
	storage := replay.NewCountingStorage(replay.H200().MemorySize)
	storage.Granule = replay.H200Granule
	_, err = memory.NewManager(storage, replay.H200(), l, memory.WithLayoutWarnings(func(memory.Layout, string) {}))
	if err != nil {
		return memory.Layout{}, fmt.Errorf("%s: %w (on the replay's H200 device model)", flag, err)
	}
	return l, nil
}

// quoteArg quotes at most 60 bytes of a command-line argument for an error.
func quoteArg(arg string) string {
	if len(arg) > 60 {
		return fmt.Sprintf("%q…", arg[:60])
	}
	return fmt.Sprintf("%q", arg)
}

// replayLine is one trace's line of --json output.
type replayLine struct {
	Trace         string `json:"trace"`
	Events        int    `json:"events"`
	Allocations   int    `json:"allocations"`
	PeakLiveBytes uint64 `json:"peak_live_bytes"`
	replayFigures
	// Report is the pools' report of the first stream the trace allocates
	// on; Streams, for a trace of several streams, every stream's (the
	// line showed the first stream's alone).
	Report  memory.Report      `json:"report"`
	Streams []streamReportLine `json:"streams,omitempty"`
	Plan    *replayFigures     `json:"plan,omitempty"`
	// With --pytorch: the modelled PyTorch allocator on the same stream.
	PyTorch *replayPyTorch `json:"pytorch,omitempty"`
	// With --bench: the layout's and the reference's best ns/event, the
	// ratio of the two, the reference's extent and the passes timed.
	NsPerEvent           *float64 `json:"ns_per_event,omitempty"`
	ReferenceNsPerEvent  *float64 `json:"reference_ns_per_event,omitempty"`
	NsRatio              *float64 `json:"ns_ratio,omitempty"`
	ReferenceExtentBytes *uint64  `json:"reference_extent_bytes,omitempty"`
	BenchPasses          int      `json:"bench_passes,omitempty"`
	// With --plan too: the best ns/event under the plan, and over the
	// reference's.
	PlanNsPerEvent  *float64 `json:"plan_ns_per_event,omitempty"`
	PlanNsRatio     *float64 `json:"plan_ns_ratio,omitempty"`
	PlanBenchPasses int      `json:"plan_bench_passes,omitempty"`
	// With --second-runs, when the directory holds the trace's second run.
	SecondRun *secondRunLine `json:"second_run,omitempty"`
}

// streamReportLine is one stream's pools after the replay.
type streamReportLine struct {
	Stream uint32        `json:"stream"`
	Report memory.Report `json:"report"`
}

// secondRunLine is a trace's second run: its peak live bytes, it under
// the first run's plan, and the first run under the second's.
type secondRunLine struct {
	PeakLiveBytes     uint64        `json:"peak_live_bytes"`
	UnderFirstRunPlan replayFigures `json:"under_first_run_plan"`
	FirstRunUnderPlan replayFigures `json:"first_run_under_its_plan"`
}

type replayPyTorch struct {
	Default    torchFigures `json:"default"`
	Expandable torchFigures `json:"expandable"`
}

type torchFigures struct {
	ReservedPeakBytes uint64  `json:"reserved_peak_bytes"`
	Ratio             float64 `json:"ratio"`
	DeviceAllocs      uint64  `json:"device_allocs"`
}

func newTorchFigures(r torchalloc.Result) torchFigures {
	return torchFigures{ReservedPeakBytes: r.ReservedPeakBytes, Ratio: r.Ratio(), DeviceAllocs: r.DeviceAllocs}
}

// replayFigures are what a replay under one layout reserved: the top of a
// --json line for the layout replayed, its "plan" for the trace's plan.
type replayFigures struct {
	Layout            memory.Layout `json:"layout"`
	ReservedPeakBytes uint64        `json:"reserved_peak_bytes"`
	DriverAllocs      uint64        `json:"driver_allocs"`
	BindCalls         uint64        `json:"bind_calls"`
	Binds             uint64        `json:"binds"`
	BoundBytes        uint64        `json:"bound_bytes"`
	UnboundBytes      uint64        `json:"unbound_bytes"`
	Spills            uint64        `json:"spills"`
	// PlanCapacity is what the layout plans to reserve (a virtual plan's
	// planned bytes, capped pools' pages; absent for an unplanned layout),
	// GrowthBytes how far the replay reserved past it.
	PlanCapacity uint64 `json:"plan_capacity_bytes,omitempty"`
	GrowthBytes  uint64 `json:"growth_bytes"`
}

func figuresOf(r *replay.Result) replayFigures {
	capacity := streamsCapacity(r)
	return replayFigures{Layout: r.Layout, ReservedPeakBytes: r.ReservedPeakBytes, DriverAllocs: r.DriverAllocs,
		BindCalls: r.BindCalls, Binds: r.Binds, BoundBytes: r.BoundBytes, UnboundBytes: r.UnboundBytes,
		Spills: r.Spills, PlanCapacity: capacity,
		GrowthBytes: growth(r.ReservedPeakBytes, capacity, persistentBytes(r))}
}

// streamsCapacity is what the layout plans for every stream the replay
// made pools for: each stream's pools follow the layout on their own.
func streamsCapacity(r *replay.Result) uint64 {
	var n uint64
	for _, s := range r.Streams {
		n = saturate.Add(n, reportedCapacity(s.Report))
	}
	return n
}

// persistentBytes is what every stream's persistent pool holds at the end
// of the replay: not the plan's to count as growth.
func persistentBytes(r *replay.Result) uint64 {
	var n uint64
	for _, s := range r.Streams {
		n += s.Report.Persistent.Usage.BytesReserved
	}
	return n
}

// replayProgressEvents is the stream length past which a terminal gets a
// progress bar: shorter replays finish before one would be read.
const replayProgressEvents = 100_000

func runReplay(cmd *cobra.Command, paths []string, f replayFlags) error {
	if f.secondRuns != "" && !f.plan {
		return errors.New("--second-runs needs --plan: each run goes under the other's plan")
	}
	if f.markdown && (f.json || f.bench || f.pytorch) {
		return errors.New("--markdown is a table of deterministic figures: it takes neither --json nor --bench, and has no columns for --pytorch")
	}
	if f.passes < 0 || f.passes > maxBenchPasses {
		return fmt.Errorf("--passes %d: want a number of passes up to %d, or 0 for as many as fill %s", f.passes, maxBenchPasses, benchTime)
	}
	if cmd.Flags().Changed("passes") && !f.bench {
		return errors.New("--passes needs --bench: it is the number of timed passes")
	}
	if err := checkTraceArgs(paths); err != nil {
		return err
	}
	if err := checkStreamsReadOnce(append([]namedInput{layoutInput("--layout", f.layout)}, traceInputs(paths)...)...); err != nil {
		return err
	}
	if f.secondRuns != "" {
		// A directory that is not there would read as one holding no
		// second run of any trace.
		if fi, err := os.Stat(f.secondRuns); err != nil {
			return fmt.Errorf("--second-runs: %w", err)
		} else if !fi.IsDir() {
			return fmt.Errorf("--second-runs %s: not a directory", f.secondRuns)
		}
		// One that holds the second run of none of the traces is a
		// mistake, not a table of dashes.
		// A trace of the directory itself would be its own second run: a
		// plan replayed on its own stream, shown as another run's.
		var seconds []string
		f.seconds = map[string]string{}
		for _, p := range paths {
			second, err := secondRunPath(f.secondRuns, p)
			if err != nil {
				return err
			}
			if second != "" && sameFile(p, second) {
				return fmt.Errorf("--second-runs %s holds %s itself, not a second run of it: name the directory of the second runs", f.secondRuns, p)
			}
			if second != "" {
				seconds = append(seconds, second)
				f.seconds[p] = second
			}
		}
		if len(seconds) == 0 {
			return fmt.Errorf("--second-runs %s holds the second run of none of the traces (NAME.trace.gz or NAME.trace, NAME as the first run's)", f.secondRuns)
		}
		// The second runs are checked as the traces are: a directory of
		// a trace's name, a broken link or a WebAssembly workload was found
		// only when its turn came, after the traces before it had been
		// replayed and planned, and a directory was "reading DIR/NAME.trace
		// after line 0: … is a directory".
		if err := checkTraceArgs(seconds); err != nil {
			return fmt.Errorf("--second-runs: %w", err)
		}
	}
	layout, err := replayLayout(f.layout)
	if err != nil {
		return err
	}
	return replayAll(cmd.OutOrStdout(), newReplayProgress(cmd.ErrOrStderr()), paths, layout, f)
}

// replayAll replays each trace under layout, showing the work on bar, and
// writes the results to out.
func replayAll(out io.Writer, bar *replayProgress, paths []string, layout memory.Layout, f replayFlags) error {
	var rows []replayRow
	var failed []error
	names, plain := traceNames(paths)
	for i, path := range paths {
		row, err := replayTrace(path, names[i], layout, f, bar)
		row.name = plain[i]
		if err != nil {
			// The other traces still run, and those done are still shown.
			failed = append(failed, err)
			continue
		}
		if f.json {
			// The bar goes first: on a terminal, stdout and stderr share
			// the line it is drawn on.
			bar.clear()
			if err := writeReplayLine(out, row, f); err != nil {
				return err
			}
		}
		rows = append(rows, row)
	}
	bar.clear()
	if !f.json && len(rows) > 0 {
		write := writeReplayTable
		if f.markdown {
			write = writeReplayMarkdown
		}
		if err := write(out, rows, f); err != nil {
			return err
		}
	}
	return errors.Join(failed...)
}

// replayTrace reads, replays and, with --plan, plans one trace, named
// name, showing its progress on bar.
func replayTrace(path, name string, layout memory.Layout, f replayFlags, bar *replayProgress) (replayRow, error) {
	tr, err := readTrace(path, bar)
	if err != nil {
		return replayRow{}, err
	}
	tr.Name = name
	long := len(tr.Events) >= replayProgressEvents || f.plan
	bar.stage("replaying "+tr.Name, bar.total(long, len(tr.Events)))
	opts := replay.Options{Progress: bar.set}
	if f.bench {
		goruntime.GC() // as before every later timed pass
	}
	dry, timing, err := replay.Measure(tr, layout, opts)
	if err != nil {
		return replayRow{}, err
	}
	row := replayRow{dry: dry, timing: timing}
	if f.pytorch {
		bar.stage("replaying "+tr.Name+" through PyTorch's allocator", bar.total(long, 2))
		row.torch = new([2]torchalloc.Result)
		for i, mode := range []torchalloc.Mode{torchalloc.Default, torchalloc.Expandable} {
			if row.torch[i], err = torchalloc.Replay(tr, mode); err != nil {
				return replayRow{}, fmt.Errorf("%s through PyTorch's allocator: %w", tr.Name, err)
			}
			bar.set(i+1, 2)
		}
	}
	if f.bench {
		bar.stage("timing "+tr.Name+" beside the reference", bar.total(long, benchProgressSteps))
		if row.passes, err = row.benchBeside(tr, layout, &row.timing, f.passes, bar.set); err != nil {
			return replayRow{}, err
		}
	}
	if !f.plan {
		return row, nil
	}
	bar.stage("planning "+tr.Name, bar.total(long, 1))
	planned, err := plan.Derive(dry.Report, plan.Options{Strength: plan.Strong, Trace: tr, Progress: bar.setTotal})
	if err != nil {
		return replayRow{}, fmt.Errorf("planning %s: %w", tr.Name, err)
	}
	bar.stage("replaying "+tr.Name+" under its plan", bar.total(long, len(tr.Events)))
	if row.plan, err = replay.Run(tr, planned, opts); err != nil {
		return replayRow{}, fmt.Errorf("replaying %s under its plan: %w", tr.Name, err)
	}
	if f.bench {
		bar.stage("timing "+tr.Name+" under its plan beside the reference", bar.total(long, benchProgressSteps))
		if row.planPasses, err = row.benchBeside(tr, planned, &row.planTiming, f.passes, bar.set); err != nil {
			return replayRow{}, fmt.Errorf("timing %s under its plan: %w", tr.Name, err)
		}
	}
	// The second run found when the command checked them: one removed
	// since is an error, where a second look for it found none and the
	// row read as a trace with no second run.
	if second := f.seconds[path]; second != "" {
		bar.stage("second run of "+tr.Name, bar.total(long, 1))
		if row.second, err = replaySecondRun(tr, path, second, planned, layout, f.secondRuns); err != nil {
			return replayRow{}, err
		}
	}
	return row, nil
}

type replayRow struct {
	// name is the trace's name itself, for --json; the replay's results
	// name it as it shows (traceNames).
	name      string
	dry, plan *replay.Result
	// timing is the dry replay's; with --bench the best pass of the layout,
	// and reference and refTiming the reference's result and best pass.
	timing    replay.Timing
	reference *tlsfref.Result
	refTiming replay.Timing
	// planTiming: with --plan and --bench, the best pass under the plan,
	// timed alternately with more passes of the reference.
	planTiming replay.Timing
	// passes and planPasses are the passes timed of each side.
	passes, planPasses int
	second             *secondRun // with --second-runs, when the trace has one
	// torch: with --pytorch, the modelled PyTorch allocator's default and
	// expandable segments.
	torch *[2]torchalloc.Result
}

// benchTime, benchMinPasses and benchMaxPasses: by default --bench times
// passes of the two sides until they have taken benchTime together, at
// least benchMinPasses and at most benchMaxPasses of each. The best of a
// few passes is the best of a cold machine's: gpt2_train's ns ratio read
// 1.73× and 2.06× in two runs of seven passes, 1.72× and 1.77× of fifty.
const (
	benchTime      = 2 * time.Second
	benchMinPasses = 5
	benchMaxPasses = 1000
)

// maxBenchPasses bounds --passes: each pass replays the whole stream on
// both sides (llama_generate's 286,475 events take about 22 ms the pair),
// so 10,000 of them already run for minutes, and a mistyped count ran on
// with nothing to stop it but a signal.
const maxBenchPasses = 10_000

// benchProgressSteps is the length of a timing stage's bar: a percentage,
// as a stage timed by the clock has no count of passes to show.
const benchProgressSteps = 100

// benchBeside times the stream under layout into best and the reference's
// into the row, alternating, each pass after a garbage collection, so that
// one side's garbage is not collected on the other's time, and keeps the
// best of each: passes of each, or with passes 0 as many as benchTime
// holds (benchMinPasses to benchMaxPasses). It returns the passes timed. A
// best already timed (the dry replay that made the row) counts as the
// layout's first pass.
func (r *replayRow) benchBeside(tr *trace.Trace, layout memory.Layout, best *replay.Timing, passes int, progress func(done, total int)) (int, error) {
	start := time.Now()
	for p := 0; ; p++ {
		if benchDone(p, passes, time.Since(start)) {
			return p, nil
		}
		if p > 0 || best.Events == 0 {
			goruntime.GC()
			_, t, err := replay.Measure(tr, layout, replay.Options{})
			if err != nil {
				return p, err
			}
			*best = faster(*best, t)
		}
		goruntime.GC()
		ref, t, err := tlsfref.Measure(tr)
		if err != nil {
			return p, err
		}
		if r.reference == nil {
			r.reference = ref
		}
		r.refTiming = faster(r.refTiming, t)
		progress(benchProgress(p+1, passes, time.Since(start)), benchProgressSteps)
	}
}

// benchDone says whether timing ends after done passes of each side, taken
// in elapsed: passes of them, or by default (passes 0) benchTime of them,
// within benchMinPasses and benchMaxPasses.
func benchDone(done, passes int, elapsed time.Duration) bool {
	if passes > 0 {
		return done >= passes
	}
	return done >= benchMaxPasses || done >= benchMinPasses && elapsed >= benchTime
}

// benchProgress is how far, in benchProgressSteps, timing is after done
// passes taken in elapsed: the share of the passes, or by default the
// lesser of the minimum passes' share and the clock's, or the maximum
// passes' share where that is more.
func benchProgress(done, passes int, elapsed time.Duration) int {
	var share float64
	if passes > 0 {
		share = float64(done) / float64(passes)
	} else {
		share = max(min(float64(done)/benchMinPasses, elapsed.Seconds()/benchTime.Seconds()), float64(done)/benchMaxPasses)
	}
	return int(min(share, 1) * benchProgressSteps)
}

// faster is the quicker of two timings of one stream; a zero Timing is
// none yet.
func faster(a, b replay.Timing) replay.Timing {
	if a.Events == 0 || b.Elapsed < a.Elapsed {
		return b
	}
	return a
}

// nsRatio is the layout's ns/event over the reference's.
func (r *replayRow) nsRatio() float64 { return r.overReference(r.timing) }

// planNsRatio is the plan's ns/event over the reference's.
func (r *replayRow) planNsRatio() float64 { return r.overReference(r.planTiming) }

func (r *replayRow) overReference(t replay.Timing) float64 {
	ref := r.refTiming.NsPerEvent()
	if ref == 0 {
		return 0
	}
	return t.NsPerEvent() / ref
}

func writeReplayLine(w io.Writer, row replayRow, f replayFlags) error {
	d := row.dry
	line := replayLine{Trace: row.name, Events: d.Events, Allocations: d.Allocations, PeakLiveBytes: d.PeakLiveBytes,
		replayFigures: figuresOf(d), Report: d.Report}
	if len(d.Streams) > 1 {
		for _, s := range d.Streams {
			line.Streams = append(line.Streams, streamReportLine{Stream: s.Stream, Report: s.Report})
		}
	}
	if row.plan != nil {
		plan := figuresOf(row.plan)
		line.Plan = &plan
	}
	if s := row.second; s != nil {
		line.SecondRun = &secondRunLine{PeakLiveBytes: s.dry.PeakLiveBytes, UnderFirstRunPlan: figuresOf(s.underFirst),
			FirstRunUnderPlan: figuresOf(s.firstUnder)}
	}
	if row.torch != nil {
		line.PyTorch = &replayPyTorch{Default: newTorchFigures(row.torch[0]), Expandable: newTorchFigures(row.torch[1])}
	}
	if f.bench {
		ns, ref, ratio, extent := row.timing.NsPerEvent(), row.refTiming.NsPerEvent(), row.nsRatio(), row.reference.ExtentBytes
		line.NsPerEvent, line.ReferenceNsPerEvent, line.NsRatio, line.ReferenceExtentBytes = &ns, &ref, &ratio, &extent
		line.BenchPasses = row.passes
		if row.plan != nil {
			line.PlanBenchPasses = row.planPasses
			planNs, planRatio := row.planTiming.NsPerEvent(), row.planNsRatio()
			line.PlanNsPerEvent, line.PlanNsRatio = &planNs, &planRatio
		}
	}
	b, err := json.Marshal(line)
	if err != nil {
		return fmt.Errorf("encoding the result of %s: %w", d.Trace, err)
	}
	_, err = w.Write(append(b, '\n'))
	return err
}

func writeReplayTable(w io.Writer, rows []replayRow, f replayFlags) error {
	t := textTable{alignRight: true}
	// bind calls: sparse-binding submissions (the Virtual layout's), the
	// device cost the ratio hides: on the H200 131 µs for one granule and
	// 0.5–1.6 ms for these streams' (BenchmarkSparseBind,
	// BenchmarkReplayOnTheDevice in vk).
	head := []string{"trace", "events", "peak live", "reserved peak", "ratio", "driver allocs", "bind calls"}
	// Under a plan (--layout FILE), what the run needed past it: the
	// warnings that say so go to the replay's discarded logger. A layout
	// that plans no bytes may count spills too (slots alone, a growable
	// pool).
	underPlan := len(rows) > 0 && planCapacity(rows[0].dry.Layout) > 0 ||
		slices.ContainsFunc(rows, func(r replayRow) bool { return r.dry.Spills > 0 })
	if underPlan {
		head = append(head, "spills")
	}
	if f.bench {
		head = append(head, "ns/event", "ref ns/event", "ns ratio", "ref extent")
	}
	if f.plan {
		head = append(head, "plan", "planned peak", "ratio", "driver allocs", "bind calls", "spills")
		if f.bench {
			head = append(head, "plan ns/event", "plan ns ratio")
		}
	}
	if f.secondRuns != "" {
		head = append(head, secondRunHead...)
	}
	if f.pytorch {
		head = append(head, "PyTorch default", "PyTorch expandable")
	}
	t.row(head...)
	for _, r := range rows {
		d := r.dry
		cells := []string{d.Trace, fmt.Sprint(d.Events), memory.FormatBytes(d.PeakLiveBytes), memory.FormatBytes(d.ReservedPeakBytes),
			fmt.Sprintf("%.3f×", d.Ratio()), fmt.Sprint(d.DriverAllocs), fmt.Sprint(d.BindCalls)}
		if underPlan {
			cells = append(cells, fmt.Sprint(d.Spills))
		}
		if f.bench {
			cells = append(cells, fmt.Sprintf("%.1f", r.timing.NsPerEvent()), fmt.Sprintf("%.1f", r.refTiming.NsPerEvent()),
				fmt.Sprintf("%.2f×", r.nsRatio()), fmt.Sprintf("%.3f×", r.reference.Ratio()))
		}
		if r.plan != nil {
			p := r.plan
			cells = append(cells, summarizeLayout(p.Layout), memory.FormatBytes(p.ReservedPeakBytes),
				fmt.Sprintf("%.3f×", p.Ratio()), fmt.Sprint(p.DriverAllocs), fmt.Sprint(p.BindCalls), fmt.Sprint(p.Spills))
			if f.bench {
				cells = append(cells, fmt.Sprintf("%.1f", r.planTiming.NsPerEvent()), fmt.Sprintf("%.2f×", r.planNsRatio()))
			}
		}
		if f.secondRuns != "" {
			cells = append(cells, r.second.cells()...)
		}
		if r.torch != nil {
			cells = append(cells, r.torch[0].String(), r.torch[1].String())
		}
		t.row(cells...)
	}
	if err := t.write(w); err != nil {
		return err
	}
	if len(rows) > 0 {
		fmt.Fprintf(w, "\nlayout: %s\n", summarizeLayout(rows[0].dry.Layout))
		if f.bench {
			passes := passesTimed(rows)
			timed := "the best of " + passes + " passes each"
			if passes == "1" { // --passes 1
				timed = "one pass each"
			}
			fmt.Fprintf(w, "ref: VMA's TLSF virtual block (one 32 GiB block, or the power of two a stream needs past it; alignment 32); ns/event: %s, alternating\n", timed)
		}
	}
	return nil
}

// passesTimed says how many passes of each side the rows timed: one
// number, or the least and most.
func passesTimed(rows []replayRow) string {
	least, most := rows[0].passes, rows[0].passes
	for _, r := range rows {
		for _, n := range []int{r.passes, r.planPasses} {
			if n > 0 {
				least, most = min(least, n), max(most, n)
			}
		}
	}
	if least == most {
		return fmt.Sprint(least)
	}
	return fmt.Sprintf("%d to %d", least, most)
}

// writeReplayMarkdown writes the table as Markdown: reserved peak over peak
// live bytes with the device allocations in brackets, under the replayed
// layout and, with --plan, under each trace's plan. Every figure is
// deterministic, so the README's table regenerates byte for byte.
func writeReplayMarkdown(w io.Writer, rows []replayRow, f replayFlags) error {
	var b strings.Builder
	head := []string{"trace", "events", "peak live", rows[0].dry.Layout.Kind().String() + " layout"}
	if f.plan {
		head = append(head, "plan", "planned", "spills")
	}
	if f.secondRuns != "" {
		head = append(head, secondRunHead...)
	}
	b.WriteString("| " + strings.Join(head, " | ") + " |\n|" + strings.Repeat(" --- |", len(head)) + "\n")
	for _, r := range rows {
		d := r.dry
		// A | in a trace's name would end its cell.
		cells := []string{strings.ReplaceAll(d.Trace, "|", `\|`), fmt.Sprint(d.Events), memory.FormatBytes(d.PeakLiveBytes),
			fmt.Sprintf("%.3f× (%d)", d.Ratio(), d.DriverAllocs)}
		if r.plan != nil {
			p := r.plan
			cells = append(cells, summarizeLayout(p.Layout), fmt.Sprintf("%.4f× (%d)", p.Ratio(), p.DriverAllocs), fmt.Sprint(p.Spills))
		}
		if f.secondRuns != "" {
			cells = append(cells, r.second.cells()...)
		}
		b.WriteString("| " + strings.Join(cells, " | ") + " |\n")
	}
	_, err := io.WriteString(w, b.String())
	return err
}

// summarizeLayout is a layout in a few words: an arena plan's JSON runs to
// megabytes.
func summarizeLayout(l memory.Layout) string {
	if a, ok := l.Arena(); ok {
		var bytes uint64
		for _, p := range a.Pages {
			bytes += p
		}
		return fmt.Sprintf("arena: %s, %s, %s", printable.Count(len(a.Pages), "page"), memory.FormatBytes(bytes), printable.Count(len(a.Slots), "slot"))
	}
	if v, ok := l.Virtual(); ok && (v.PlannedBytes != 0 || len(v.Slots) > 0) {
		return fmt.Sprintf("virtual: %s planned, %s", memory.FormatBytes(v.PlannedBytes), printable.Count(len(v.Slots), "slot"))
	}
	if pools, ok := l.Sliced(); ok {
		var bytes uint64
		capped := 0
		for _, p := range pools {
			if p.Pages != nil {
				capped++
				hi, lo := bits.Mul64(*p.Pages, p.PageSize)
				sum, carry := bits.Add64(bytes, lo, 0)
				if hi != 0 || carry != 0 {
					sum = math.MaxUint64
				}
				bytes = sum
			}
		}
		switch capped {
		case len(pools):
			return fmt.Sprintf("sliced: %s capped at %s", printable.Count(len(pools), "pool"), memory.FormatBytes(bytes))
		case 0:
			return fmt.Sprintf("sliced: %s, uncapped", printable.Count(len(pools), "pool"))
		}
		return fmt.Sprintf("sliced: %s, %d capped at %s, %d uncapped", printable.Count(len(pools), "pool"), capped,
			memory.FormatBytes(bytes), len(pools)-capped)
	}
	return l.Kind().String()
}

// traceProgressBytes is the trace file size past which a terminal gets a
// bar of its reading: a gzipped trace of 4 MiB holds about 1.5 million
// events, a second or more to read.
const traceProgressBytes = 4 << 20

// readTrace reads the trace at path, showing on bar how many of its
// mebibytes it has read when it is large.
func readTrace(path string, bar *replayProgress) (*trace.Trace, error) {
	total := 0
	if fi, err := os.Stat(path); err == nil && fi.Mode().IsRegular() && fi.Size() >= traceProgressBytes {
		total = int((fi.Size() + 1<<20 - 1) >> 20)
	}
	bar.stage("reading "+path+" (MiB)", total)
	return trace.ReadFileProgress(path, func(read, _ int64) { bar.set(int(read>>20), total) })
}

// replayProgress is a progress bar on a terminal's stderr for the stage of
// the work under way (reading, replaying, planning a trace), and nothing
// when stderr is piped or the stage is short.
type replayProgress struct {
	bar     *progressbar.ProgressBar
	w       io.Writer
	visible bool
}

func newReplayProgress(w io.Writer) *replayProgress {
	p := &replayProgress{w: w}
	if f, ok := w.(*os.File); ok && term.IsTerminal(int(f.Fd())) {
		p.visible = true
	}
	return p
}

// total is the bar's length for a stage of n steps: 0, no bar, unless the
// stage is long.
func (p *replayProgress) total(long bool, n int) int {
	if !long {
		return 0
	}
	return max(n, 1)
}

// stage starts a stage of total steps, or clears the bar when total is 0.
func (p *replayProgress) stage(desc string, total int) {
	if !p.visible {
		return
	}
	if total == 0 {
		p.clear()
		p.bar = nil
		return
	}
	// A bar of its own for each stage: the last one's, reset and given
	// the new length, drew the old label with the new count first.
	p.clear()
	p.bar = progressbar.NewOptions(total, progressbar.OptionSetWriter(p.w), progressbar.OptionShowCount(),
		progressbar.OptionSetElapsedTime(true), progressbar.OptionClearOnFinish(), progressbar.OptionSetWidth(20),
		// A path or an environment's name in it is the user's: what a
		// terminal acts on is shown, not sent.
		progressbar.OptionSetDescription(printable.Escaped(desc)))
}

// set moves the bar to done of total steps.
func (p *replayProgress) set(done, total int) {
	if p.bar != nil {
		_ = p.bar.Set(done)
	}
}

// setTotal is set for work whose total is known only once it starts.
func (p *replayProgress) setTotal(done, total int) {
	if p.bar != nil {
		if p.bar.GetMax() != total {
			p.bar.ChangeMax(total)
		}
		_ = p.bar.Set(done)
	}
}

func (p *replayProgress) clear() {
	if p.bar != nil {
		_ = p.bar.Clear()
	}
}
