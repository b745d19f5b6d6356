package main

import (
	"bufio"
	"bytes"
	"compress/gzip"
	"flag"
	"fmt"
	"log/slog"
	"os"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"

	json "github.com/goccy/go-json"
	"github.com/spf13/cobra"
	"github.com/spf13/pflag"
	"github.com/stretchr/testify/require"

	"github.com/vkrt/vkrt/dryrun/plan"
	"github.com/vkrt/vkrt/dryrun/replay"
	"github.com/vkrt/vkrt/dryrun/trace"
	"github.com/vkrt/vkrt/internal/gzread"
	"github.com/vkrt/vkrt/internal/tlsfref"
	"github.com/vkrt/vkrt/internal/tracetest"
	"github.com/vkrt/vkrt/memory"
	vkruntime "github.com/vkrt/vkrt/runtime"
)

// executeReplay runs `vkrt replay args...` in-process with fresh flag values
// and returns what it wrote to stdout and stderr.
func executeReplay(t *testing.T, args ...string) (string, string, error) {
	t.Helper()
	return execute(t, "replay", args...)
}

const resnetTrace = "../../testdata/traces/resnet50_train.trace.gz"

// writeTrace writes a trace file and returns its path.
func writeTrace(t *testing.T, name, text string) string {
	t.Helper()
	path := filepath.Join(t.TempDir(), name)
	require.NoError(t, os.WriteFile(path, []byte(text), 0o644))
	return path
}

type replayJSONLine struct {
	Trace             string          `json:"trace"`
	Events            int             `json:"events"`
	Allocations       int             `json:"allocations"`
	PeakLiveBytes     uint64          `json:"peak_live_bytes"`
	Layout            json.RawMessage `json:"layout"`
	ReservedPeakBytes uint64          `json:"reserved_peak_bytes"`
	DriverAllocs      uint64          `json:"driver_allocs"`
	BindCalls         uint64          `json:"bind_calls"`
	BoundBytes        uint64          `json:"bound_bytes"`
	UnboundBytes      uint64          `json:"unbound_bytes"`
	Spills            uint64          `json:"spills"`
	PlanCapacity      uint64          `json:"plan_capacity_bytes"`
	GrowthBytes       uint64          `json:"growth_bytes"`
	Report            memory.Report   `json:"report"`
	Plan              *struct {
		Layout            json.RawMessage `json:"layout"`
		ReservedPeakBytes uint64          `json:"reserved_peak_bytes"`
		DriverAllocs      uint64          `json:"driver_allocs"`
		BindCalls         uint64          `json:"bind_calls"`
		Spills            uint64          `json:"spills"`
	} `json:"plan"`
	NsPerEvent           *float64 `json:"ns_per_event"`
	ReferenceNsPerEvent  *float64 `json:"reference_ns_per_event"`
	NsRatio              *float64 `json:"ns_ratio"`
	ReferenceExtentBytes *uint64  `json:"reference_extent_bytes"`
	BenchPasses          int      `json:"bench_passes"`
	PlanBenchPasses      int      `json:"plan_bench_passes"`
	PlanNsPerEvent       *float64 `json:"plan_ns_per_event"`
	PlanNsRatio          *float64 `json:"plan_ns_ratio"`
}

func parseReplayLines(t *testing.T, out string) []replayJSONLine {
	t.Helper()
	var lines []replayJSONLine
	sc := bufio.NewScanner(strings.NewReader(out))
	sc.Buffer(nil, 64<<20)
	for sc.Scan() {
		var l replayJSONLine
		require.NoError(t, json.Unmarshal(sc.Bytes(), &l), "every line is one JSON object")
		lines = append(lines, l)
	}
	return lines
}

func TestReplayJSONWithPlanAndBench(t *testing.T) {
	small := writeTrace(t, "small.trace", "a 1 1000 0\na 2 3000 0\nf 1\na 3 500 0\nf 2\nf 3\na 4 64 0\n")
	out, stderr, err := executeReplay(t, "--json", "--plan", "--bench", "--passes", "3", small, resnetTrace)
	require.NoError(t, err)
	require.Empty(t, stderr, "no progress when stderr is not a terminal")
	lines := parseReplayLines(t, out)
	require.Len(t, lines, 2)

	require.Equal(t, "small", lines[0].Trace)
	require.Equal(t, 7, lines[0].Events)
	require.Equal(t, 4, lines[0].Allocations)
	require.Equal(t, uint64(4000), lines[0].PeakLiveBytes)

	resnet, err := trace.ReadFile(resnetTrace)
	require.NoError(t, err)
	l := lines[1]
	require.Equal(t, "resnet50_train", l.Trace)
	require.Equal(t, len(resnet.Events), l.Events)
	require.Equal(t, resnet.PeakLiveBytes(), l.PeakLiveBytes)
	require.JSONEq(t, `"Virtual"`, string(l.Layout), "the default layout")
	require.GreaterOrEqual(t, l.ReservedPeakBytes, l.PeakLiveBytes)
	require.NotEmpty(t, l.Report.Dynamic)
	require.Positive(t, l.DriverAllocs)
	require.Zero(t, l.PlanCapacity, "the layout has no plan")
	require.Zero(t, l.GrowthBytes, "nothing to grow past without a plan")
	require.NotNil(t, l.NsPerEvent)
	require.Positive(t, *l.NsPerEvent)
	require.NotNil(t, l.ReferenceNsPerEvent, "the reference is timed beside the layout")
	require.Positive(t, *l.ReferenceNsPerEvent)
	require.NotNil(t, l.NsRatio)
	require.InDelta(t, *l.NsPerEvent / *l.ReferenceNsPerEvent, *l.NsRatio, 1e-9)
	require.Equal(t, 3, l.BenchPasses, "the passes asked for")
	require.Equal(t, 3, l.PlanBenchPasses, "the passes asked for, under the plan too")
	ref, _, err := tlsfref.Measure(resnet)
	require.NoError(t, err)
	require.NotNil(t, l.ReferenceExtentBytes)
	require.Equal(t, ref.ExtentBytes, *l.ReferenceExtentBytes, "the reference replays the same stream")

	require.NotNil(t, l.Plan)
	require.Zero(t, l.Plan.Spills)
	require.LessOrEqual(t, l.Plan.ReservedPeakBytes, l.ReservedPeakBytes)
	require.GreaterOrEqual(t, l.Plan.ReservedPeakBytes, l.PeakLiveBytes)
	plan, err := memory.ParseLayout(string(l.Plan.Layout))
	require.NoError(t, err, "the plan is a layout memory reads back")
	virtual, ok := plan.Virtual()
	require.True(t, ok, "a stream measured under the virtual layout gets a virtual plan")
	require.Len(t, virtual.Slots, resnet.Allocations)
	require.Positive(t, virtual.PlannedBytes)
	require.Positive(t, l.Plan.DriverAllocs)
	require.NotNil(t, l.PlanNsPerEvent, "the plan is timed beside the reference too")
	require.Positive(t, *l.PlanNsPerEvent)
	require.NotNil(t, l.PlanNsRatio)
	require.InDelta(t, *l.PlanNsPerEvent / *l.ReferenceNsPerEvent, *l.PlanNsRatio, 1e-9, "over the same reference figure")
}

func TestReplayWithoutBenchTimesNothing(t *testing.T) {
	out, _, err := executeReplay(t, "--json", resnetTrace)
	require.NoError(t, err)
	l := parseReplayLines(t, out)[0]
	require.Nil(t, l.NsPerEvent)
	require.Nil(t, l.ReferenceNsPerEvent)
	require.Nil(t, l.NsRatio)
	require.Nil(t, l.PlanNsPerEvent)
}

func TestReplayBenchTableTimesThePlanToo(t *testing.T) {
	out, _, err := executeReplay(t, "--bench", "--passes", "1", "--plan", resnetTrace)
	require.NoError(t, err)
	for _, head := range []string{"ns ratio", "plan ns/event", "plan ns ratio"} {
		require.Contains(t, out, head)
	}
	for _, row := range strings.Split(out, "\n") {
		if strings.Contains(row, "resnet50_train") {
			require.Regexp(t, `[0-9.]+×\s*$`, row, "the plan's ns ratio ends the row")
		}
	}
}

func TestReplayBenchTableShowsTheReferenceBeside(t *testing.T) {
	out, _, err := executeReplay(t, "--bench", "--passes", "2", "--layout", "sub-slices", resnetTrace)
	require.NoError(t, err)
	for _, head := range []string{"ns/event", "ref ns/event", "ns ratio", "ref extent"} {
		require.Contains(t, out, head)
	}
	require.Regexp(t, `resnet50_train .* 1\.019×\n`, out, "the last column: the reference's extent on resnet50_train, as VMA's own")
	require.Contains(t, out, "the best of 2 passes each, alternating")
	out, _, err = executeReplay(t, "--bench", "--passes", "1", writeTrace(t, "short.trace", shortRun))
	require.NoError(t, err)
	require.Contains(t, out, "ns/event: one pass each, alternating", "not \"the best of 1 passes\"")

	_, _, err = executeReplay(t, "--bench", "--passes", "-1", resnetTrace)
	require.ErrorContains(t, err, "--passes -1: want a number of passes up to 10000, or 0 for as many as fill 2s")
	// A count past the bound ran for hours: refused before any pass.
	_, _, err = executeReplay(t, "--bench", "--passes", "99999999999", resnetTrace)
	require.ErrorContains(t, err, "--passes 99999999999: want a number of passes up to 10000")
}

// A WebAssembly workload among the traces is refused as one, where the
// trace reader called its bytes a malformed trace.
func TestReplayRefusesAGuestAmongTheTraces(t *testing.T) {
	guest := filepath.Join(t.TempDir(), "workload.wasm")
	require.NoError(t, os.WriteFile(guest, []byte("\x00asm\x01\x00\x00\x00"), 0o644))
	_, _, err := executeReplay(t, resnetTrace, guest)
	require.ErrorContains(t, err, guest+" is a WebAssembly workload, not a trace")
}

// A plan file given where traces belong is refused as a plan by every
// command that reads traces, gzipped too, and nothing is written; the
// trace reader called it a line longer than 4096 bytes, or an unknown
// event.
func TestAPlanFileAmongTheTracesIsRefusedAsOne(t *testing.T) {
	dir := t.TempDir()
	planFile, gzPlan := filepath.Join(dir, "p.json"), filepath.Join(dir, "p.json.gz")
	_, _, err := execute(t, "plan", "--out", planFile, resnetTrace)
	require.NoError(t, err)
	_, _, err = execute(t, "plan", "--out", gzPlan, resnetTrace)
	require.NoError(t, err)
	out, html := filepath.Join(dir, "out.json"), filepath.Join(dir, "r.html")
	for _, p := range []string{planFile, gzPlan} {
		want := p + " is a plan file, not a trace: give it to --layout"
		_, _, err = executeReplay(t, resnetTrace, p)
		require.ErrorContains(t, err, want)
		_, _, err = execute(t, "plan", "--out", out, p)
		require.ErrorContains(t, err, want, "the plan's first argument")
		_, _, err = execute(t, "plan", "--out", out, resnetTrace, p)
		require.ErrorContains(t, err, want)
		_, _, err = execute(t, "report", "--html", html, resnetTrace, p)
		require.ErrorContains(t, err, want)
	}
	require.NoFileExists(t, out)
	require.NoFileExists(t, html)
	// Taken where a plan belongs, as before.
	_, _, err = executeReplay(t, "--layout", planFile, resnetTrace)
	require.NoError(t, err)
}

// A trace that cannot be read is found before any is replayed: one
// missing after another printed the first one's figures, and a script
// reading them got a row from a command that failed.
func TestReplayChecksEveryTraceBeforeTheFirst(t *testing.T) {
	missing := filepath.Join(t.TempDir(), "gone.trace.gz")
	for _, bad := range []struct{ path, want string }{
		{missing, missing + ": no such file or directory"},
		{t.TempDir(), " is a directory"},
	} {
		out, _, err := executeReplay(t, "--json", resnetTrace, bad.path)
		require.ErrorContains(t, err, bad.want)
		require.Empty(t, out, "nothing printed for the trace before it")
	}
}

// By default --bench times as many passes as fill benchTime, at least
// benchMinPasses and at most benchMaxPasses, and says how many.
func TestReplayBenchPassesFillTheTimeByDefault(t *testing.T) {
	small := writeTrace(t, "small.trace", "a 1 1000 0\na 2 3000 0\nf 1\na 3 500 0\nf 2\nf 3\n")
	out, _, err := executeReplay(t, "--json", "--bench", small)
	require.NoError(t, err)
	l := parseReplayLines(t, out)[0]
	require.GreaterOrEqual(t, l.BenchPasses, benchMinPasses)
	require.LessOrEqual(t, l.BenchPasses, benchMaxPasses)
	require.Zero(t, l.PlanBenchPasses, "no plan, no passes under it")
	out, _, err = executeReplay(t, "--bench", small)
	require.NoError(t, err)
	require.Regexp(t, `the best of [0-9]+ passes each, alternating`, out)

	for _, c := range []struct {
		done, passes int
		elapsed      time.Duration
		over         bool
		progress     int
	}{
		{0, 3, 0, false, 0},
		{2, 3, time.Hour, false, 66},
		{3, 3, 0, true, 100},
		{0, 0, time.Hour, false, 0},
		{benchMinPasses - 1, 0, time.Hour, false, 80},
		{benchMinPasses, 0, benchTime / 2, false, 50},
		{benchMinPasses, 0, benchTime, true, 100},
		{benchMaxPasses / 2, 0, benchTime / 4, false, 50},
		{benchMaxPasses, 0, 0, true, 100},
	} {
		require.Equal(t, c.over, benchDone(c.done, c.passes, c.elapsed), "%+v", c)
		require.Equal(t, c.progress, benchProgress(c.done, c.passes, c.elapsed), "%+v", c)
	}
}

// A stream past the reference's 32 GiB block is timed in a larger one:
// one of 40 GB live failed the whole row, the layout's figures with it.
func TestReplayBenchTimesAStreamPastTheReferencesBlock(t *testing.T) {
	big := writeTrace(t, "big.trace", "a 1 40000000000 0\na 2 16 0\nf 1\nf 2\n")
	out, _, err := executeReplay(t, "--bench", "--passes", "1", big)
	require.NoError(t, err)
	require.Regexp(t, `big .* 40\.00 GB .*×\s+1\.000×\n`, out, "the row, the reference's extent last")
}

// The table shows what the binds cost beside the device allocations: the
// bind submissions, as --json's bind_calls, with no plan and under it.
func TestReplayTableShowsTheBindSubmissions(t *testing.T) {
	out, _, err := executeReplay(t, "--plan", resnetTrace)
	require.NoError(t, err)
	require.Equal(t, 2, strings.Count(strings.SplitN(out, "\n", 2)[0], "bind calls"), "no plan, then the plan")
	js, _, err := executeReplay(t, "--plan", "--json", resnetTrace)
	require.NoError(t, err)
	l := parseReplayLines(t, js)[0]
	require.Positive(t, l.BindCalls)
	require.Positive(t, l.Plan.BindCalls)
	// What stays bound at the end is held memory.
	require.Greater(t, l.BoundBytes, l.UnboundBytes)
	require.LessOrEqual(t, l.BoundBytes-l.UnboundBytes, l.ReservedPeakBytes, "bound %d B, unbound %d B", l.BoundBytes, l.UnboundBytes)
	require.Regexp(t, fmt.Sprintf(`resnet50_train .* %d +%d +virtual: .* [0-9.]+× +%d +%d +%d\s*\n`,
		l.DriverAllocs, l.BindCalls, l.Plan.DriverAllocs, l.Plan.BindCalls, l.Plan.Spills), out)
}

func TestReplayTableSummarisesThePlan(t *testing.T) {
	out, stderr, err := executeReplay(t, "--plan", resnetTrace)
	require.NoError(t, err)
	require.Empty(t, stderr)
	require.Contains(t, out, "resnet50_train")
	require.Contains(t, out, "reserved peak")
	tr, err := trace.ReadFile(resnetTrace)
	require.NoError(t, err)
	require.Regexp(t, fmt.Sprintf(`virtual: 3\.[12]\d GB planned, %d slots`, tr.Allocations), out,
		"the plan column names the planned bytes (about the stream's 3.19 GB peak live) and a slot per allocation")
	require.NotContains(t, out, "slots\":", "the table does not print the plan's JSON")
	require.Contains(t, out, "layout: Virtual")
}

func TestReplayLayoutArgument(t *testing.T) {
	literal := `{"Sliced":[{"page_size":1048576,"pages":null,"max_slice":null},{"page_size":268435456}]}`
	sliced, err := memory.ParseLayout(literal)
	require.NoError(t, err)
	file := writeTrace(t, "layout.json", literal)
	cases := []struct {
		arg  string
		want memory.Layout
	}{
		{"direct", memory.DirectLayout()},
		{"exclusive-pages", memory.ExclusivePagesLayout()},
		{literal, sliced},
		{file, sliced},
	}
	for _, c := range cases {
		out, _, err := executeReplay(t, "--json", "--layout", c.arg, resnetTrace)
		require.NoError(t, err, c.arg)
		lines := parseReplayLines(t, out)
		require.Len(t, lines, 1)
		got, err := memory.ParseLayout(string(lines[0].Layout))
		require.NoError(t, err)
		require.True(t, c.want.Equal(got), "layout %s: got %s", c.arg, got)
		require.Equal(t, len(lines[0].Report.Dynamic) > 1, c.want.Kind() != memory.LayoutDirect)
	}
}

func TestReplayErrors(t *testing.T) {
	_, _, err := executeReplay(t)
	require.Error(t, err, "a trace is required")

	missing := filepath.Join(t.TempDir(), "missing.trace")
	_, _, err = executeReplay(t, missing)
	require.ErrorIs(t, err, os.ErrNotExist)
	require.Contains(t, err.Error(), "missing.trace")

	bad := writeTrace(t, "bad.trace", "a 1 10 0\nf 2\n")
	_, _, err = executeReplay(t, bad)
	require.ErrorIs(t, err, trace.ErrMalformed)
	require.Contains(t, err.Error(), "line 2")

	_, _, err = executeReplay(t, "--layout", "ladder", resnetTrace)
	require.ErrorContains(t, err, `"ladder"`)

	_, _, err = executeReplay(t, "--layout", `{"Sliced":[]}`, resnetTrace)
	require.ErrorContains(t, err, "empty")
}

var updateFigures = flag.Bool("update", false, "rewrite the README's figures from the commands that make them")

// readmeFigures are the README's lines between the figures markers, and
// the command the opening marker names.
func readmeFigures(t *testing.T, readme string) (command, table string, start, end int) {
	t.Helper()
	const open, close = "<!-- figures: ", "<!-- end figures -->\n"
	start = strings.Index(readme, open)
	require.GreaterOrEqual(t, start, 0, "the README marks its figures")
	eol := strings.Index(readme[start:], " -->\n")
	require.Positive(t, eol)
	command = readme[start+len(open) : start+eol]
	start += eol + len(" -->\n")
	end = strings.Index(readme, close)
	require.Greater(t, end, start)
	return command, readme[start:end], start, end
}

// TestREADMEPlanTableIsTheCommandsOutput regenerates the README's plan
// table with the command its marker names and fails when they differ;
// `make figures` (-update) rewrites it.
func TestREADMEPlanTableIsTheCommandsOutput(t *testing.T) {
	if testing.Short() {
		t.Skip("plans every shipped trace")
	}
	const path = "../../README.md"
	data, err := os.ReadFile(path)
	require.NoError(t, err)
	readme := string(data)
	command, table, start, end := readmeFigures(t, readme)
	args := strings.Fields(command)
	require.Equal(t, []string{"vkrt", "replay"}, args[:2], "the figures come from vkrt replay")
	var expanded []string
	for _, a := range args[2:] {
		if strings.ContainsAny(a, "*?[") {
			matches, err := filepath.Glob(filepath.Join("..", "..", a))
			require.NoError(t, err)
			require.NotEmpty(t, matches, a)
			expanded = append(expanded, matches...)
			continue
		}
		if _, err := os.Stat(filepath.Join("..", "..", a)); err == nil && !strings.HasPrefix(a, "-") {
			a = filepath.Join("..", "..", a) // a path from the repository root
		}
		expanded = append(expanded, a)
	}
	out, _, err := executeReplay(t, expanded...)
	require.NoError(t, err)
	if *updateFigures {
		require.NoError(t, os.WriteFile(path, []byte(readme[:start]+out+readme[end:]), 0o644))
		return
	}
	require.Equal(t, out, table, "README's figures drifted from `%s`: run make figures", command)
}

func TestReplayMarkdownHasNoWallClockFigures(t *testing.T) {
	_, _, err := executeReplay(t, "--markdown", "--bench", resnetTrace)
	require.ErrorContains(t, err, "neither --json nor --bench")
	// The Markdown table has no PyTorch columns: --pytorch would be ignored.
	_, _, err = executeReplay(t, "--markdown", "--pytorch", resnetTrace)
	require.ErrorContains(t, err, "no columns for --pytorch")
	a, _, err := executeReplay(t, "--markdown", resnetTrace)
	require.NoError(t, err)
	b, _, err := executeReplay(t, "--markdown", resnetTrace)
	require.NoError(t, err)
	require.Equal(t, a, b, "the same figures every run")
	require.True(t, strings.HasPrefix(a, "| trace | events | peak live |"), a)
}

func TestReplayTableKeepsFinishedTracesWhenALaterOneFails(t *testing.T) {
	small := writeTrace(t, "small.trace", "a 1 1000 0\nf 1\n")
	bad := writeTrace(t, "bad.trace", "a 1 1000 0\nf 2\n")
	empty := writeTrace(t, "empty.trace", "")
	out, _, err := executeReplay(t, small, bad, resnetTrace, empty)
	require.ErrorIs(t, err, trace.ErrMalformed)
	require.ErrorIs(t, err, trace.ErrEmpty, "every failure is reported")
	require.ErrorContains(t, err, bad+" line 2")
	require.Contains(t, out, "small", "the trace before the failure is shown")
	require.Contains(t, out, "resnet50_train", "the traces after it still run")
}

func TestReplayEmptyTraceSaysItIsEmptyAndFails(t *testing.T) {
	empty := writeTrace(t, "empty.trace", "# nothing\n")
	out, _, err := executeReplay(t, empty)
	require.ErrorIs(t, err, trace.ErrEmpty)
	require.ErrorContains(t, err, empty+" holds no events")
	require.Empty(t, out, "no row of zeros")
}

func TestReplayShowsProgressWithinATrace(t *testing.T) {
	var buf bytes.Buffer
	bar := &replayProgress{w: &buf, visible: true}
	layout, err := replayLayout("sub-slices")
	require.NoError(t, err)
	_, err = replayTrace(resnetTrace, "resnet50_train", layout, replayFlags{plan: true}, bar)
	require.NoError(t, err)
	for _, stage := range []string{"replaying resnet50_train", "planning resnet50_train", "under its plan"} {
		require.Contains(t, buf.String(), stage)
	}
	require.Regexp(t, `planning resnet50_train[^\n\r]*\d+/\d+`, buf.String(), "the plan's own work is counted")
}

// --pytorch replays the stream through the modelled PyTorch allocator as
// well: on a shipped stream it gives the figures recorded for PyTorch.
func TestReplayBesidePyTorch(t *testing.T) {
	out, stderr, err := executeReplay(t, "--json", "--pytorch", resnetTrace)
	require.NoError(t, err)
	require.Empty(t, stderr)
	var line struct {
		PeakLiveBytes uint64 `json:"peak_live_bytes"`
		PyTorch       *struct {
			Default, Expandable struct {
				ReservedPeakBytes uint64  `json:"reserved_peak_bytes"`
				Ratio             float64 `json:"ratio"`
				DeviceAllocs      uint64  `json:"device_allocs"`
			}
		} `json:"pytorch"`
	}
	require.NoError(t, json.Unmarshal([]byte(strings.TrimSpace(out)), &line), out)
	require.NotNil(t, line.PyTorch)
	recorded := tracetest.PyTorch["resnet50_train"]
	for _, c := range []struct {
		ratio, want float64
		allocs      uint64
		wantAllocs  uint64
	}{{line.PyTorch.Default.Ratio, recorded.DefaultRatio, line.PyTorch.Default.DeviceAllocs, recorded.DefaultAllocs},
		{line.PyTorch.Expandable.Ratio, recorded.ExpandableRatio, line.PyTorch.Expandable.DeviceAllocs, recorded.ExpandableAllocs}} {
		require.InDelta(t, c.want, c.ratio, 0.001)
		require.Equal(t, c.wantAllocs, c.allocs)
	}
	require.InDelta(t, line.PyTorch.Expandable.Ratio, float64(line.PyTorch.Expandable.ReservedPeakBytes)/float64(line.PeakLiveBytes), 1e-9)

	out, _, err = executeReplay(t, "--pytorch", resnetTrace)
	require.NoError(t, err)
	require.Contains(t, out, "PyTorch expandable")
	require.Contains(t, out, fmt.Sprintf("%.3f× (%d)", line.PyTorch.Expandable.Ratio, line.PyTorch.Expandable.DeviceAllocs))
}

// firstRunAndSecondsDir is a directory holding a first run, run.trace,
// and an empty directory for its second runs.
func firstRunAndSecondsDir(t *testing.T) (dir, first, seconds string) {
	dir = t.TempDir()
	first = filepath.Join(dir, "run.trace")
	require.NoError(t, os.WriteFile(first, []byte(shortRun), 0o644))
	seconds = filepath.Join(dir, "second")
	require.NoError(t, os.Mkdir(seconds, 0o755))
	return dir, first, seconds
}

// A second run behind a broken link is an error naming it, not a trace
// with no second run.
func TestReplaySecondRunBehindABrokenLinkFails(t *testing.T) {
	dir, first, seconds := firstRunAndSecondsDir(t)
	require.NoError(t, os.Symlink(filepath.Join(dir, "gone.trace"), filepath.Join(seconds, "run.trace")))
	_, _, err := executeReplay(t, "--plan", "--second-runs", seconds, first)
	require.ErrorIs(t, err, os.ErrNotExist)
	require.ErrorContains(t, err, filepath.Join(seconds, "run.trace"))
}

// --second-runs names a directory: one that is not there, or holds the
// second run of none of the traces, is an error, not a table of dashes;
// the second runs, gzipped or not, show in the table and in --json, not
// only in --markdown.
func TestReplaySecondRunsShowAndMustExist(t *testing.T) {
	dir, first, seconds := firstRunAndSecondsDir(t)
	var zipped bytes.Buffer
	zw := gzip.NewWriter(&zipped)
	_, err := zw.Write([]byte(longRun))
	require.NoError(t, err)
	require.NoError(t, zw.Close())
	require.NoError(t, os.WriteFile(filepath.Join(seconds, "run.trace.gz"), zipped.Bytes(), 0o644))

	_, _, err = executeReplay(t, "--plan", "--second-runs", filepath.Join(dir, "secnod"), first)
	require.ErrorIs(t, err, os.ErrNotExist)
	require.ErrorContains(t, err, "--second-runs")
	_, _, err = executeReplay(t, "--plan", "--second-runs", first, first)
	require.ErrorContains(t, err, "not a directory")
	empty := filepath.Join(dir, "empty")
	require.NoError(t, os.Mkdir(empty, 0o755))
	require.NoError(t, os.WriteFile(filepath.Join(empty, "other.trace.gz"), zipped.Bytes(), 0o644))
	_, _, err = executeReplay(t, "--plan", "--second-runs", empty, first)
	require.ErrorContains(t, err, "holds the second run of none of the traces")
	// The first run's own directory holds it, not a second run of it.
	_, _, err = executeReplay(t, "--plan", "--second-runs", filepath.Dir(first), first)
	require.ErrorContains(t, err, "holds "+first+" itself, not a second run of it")
	// A plain trace is a second run as a gzipped one is.
	plain := filepath.Join(dir, "plain")
	require.NoError(t, os.Mkdir(plain, 0o755))
	require.NoError(t, os.WriteFile(filepath.Join(plain, "run.trace"), []byte(longRun), 0o644))
	stdout, _, err := executeReplay(t, "--plan", "--second-runs", plain, first)
	require.NoError(t, err)
	require.Contains(t, stdout, memory.FormatBytes(45_000_000), "the second run's peak live bytes")

	stdout, _, err = executeReplay(t, "--plan", "--second-runs", seconds, first)
	require.NoError(t, err)
	require.Contains(t, stdout, "under the first run's plan")
	require.Contains(t, stdout, memory.FormatBytes(45_000_000), "the second run's peak live bytes")

	stdout, _, err = executeReplay(t, "--plan", "--json", "--second-runs", seconds, first)
	require.NoError(t, err)
	var line struct {
		SecondRun *struct {
			PeakLiveBytes     uint64 `json:"peak_live_bytes"`
			UnderFirstRunPlan struct {
				Spills uint64 `json:"spills"`
			} `json:"under_first_run_plan"`
		} `json:"second_run"`
	}
	require.NoError(t, json.Unmarshal([]byte(strings.TrimSpace(stdout)), &line))
	require.NotNil(t, line.SecondRun)
	require.Equal(t, uint64(45_000_000), line.SecondRun.PeakLiveBytes)
	require.Positive(t, line.SecondRun.UnderFirstRunPlan.Spills, "the longer run outgrows the shorter run's plan")
}

// On a terminal stdout and stderr share a line: each --json line starts on
// a line of its own, never after the progress bar's text.
func TestReplayJSONLinesNeverFollowTheProgressBar(t *testing.T) {
	var terminal bytes.Buffer
	bar := &replayProgress{w: &terminal, visible: true}
	layout, err := replayLayout("virtual")
	require.NoError(t, err)
	// With --second-runs the last stage of a trace is its second run,
	// which counts no steps: its bar was left drawn.
	f := replayFlags{json: true, plan: true, passes: 1, secondRuns: t.TempDir()}
	require.NoError(t, replayAll(&terminal, bar, []string{resnetTrace, resnetTrace}, layout, f))
	out := terminal.String()
	require.Equal(t, 2, strings.Count(out, `{"trace"`))
	for i := 0; ; {
		j := strings.Index(out[i:], `{"trace"`)
		if j < 0 {
			break
		}
		i += j
		require.Contains(t, "\r\n", out[i-1:i], "the line starts after %q", out[max(0, i-60):i])
		i++
	}
}

// --passes counts --bench's timed passes: without --bench it would time
// nothing.
func TestReplayPassesNeedsBench(t *testing.T) {
	_, _, err := executeReplay(t, "--passes", "9", resnetTrace)
	require.ErrorContains(t, err, "--passes needs --bench")
	_, _, err = executeReplay(t, "--bench", "--passes", "1", "--json", resnetTrace)
	require.NoError(t, err)
}

// Under a plan (--layout FILE) the table says how many times the run
// needed more than the plan: the warnings that say so go nowhere here.
func TestReplayUnderAPlanShowsItsSpills(t *testing.T) {
	_, out := shortRunPlan(t)
	bigger := writeTrace(t, "bigger.trace", "a 1 3000000 0\na 2 5000000 0\na 4 40000000 0\nf 1\na 3 9000000 0\nf 2\nf 3\nf 4\n")
	stdout, _, err := execute(t, "replay", "--layout", out, bigger)
	require.NoError(t, err)
	lines := strings.Split(stdout, "\n")
	require.True(t, strings.HasSuffix(strings.TrimSpace(lines[0]), "spills"), lines[0])
	fields := strings.Fields(lines[1])
	require.NotEqual(t, "0", fields[len(fields)-1], "the bigger run outgrew the plan: %s", lines[1])
	stdout, _, err = execute(t, "replay", bigger)
	require.NoError(t, err)
	require.NotContains(t, strings.SplitN(stdout, "\n", 2)[0], "spills", "no plan, no column")
}

// A plan file led by more whitespace than --layout peeks at (an editor's
// indentation, a tool's rewrite) is still taken as a plan file: it was
// read as a layout and refused for naming "vkrt_plan" and "device".
func TestReplayTakesAPlanFileLedByWhitespace(t *testing.T) {
	first, out := shortRunPlan(t)
	data, err := os.ReadFile(out)
	require.NoError(t, err)
	padded := filepath.Join(t.TempDir(), "padded.plan")
	require.NoError(t, os.WriteFile(padded, append([]byte(strings.Repeat(" \n", 5<<10)), data...), 0o644))
	want, _, err := execute(t, "replay", "--layout", out, first)
	require.NoError(t, err)
	got, _, err := execute(t, "replay", "--layout", padded, first)
	require.NoError(t, err)
	require.Equal(t, want, got)
}

// Under capped pools whose page is not a multiple of the alignment, the
// plan's capacity is what the pools hold (the pages rounded up as the
// pools round them), so a run that never passed its two capped pages
// grew nothing: the capacity was the page as written, and 30 B of growth
// showed with no spill.
func TestReplayCapacityIsWhatTheCappedPoolsHold(t *testing.T) {
	path := writeTrace(t, "two.trace", "a 1 1000000 0\na 2 1000000 0\nf 1\nf 2\n")
	out, _, err := execute(t, "replay", "--json", "--layout", `{"Sliced":[{"page_size":1000001,"pages":2,"max_slice":1000001}]}`, path)
	require.NoError(t, err)
	var line struct {
		ReservedPeakBytes uint64 `json:"reserved_peak_bytes"`
		Spills            uint64 `json:"spills"`
		PlanCapacity      uint64 `json:"plan_capacity_bytes"`
		GrowthBytes       uint64 `json:"growth_bytes"`
		DriverAllocs      uint64 `json:"driver_allocs"`
	}
	require.NoError(t, json.Unmarshal([]byte(strings.TrimSpace(out)), &line))
	require.Zero(t, line.Spills)
	require.Equal(t, uint64(2), line.DriverAllocs, "two capped pages, as planned")
	require.Equal(t, uint64(2*1000016), line.PlanCapacity, "two pages of 1,000,001 B rounded up to 16 B")
	require.Equal(t, line.PlanCapacity, line.ReservedPeakBytes)
	require.Zero(t, line.GrowthBytes, out)
}

// A basic plan's exclusive pool plans its pages at its largest size: a run
// within its two pages grew nothing past the plan, where a report without
// the pool's cap showed every byte it held as growth.
func TestReplayCapacityCountsAnExclusivePoolsCap(t *testing.T) {
	path := writeTrace(t, "two.trace", "a 1 3000000 0\na 2 4000000 0\nf 1\nf 2\n")
	out, _, err := execute(t, "replay", "--json", "--layout",
		`{"Sliced":[{"page_size":4096,"pages":1,"max_slice":null,"grow":true},{"page_size":4000000,"pages":2,"max_slice":null,"grow":true,"exclusive":true}]}`, path)
	require.NoError(t, err)
	var line replayJSONLine
	require.NoError(t, json.Unmarshal([]byte(strings.TrimSpace(out)), &line))
	require.Zero(t, line.Spills)
	require.Equal(t, uint64(7000000), line.ReservedPeakBytes, "a page of each buffer's size")
	require.Equal(t, uint64(4096+2*4000000), line.PlanCapacity)
	require.Zero(t, line.GrowthBytes, out)
}

// The JSON line of a trace of several streams gives every stream's pools:
// it gave the first stream's alone, so their bytes in use were not the
// live bytes left at the end.
func TestReplayJSONGivesEveryStreamsPools(t *testing.T) {
	path := writeTrace(t, "two.trace", "a 1 100 0\na 2 200 1\na 3 300 1\n")
	out, _, err := execute(t, "replay", "--json", path)
	require.NoError(t, err)
	var line struct {
		PeakLiveBytes uint64        `json:"peak_live_bytes"`
		Report        memory.Report `json:"report"`
		Streams       []struct {
			Stream uint32        `json:"stream"`
			Report memory.Report `json:"report"`
		} `json:"streams"`
	}
	require.NoError(t, json.Unmarshal([]byte(strings.TrimSpace(out)), &line))
	require.Equal(t, uint64(600), line.PeakLiveBytes)
	require.Len(t, line.Streams, 2, out)
	var allocs, inUse uint64
	for i, s := range line.Streams {
		require.Equal(t, uint32(i), s.Stream)
		allocs += s.Report.Usage().NumberAllocs
		inUse += s.Report.Usage().BytesInUse
	}
	require.Equal(t, uint64(3), allocs)
	require.Equal(t, uint64(600), inUse)
	require.Equal(t, line.Streams[0].Report.Usage(), line.Report.Usage(), "report is the first stream's")

	out, _, err = execute(t, "replay", "--json", writeTrace(t, "one.trace", "a 1 100 0\n"))
	require.NoError(t, err)
	require.NotContains(t, out, `"streams"`, "one stream: its report alone")
}

// Each stream of a trace takes the layout's pools of its own, so a plan's
// capacity is what every stream's pools hold: two streams each within
// its one capped page grew nothing, where the first stream's capacity
// alone showed the second's page as growth with no spill.
func TestReplayCapacityCountsEveryStreamsPools(t *testing.T) {
	path := writeTrace(t, "two.trace", "a 1 1000000 0\na 2 1000000 1\nf 1\nf 2\n")
	out, _, err := execute(t, "replay", "--json", "--layout", `{"Sliced":[{"page_size":1000001,"pages":1,"max_slice":1000001}]}`, path)
	require.NoError(t, err)
	var line replayJSONLine
	require.NoError(t, json.Unmarshal([]byte(strings.TrimSpace(out)), &line))
	require.Zero(t, line.Spills)
	require.Equal(t, uint64(2*1000016), line.ReservedPeakBytes)
	require.Equal(t, uint64(2*1000016), line.PlanCapacity, "one page of 1,000,016 B a stream")
	require.Zero(t, line.GrowthBytes, out)
}

// A virtual plan expecting more than the device memory expects the
// device's, and its capacity is what the pool expects: the line gave the
// plan's figure beside a report whose pool planned the device's.
func TestReplayCapacityOfAVirtualPlanIsWhatThePoolExpects(t *testing.T) {
	path := writeTrace(t, "one.trace", "a 1 1000 0\nf 1\n")
	out, _, err := execute(t, "replay", "--json", "--layout", `{"Virtual":{"planned_bytes":1000000000000000}}`, path)
	require.NoError(t, err)
	var line replayJSONLine
	require.NoError(t, json.Unmarshal([]byte(strings.TrimSpace(out)), &line))
	k, ok := line.Report.Dynamic[0].Kind.(memory.VirtualKind)
	require.True(t, ok, out)
	require.Equal(t, replay.H200().MemorySize, k.PlannedBytes)
	require.Equal(t, k.PlannedBytes, line.PlanCapacity)
}

// A layout that plans no bytes may still count spills (a virtual plan of
// slots alone that the run leaves, a growable pool of a plan's way out):
// the table shows them, where it left out the column as for no plan.
func TestReplayShowsSpillsOfALayoutThatPlansNoBytes(t *testing.T) {
	path := writeTrace(t, "one.trace", "a 1 1000 0\nf 1\n")
	for _, layout := range []string{`{"Virtual":{"planned_bytes":0,"slots":[16,0]}}`, `{"Sliced":[{"page_size":1048576,"grow":true}]}`} {
		stdout, _, err := execute(t, "replay", "--layout", layout, path)
		require.NoError(t, err)
		lines := strings.Split(stdout, "\n")
		require.True(t, strings.HasSuffix(strings.TrimSpace(lines[0]), "spills"), "%s: %s", layout, lines[0])
		fields := strings.Fields(lines[1])
		require.Equal(t, "1", fields[len(fields)-1], "%s: %s", layout, lines[1])
	}
}

// The PyTorch figure of a second run is read from the table that has the
// column: a row of another table further down (here with fewer columns
// before it) gave its own cell at that column's place.
func TestRecordedPyTorchReadsTheTableWithTheColumn(t *testing.T) {
	readme := filepath.Join(t.TempDir(), "README.md")
	require.NoError(t, os.WriteFile(readme, []byte(`# Second runs

| trace | peak live bytes | PyTorch expandable segments |
| --- | --- | --- |
| a | 100 | 1.070× (153) |

Other figures:

| trace | steps | batch |
| --- | --- | --- |
| b | 6 | 8 |
`), 0o644))
	require.Equal(t, "1.070× (153)", recordedPyTorch(readme, "a"))
	require.Equal(t, "?", recordedPyTorch(readme, "b"))
}

// A README.md that is no file (a FIFO, a device) records nothing: opening
// a FIFO waited for a writer, and vkrt replay --second-runs hung.
func TestRecordedPyTorchReadsOnlyAFile(t *testing.T) {
	fifo := filepath.Join(t.TempDir(), "README.md")
	require.NoError(t, syscall.Mkfifo(fifo, 0o644))
	t.Cleanup(func() {
		// Lets a reader blocked opening it go.
		if w, err := os.OpenFile(fifo, os.O_WRONLY|syscall.O_NONBLOCK, 0); err == nil {
			w.Close()
		}
	})
	got := make(chan string, 1)
	go func() { got <- recordedPyTorch(fifo, "a") }()
	select {
	case cell := <-got:
		require.Equal(t, "?", cell)
	case <-time.After(5 * time.Second):
		t.Fatal("recordedPyTorch waits on a FIFO")
	}
	require.Equal(t, "?", recordedPyTorch("/dev/zero", "a"))
}

// A trace whose file name shows escaped (here a no-break space, which
// unicode.IsPrint refuses) finds its second run by the file's own name:
// it was looked for under the escaped one, and none was found.
func TestSecondRunOfATraceWhoseNameShowsEscaped(t *testing.T) {
	dir := t.TempDir()
	first := filepath.Join(dir, "my\u00a0run.trace")
	require.NoError(t, os.WriteFile(first, []byte(shortRun), 0o644))
	seconds := filepath.Join(dir, "second")
	require.NoError(t, os.Mkdir(seconds, 0o755))
	require.NoError(t, os.WriteFile(filepath.Join(seconds, "my\u00a0run.trace"), []byte(longRun), 0o644))
	stdout, _, err := executeReplay(t, "--plan", "--json", "--second-runs", seconds, first)
	require.NoError(t, err)
	var line struct {
		Trace     string `json:"trace"`
		SecondRun *struct {
			PeakLiveBytes uint64 `json:"peak_live_bytes"`
		} `json:"second_run"`
	}
	require.NoError(t, json.Unmarshal([]byte(strings.TrimSpace(stdout)), &line))
	require.Equal(t, "my\u00a0run", line.Trace, "JSON carries the name itself")
	require.NotNil(t, line.SecondRun, stdout)
	require.Equal(t, uint64(45_000_000), line.SecondRun.PeakLiveBytes)
}

// A gzipped plan file led by more whitespace than the packed bytes
// --layout peeked at unpack to (a few megabytes of it pack into a few
// kilobytes) is a plan file as the plain one is: it was read as a layout
// and refused for naming "vkrt_plan" and "device".
func TestReplayTakesAGzippedPlanFileLedByWhitespace(t *testing.T) {
	first, out := shortRunPlan(t)
	data, err := os.ReadFile(out)
	require.NoError(t, err)
	padded := filepath.Join(t.TempDir(), "padded.plan.gz")
	packed := gzread.Pack(append(bytes.Repeat([]byte(" \n"), 10<<20), data...))
	require.Greater(t, len(packed), 4<<10, "the padding alone packs past the 4 KiB --layout peeked at")
	require.NoError(t, os.WriteFile(padded, packed, 0o644))
	want, _, err := execute(t, "replay", "--layout", out, first)
	require.NoError(t, err)
	got, _, err := execute(t, "replay", "--layout", padded, first)
	require.NoError(t, err)
	require.Equal(t, want, got)
}

// A | in a trace's name is escaped in its Markdown cell, which it ended.
func TestReplayMarkdownEscapesABarInATraceName(t *testing.T) {
	tr := writeTrace(t, "pipe|x.trace", "a 1 1000 0\nf 1\n")
	out, _, err := executeReplay(t, "--markdown", tr)
	require.NoError(t, err)
	lines := strings.Split(strings.TrimSpace(out), "\n")
	row := lines[len(lines)-1]
	require.True(t, strings.HasPrefix(row, `| pipe\|x |`), row)
	require.Equal(t, strings.Count(lines[0], " | "), strings.Count(row, " | "), "the row has the header's cells: %s", row)
}

// Each stage of the progress is drawn with its own label and count: the
// bar of the stage before, reset and given the new length, first drew the
// old label with the new count.
func TestReplayProgressDrawsEachStageWithItsOwnLabel(t *testing.T) {
	var out bytes.Buffer
	p := &replayProgress{w: &out, visible: true}
	p.stage("first-stage", 10)
	p.set(5, 10)
	p.stage("second-stage", 777)
	p.set(1, 777)
	require.Contains(t, out.String(), "second-stage")
	require.NotRegexp(t, `first-stage[^\r\n]*/777`, out.String())

	// A label's path is the user's: its escape sequence is shown, not sent.
	out.Reset()
	p.stage("reading /tmp/a\x1b[31mb.trace (MiB)", 10)
	p.set(1, 10)
	require.NotContains(t, out.String(), "\x1b[31m")
	require.Contains(t, out.String(), `a\x1b[31mb.trace`)
}

// A second run goes by its first run's name: an error in it names its
// own file, where the line it blames is, not only the first run's name.
func TestReplaySecondRunErrorsNameItsFile(t *testing.T) {
	for name, second := range map[string]string{
		"replay":   "a 1 100000000000 0\na 2 100000000000 0\n", // past the device model's memory
		"planning": "a 1 3000000 0\na 2 5000000 1\nf 1\nf 2\n", // two streams, which a plan cannot be of
	} {
		t.Run(name, func(t *testing.T) {
			_, first, seconds := firstRunAndSecondsDir(t)
			path := filepath.Join(seconds, "run.trace")
			require.NoError(t, os.WriteFile(path, []byte(second), 0o644))
			_, _, err := executeReplay(t, "--plan", "--second-runs", seconds, first)
			require.Error(t, err)
			require.ErrorContains(t, err, path)
		})
	}
}

// --layout takes a plan file vkrt plan --out wrote, and its help says so
// where it named a layout's file alone.
func TestReplayHelpNamesThePlanFileLayoutTakes(t *testing.T) {
	var replayCmd *cobra.Command
	for _, c := range rootCmd.Commands() {
		if c.Name() == "replay" {
			replayCmd = c
		}
	}
	require.NotNil(t, replayCmd)
	require.Contains(t, replayCmd.Long, "a plan file (vkrt\nplan --out")
	require.Contains(t, replayCmd.Flags().Lookup("layout").Usage, "a plan file (vkrt plan --out)")

	first, out := shortRunPlan(t)
	_, _, err := executeReplay(t, "--layout", out, first)
	require.NoError(t, err, "as the help says")
}

// A layout literal longer than a file name may be (a plan pasted from
// --json) that does not hold says what is wrong with it, as a short one
// does: it was taken for a file's name, "file name too long".
func TestReplayLongLayoutLiteralThatDoesNotHoldSaysWhy(t *testing.T) {
	pools := strings.Repeat(`{"page_size":1048576},`, 20)
	small := writeTrace(t, "small.trace", shortRun)
	for _, arg := range []string{
		`{"Sliced":[` + pools + `{"page_sise":1}]}`,
		` "sub-slices` + strings.Repeat(" ", 300) + `x"`,
	} {
		_, _, err := executeReplay(t, "--layout", arg, small)
		require.Error(t, err)
		require.NotContains(t, err.Error(), "file name too long")
		require.NotContains(t, err.Error(), "open ")
	}
	_, _, err := executeReplay(t, "--layout", `{"Sliced":[`+pools+`{"page_sise":1}]}`, small)
	require.ErrorContains(t, err, `unknown field "page_sise"`)
	_, _, err = executeReplay(t, "--layout", strings.Repeat("sub-slices", 30), small)
	require.ErrorContains(t, err, "is neither a preset, a layout JSON literal nor a file")
}

// A plan file's JSON given as --layout's value ("$(cat plan.json)") asks
// for the file's name: it was a layout of two variants, "vkrt_plan" and
// "device".
func TestReplayLayoutOfAPlanFilesTextAsksForTheFile(t *testing.T) {
	first, out := shortRunPlan(t)
	data, err := os.ReadFile(out)
	require.NoError(t, err)
	_, _, err = executeReplay(t, "--layout", string(data), first)
	require.ErrorContains(t, err, "--layout holds a plan file's JSON, not a layout: give the plan file's name")
	_, _, err = executeReplay(t, "--layout", out, first)
	require.NoError(t, err, "as the file")
}

// Traces of one name from two directories (a run and its second run in
// variants/) go by the paths they were read from, as vkrt report names
// them: their rows, --json lines and the plan file's names were the same
// name twice. A second run's recorded figure is still found by the file's
// own name.
func TestTracesOfOneNameAreToldApart(t *testing.T) {
	dir := t.TempDir()
	a, b, seconds := filepath.Join(dir, "a"), filepath.Join(dir, "b"), filepath.Join(dir, "seconds")
	for _, d := range []string{a, b, seconds} {
		require.NoError(t, os.Mkdir(d, 0o755))
	}
	first, other := filepath.Join(a, "run.trace"), filepath.Join(b, "run.trace.gz")
	require.NoError(t, os.WriteFile(first, []byte(shortRun), 0o644))
	require.NoError(t, os.WriteFile(other, gzread.Pack([]byte(longRun)), 0o644))
	want := []string{filepath.ToSlash(a) + "/run", filepath.ToSlash(b) + "/run"}

	stdout, _, err := executeReplay(t, "--json", first, other)
	require.NoError(t, err)
	lines := parseReplayLines(t, stdout)
	require.Len(t, lines, 2)
	require.Equal(t, want, []string{lines[0].Trace, lines[1].Trace})

	out := filepath.Join(dir, "run.plan")
	stdout, _, err = execute(t, "plan", first, other, "--out", out, "--json")
	require.NoError(t, err)
	var names []string
	for _, l := range strings.Split(strings.TrimSpace(stdout), "\n") {
		var line planTraceLine
		require.NoError(t, json.Unmarshal([]byte(l), &line))
		names = append(names, line.Trace)
	}
	require.Equal(t, want, names)
	pf, err := plan.ReadFile(out)
	require.NoError(t, err)
	require.Equal(t, want, pf.Traces)

	// The same file twice is numbered.
	stdout, _, err = executeReplay(t, "--json", first, first)
	require.NoError(t, err)
	lines = parseReplayLines(t, stdout)
	require.Equal(t, []string{want[0], want[0] + " (2)"}, []string{lines[0].Trace, lines[1].Trace})

	require.NoError(t, os.WriteFile(filepath.Join(seconds, "run.trace"), []byte(longRun), 0o644))
	require.NoError(t, os.WriteFile(filepath.Join(seconds, "README.md"),
		[]byte("| trace | PyTorch expandable segments |\n| --- | --- |\n| run | 1.234× (5) |\n"), 0o644))
	stdout, _, err = executeReplay(t, "--plan", "--second-runs", seconds, first, other)
	require.NoError(t, err)
	require.Equal(t, 2, strings.Count(stdout, "1.234× (5)"), "%s", stdout)
}

// A stream (a pipe) named twice among the traces is refused before any
// work: it is read once, and the second reading was an empty trace,
// "holds no events (0 lines)", after the first had been replayed.
func TestATraceStreamGivenTwiceIsRefused(t *testing.T) {
	r, w, err := os.Pipe()
	require.NoError(t, err)
	defer r.Close()
	_, err = w.WriteString(shortRun)
	require.NoError(t, err)
	require.NoError(t, w.Close())
	name := "/dev/fd/" + strconv.Itoa(int(r.Fd()))
	other := "/proc/self/fd/" + strconv.Itoa(int(r.Fd()))
	for _, cmd := range [][]string{{"replay", name, other}, {"plan", name, name, "--out", filepath.Join(t.TempDir(), "p.plan")}} {
		stdout, _, err := execute(t, cmd[0], cmd[1:]...)
		require.ErrorContains(t, err, " is given twice", "%v", cmd)
		require.Empty(t, stdout, "%v", cmd)
	}
	stdout, _, err := executeReplay(t, name)
	require.NoError(t, err, "given once, it is read")
	require.Contains(t, stdout, memory.FormatBytes(14_000_000))
}

// --layout naming a symbolic link whose file is gone says so: it was told
// it is neither a preset, a layout JSON literal nor a file.
func TestReplayLayoutThroughABrokenLinkSaysSo(t *testing.T) {
	dir := t.TempDir()
	link := filepath.Join(dir, "plan.json")
	require.NoError(t, os.Symlink(filepath.Join(dir, "gone.json"), link))
	_, _, err := executeReplay(t, "--layout", link, writeTrace(t, "small.trace", shortRun))
	require.ErrorIs(t, err, os.ErrNotExist)
	require.ErrorContains(t, err, "is a symbolic link to a file that is not there")
	require.NotContains(t, err.Error(), "neither a preset")
}

// shortRunPlan writes shortRun as a trace and its plan file beside it,
// as vkrt plan --out makes it, and returns their paths.
func shortRunPlan(t *testing.T) (trace, plan string) {
	t.Helper()
	trace = writeTrace(t, "first.trace", shortRun)
	plan = filepath.Join(t.TempDir(), "first.plan")
	_, _, err := execute(t, "plan", trace, "--out", plan)
	require.NoError(t, err)
	return trace, plan
}

// "-" names no standard input: where no file has that name, the error says
// how to read one, /dev/stdin, for a trace and a guest alike ("stat -: no
// such file or directory" alone left a user piping a trace in guessing).
func TestDashSaysHowToReadStandardInput(t *testing.T) {
	var stdout bytes.Buffer
	rootCmd.SetOut(&stdout)
	defer rootCmd.SetOut(nil)
	t.Chdir(t.TempDir())
	// Flags keep the values earlier tests gave them: back to the defaults.
	for _, c := range rootCmd.Commands() {
		if c.Name() == "replay" || c.Name() == "report" {
			c.Flags().VisitAll(func(f *pflag.Flag) {
				require.NoError(t, f.Value.Set(f.DefValue))
				f.Changed = false
			})
		}
	}
	for _, args := range [][]string{{"replay", "-"}, {"report", "--html", "r.html", "-"}} {
		var stderr bytes.Buffer
		require.Equal(t, 1, runCommandLine(args, &stderr), "%v", args)
		require.Equal(t, "vkrt: trace: stat -: no such file or directory (to read standard input, name /dev/stdin)\n", stderr.String(), "%v", args)
	}
	_, err := readGuest("-")
	require.ErrorIs(t, err, os.ErrNotExist)
	require.EqualError(t, err, "open -: no such file or directory (to read standard input, name /dev/stdin)")

	// A file named "-" is read as any other.
	require.NoError(t, os.WriteFile("-", []byte("a 1 10 0\nf 1\n"), 0o644))
	var stderr bytes.Buffer
	require.Equal(t, 0, runCommandLine([]string{"replay", "-"}, &stderr), stderr.String())
}

// A trace asking 2^64 - 1 bytes is refused by the runtime's
// ErrBufferTooBig, whose message starts with "vkrt: " of its own: the
// line says "vkrt:" once.
func TestReplayOfABufferTooBigSaysVkrtOnce(t *testing.T) {
	huge := writeTrace(t, "huge.trace", "a 1 18446744073709551615 0\nf 1\n")
	_, _, err := executeReplay(t, huge)
	require.ErrorIs(t, err, vkruntime.ErrBufferTooBig)
	line := errorLine(err)
	require.Equal(t, 1, strings.Count(line, "vkrt:"), line)
	require.True(t, strings.HasPrefix(line, "vkrt: replay: huge line 1: "), line)
	require.Contains(t, line, ": buffer too big for every pool: asked 18446744073709551615 B")
}

// A second run that is no trace (a directory of its name, a WebAssembly
// workload) is refused before any trace is replayed, as a trace given so
// is: it was found only when its turn came, the traces before it replayed
// and planned, a directory as "reading DIR/NAME.trace after line 0".
func TestReplaySecondRunsAreCheckedFirst(t *testing.T) {
	_, first, seconds := firstRunAndSecondsDir(t)
	require.NoError(t, os.Mkdir(filepath.Join(seconds, "run.trace"), 0o755))
	broken := writeTrace(t, "broken.trace", "f 1\n")
	require.NoError(t, os.WriteFile(filepath.Join(seconds, "broken.trace"), []byte(longRun), 0o644))
	// broken.trace fails as it is read, before run.trace's second run: the
	// directory is said first, before any trace is read.
	_, _, err := executeReplay(t, "--plan", "--second-runs", seconds, broken, first)
	require.EqualError(t, err, "--second-runs: trace: "+filepath.Join(seconds, "run.trace")+" is a directory")

	require.NoError(t, os.Remove(filepath.Join(seconds, "run.trace")))
	require.NoError(t, os.WriteFile(filepath.Join(seconds, "run.trace"), []byte("\x00asm\x01\x00\x00\x00"), 0o644))
	_, _, err = executeReplay(t, "--plan", "--second-runs", seconds, first)
	require.ErrorContains(t, err, filepath.Join(seconds, "run.trace")+" is a WebAssembly workload, not a trace")
}

// A directory holding both NAME.trace and NAME.trace.gz holds two second
// runs of NAME: it is refused, naming both, before any trace is replayed;
// NAME.trace.gz was taken and NAME.trace left unsaid.
func TestReplaySecondRunsRefuseTwoOfOneName(t *testing.T) {
	_, first, seconds := firstRunAndSecondsDir(t)
	plain := filepath.Join(seconds, "run.trace")
	require.NoError(t, os.WriteFile(plain, []byte(longRun), 0o644))
	var zipped bytes.Buffer
	zw := gzip.NewWriter(&zipped)
	_, err := zw.Write([]byte(shortRun))
	require.NoError(t, err)
	require.NoError(t, zw.Close())
	gz := filepath.Join(seconds, "run.trace.gz")
	require.NoError(t, os.WriteFile(gz, zipped.Bytes(), 0o644))
	out, _, err := executeReplay(t, "--plan", "--second-runs", seconds, first)
	require.EqualError(t, err, "--second-runs "+seconds+" holds both "+gz+" and "+plain+" as the second run of "+first+": keep one, remove or rename the other")
	require.Empty(t, out)

	require.NoError(t, os.Remove(plain))
	_, _, err = executeReplay(t, "--plan", "--second-runs", seconds, first)
	require.NoError(t, err, "one of them is the second run")
}

// A stream (a pipe) named by two inputs of one command, a layout and a
// trace or a workload, is refused before either reads it: the first took
// its bytes, and the second read none (vkrt replay --layout /dev/stdin
// /dev/stdin called the trace empty) or what the first left (vkrt run read
// the workload's first bytes and the layout from the fifth byte on).
func TestAStreamGivenToTwoInputsIsRefused(t *testing.T) {
	tr := writeTrace(t, "first.trace", shortRun)
	planFile := filepath.Join(t.TempDir(), "first.plan")
	_, _, err := execute(t, "plan", tr, "--out", planFile)
	require.NoError(t, err)
	data, err := os.ReadFile(planFile)
	require.NoError(t, err)
	pipe := func() string {
		r, w, err := os.Pipe()
		require.NoError(t, err)
		t.Cleanup(func() { r.Close() })
		go func() {
			w.Write(data)
			w.Close()
		}()
		return "/dev/fd/" + strconv.Itoa(int(r.Fd()))
	}
	for _, c := range []struct {
		args []string
		want string
	}{
		{[]string{"replay", "--layout", "PIPE", "PIPE"}, "PIPE is given as --layout and as a trace"},
		{[]string{"report", "--html", filepath.Join(t.TempDir(), "r.html"), "--plan", "PIPE", "PIPE"}, "PIPE is given as --plan and as a trace"},
		{[]string{"report", "--html", filepath.Join(t.TempDir(), "r.html"), "--layout", "PIPE", "--plan", "PIPE", tr}, "PIPE is given as --layout and as --plan"},
		{[]string{"run", "--compile-cache", "", "--layout", "PIPE", "PIPE"}, "PIPE is given as the workload and as --layout"},
	} {
		name := pipe()
		args := slices.Clone(c.args)
		for i, a := range args {
			if a == "PIPE" {
				args[i] = name
			}
		}
		stdout, _, err := execute(t, args[0], args[1:]...)
		require.ErrorContains(t, err, strings.ReplaceAll(c.want, "PIPE", name)+"; it is a stream (a pipe or a device), not a file, and is read once", "%v", args)
		require.Empty(t, stdout, "%v", args)
	}
	// Given to one input, the pipe is read.
	stdout, _, err := executeReplay(t, "--layout", pipe(), tr)
	require.NoError(t, err)
	require.Contains(t, stdout, "planned")
}

// A workload or a trace given where a layout goes (--layout, --plan) is
// said to be one, after the layout reader's refusal, as a workload or a
// plan file given as a trace is: the refusal alone quoted its bytes.
func TestALayoutFlagSaysWhatAWorkloadOrTraceGivenToItIs(t *testing.T) {
	tr := writeTrace(t, "first.trace", shortRun)
	guest := filepath.Join(t.TempDir(), "guest.bin")
	require.NoError(t, os.WriteFile(guest, []byte("\x00asm\x01\x00\x00\x00"), 0o644))
	_, _, err := executeReplay(t, "--layout", guest, tr)
	require.ErrorContains(t, err, "; "+guest+" is a WebAssembly workload, not a layout: run it (vkrt run "+guest+")")
	_, _, err = execute(t, "report", "--html", filepath.Join(t.TempDir(), "r.html"), "--plan", tr, tr)
	require.ErrorContains(t, err, "; "+tr+" is an allocation trace, not a layout: replay it (vkrt replay "+tr+")")
	require.True(t, strings.HasPrefix(err.Error(), "--plan: "), err.Error())

	notes := writeTrace(t, "notes.txt", "hello")
	_, _, err = executeReplay(t, "--layout", notes, tr)
	require.Error(t, err)
	require.NotContains(t, err.Error(), "; ", "nothing to add for a file of no kind vkrt knows")
}

// A directory given as --layout (or report's --plan) is said so once,
// matching syscall.EISDIR: the read said the name twice, "DIR: read DIR:
// is a directory".
func TestLayoutThatIsADirectoryIsSaidOnce(t *testing.T) {
	dir := t.TempDir()
	_, _, err := executeReplay(t, "--layout", dir, resnetTrace)
	require.EqualError(t, err, "--layout: "+dir+" is a directory")
	require.ErrorIs(t, err, syscall.EISDIR)
	_, _, err = execute(t, "report", "--plan", dir, "--html", filepath.Join(t.TempDir(), "r.html"), resnetTrace)
	require.EqualError(t, err, "--plan: "+dir+" is a directory")
	guest := filepath.Join(t.TempDir(), "w.wasm")
	require.NoError(t, os.WriteFile(guest, []byte("\x00asm\x01\x00\x00\x00"), 0o644))
	_, _, err = execute(t, "run", "--layout", dir, guest)
	require.ErrorContains(t, err, "--layout: "+dir+" is a directory")
}

// A layout the pools cannot honour on the replay's device model is the
// flag's error, said once, before any trace is read: it was each trace's,
// in the same words a trace each, after the trace was read (a malformed
// trace was what it said).
func TestLayoutThePoolsCannotHonourIsTheFlagsError(t *testing.T) {
	dir := t.TempDir()
	bad := filepath.Join(dir, "bad.trace")
	require.NoError(t, os.WriteFile(bad, []byte("a 1 100 0\nx\n"), 0o644))
	const empty = `{"Sliced":[]}`
	const why = "the pool layout cannot be honoured: the pool list is empty (on the replay's H200 device model)"
	_, _, err := executeReplay(t, "--layout", empty, resnetTrace, bad, resnetTrace)
	require.EqualError(t, err, "--layout: "+why)
	var ie *memory.InstallError
	require.ErrorAs(t, err, &ie)
	require.Equal(t, memory.InvalidLayout, ie.Kind)

	html := filepath.Join(dir, "r.html")
	_, _, err = execute(t, "report", "--html", html, "--layout", empty, bad)
	require.EqualError(t, err, "--layout: "+why)
	_, _, err = execute(t, "report", "--html", html, "--plan", empty, bad)
	require.EqualError(t, err, "--plan: "+why)
	require.NoFileExists(t, html)

	// A layout the pools take with a warning is warned of once, by the
	// replay: the check says nothing.
	var logged bytes.Buffer
	defer slog.SetDefault(slog.Default())
	slog.SetDefault(slog.New(slog.NewTextHandler(&logged, nil)))
	_, _, err = executeReplay(t, "--layout", `{"Sliced":[{"page_size":200000000000,"pages":1}]}`, resnetTrace)
	require.NoError(t, err)
	require.Equal(t, 1, strings.Count(logged.String(), "is larger than the device memory"), logged.String())
}

// A trace's --json line carries the trace's name itself, JSON escaping
// what it must: it carried the name as the table shows it, quoted and
// escaped, then escaped again ("\"\\\"x\\ny\\\"\"" for a file named "x,
// a newline and y"). The table still shows the name escaped.
func TestReplayJSONCarriesTheTracesOwnName(t *testing.T) {
	name := "\"x\ny\""
	tr := writeTrace(t, name+".trace", shortRun)
	stdout, _, err := executeReplay(t, "--json", tr)
	require.NoError(t, err)
	lines := parseReplayLines(t, stdout)
	require.Len(t, lines, 1)
	require.Equal(t, name, lines[0].Trace)

	table, _, err := executeReplay(t, tr)
	require.NoError(t, err)
	require.Contains(t, table, `"\"x\ny\""`, "the table shows it quoted")

	// Traces of one name, told apart by their directories: the path, as
	// it is.
	dir := t.TempDir()
	for _, sub := range []string{"a\tb", "c"} {
		require.NoError(t, os.Mkdir(filepath.Join(dir, sub), 0o755))
		require.NoError(t, os.WriteFile(filepath.Join(dir, sub, "r\n.trace"), []byte(shortRun), 0o644))
	}
	stdout, _, err = executeReplay(t, "--json", filepath.Join(dir, "a\tb", "r\n.trace"), filepath.Join(dir, "c", "r\n.trace"),
		filepath.Join(dir, "c", "r\n.trace"))
	require.NoError(t, err)
	lines = parseReplayLines(t, stdout)
	require.Len(t, lines, 3)
	require.Equal(t, filepath.ToSlash(dir)+"/a\tb/r\n", lines[0].Trace)
	require.Equal(t, filepath.ToSlash(dir)+"/c/r\n", lines[1].Trace)
	require.Equal(t, filepath.ToSlash(dir)+"/c/r\n (2)", lines[2].Trace)
}

// A second run the command found when it checked the traces, removed
// before its turn came (here while the trace before it is read from a
// pipe), is an error naming it: it was looked for again, none was found,
// and the trace's row read as one with no second run.
func TestReplaySecondRunRemovedBeforeItsTurnFails(t *testing.T) {
	dir, first, seconds := firstRunAndSecondsDir(t)
	second := filepath.Join(seconds, "run.trace")
	require.NoError(t, os.WriteFile(second, []byte(longRun), 0o644))
	pipe := filepath.Join(dir, "piped.trace")
	require.NoError(t, syscall.Mkfifo(pipe, 0o600))
	go func() {
		w, err := os.OpenFile(pipe, os.O_WRONLY, 0)
		if err != nil {
			return
		}
		defer w.Close()
		// The replay has checked the second runs and opened the pipe.
		_ = os.Remove(second)
		_, _ = w.Write([]byte(shortRun))
	}()
	stdout, _, err := executeReplay(t, "--plan", "--json", "--second-runs", seconds, pipe, first)
	require.ErrorIs(t, err, os.ErrNotExist)
	require.ErrorContains(t, err, second)
	require.Len(t, parseReplayLines(t, stdout), 1, "the piped trace, which has no second run, is still replayed")
}

// A trace given twice is numbered past the name of another trace: the
// second x.trace and the file "x (2).trace" were both "x (2)", in the
// table, the --json lines and a plan file's runs.
func TestReplayNumbersATraceGivenTwicePastAnotherTracesName(t *testing.T) {
	t.Chdir(t.TempDir()) // names in the working directory go by their own
	x, x2 := "x.trace", "x (2).trace"
	for _, p := range []string{x, x2} {
		require.NoError(t, os.WriteFile(p, []byte(shortRun), 0o644))
	}
	stdout, _, err := executeReplay(t, "--json", x, x, x2, x)
	require.NoError(t, err)
	var names []string
	for _, l := range parseReplayLines(t, stdout) {
		names = append(names, l.Trace)
	}
	require.Equal(t, []string{"x", "x (3)", "x (2)", "x (4)"}, names)

	out := filepath.Join(t.TempDir(), "p.plan")
	_, _, err = execute(t, "plan", "--out", out, x, x, x2)
	require.NoError(t, err)
	data, err := os.ReadFile(out)
	require.NoError(t, err)
	pf, err := plan.DecodeFile(data)
	require.NoError(t, err)
	require.Equal(t, []string{"x", "x (3)", "x (2)"}, pf.Traces)
}

// --layout of spaces only says the layout is blank: it read "unknown
// layout nothing", after "is neither a preset, a layout JSON literal nor
// a file".
func TestReplayBlankLayoutSaysSo(t *testing.T) {
	small := writeTrace(t, "small.trace", shortRun)
	_, _, err := executeReplay(t, "--layout", "  ", small)
	require.ErrorContains(t, err, `--layout: memory: layout "  " is blank, white space only: want sub-slices`)
	require.NotContains(t, err.Error(), "nothing")
	require.NotContains(t, err.Error(), "neither a preset")
}
