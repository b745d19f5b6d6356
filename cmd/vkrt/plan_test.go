package main

import (
	"bytes"
	"context"
	"fmt"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"testing"

	json "github.com/goccy/go-json"
	"github.com/stretchr/testify/require"

	"github.com/vkrt/vkrt/client"
	"github.com/vkrt/vkrt/dryrun/plan"
	"github.com/vkrt/vkrt/dryrun/replay"
	"github.com/vkrt/vkrt/internal/devtest"
	"github.com/vkrt/vkrt/internal/strictjson"
	"github.com/vkrt/vkrt/internal/wasmtest"
	"github.com/vkrt/vkrt/memory"
)

// A growing stream, and a longer run of it: the second outgrows the first.
const (
	shortRun = "a 1 3000000 0\na 2 5000000 0\nf 1\na 3 9000000 0\nf 2\nf 3\n"
	longRun  = shortRun + "a 4 3000000 0\na 5 5000000 0\nf 4\na 6 40000000 0\nf 5\nf 6\n"
)

func TestPlanTracesWritesAPlanReplayTakesBack(t *testing.T) {
	first, second := writeTrace(t, "first.trace", shortRun), writeTrace(t, "second.trace", longRun)
	out := filepath.Join(t.TempDir(), "workload.plan")
	stdout, stderr, err := execute(t, "plan", first, "--out", out, "--json")
	require.NoError(t, err)
	require.Empty(t, stderr)
	var line planTraceLine
	require.NoError(t, json.Unmarshal([]byte(strings.TrimSpace(stdout)), &line), stdout)
	require.Equal(t, "first", line.Trace)
	require.Equal(t, uint64(14_000_000), line.PeakLiveBytes)
	require.Zero(t, line.Plan.Spills)
	require.LessOrEqual(t, line.Plan.ReservedPeakBytes, line.DryRun.ReservedPeakBytes)

	data, err := os.ReadFile(out)
	require.NoError(t, err)
	require.Equal(t, line.FileBytes, len(data))
	pf, err := plan.DecodeFile(data)
	require.NoError(t, err)
	require.Equal(t, []string{"first"}, pf.Traces)

	// The longer run under the shorter run's plan: the pools grow, the run
	// never fails, the growth is counted.
	stdout, _, err = executeReplay(t, "--layout", out, "--json", second)
	require.NoError(t, err)
	lines := parseReplayLines(t, stdout)
	require.Len(t, lines, 1)
	require.Equal(t, uint64(45_000_000), lines[0].PeakLiveBytes)
	require.Contains(t, string(lines[0].Layout), `"Virtual"`)
	require.Positive(t, lines[0].Spills, "the run left its plan and outgrew it")
	planned, ok := pf.Layout.Virtual()
	require.True(t, ok)
	require.Equal(t, planned.PlannedBytes, lines[0].PlanCapacity)
	require.Equal(t, lines[0].ReservedPeakBytes-lines[0].PlanCapacity, lines[0].GrowthBytes, "how far the run grew past its plan")

	stdout, _, err = execute(t, "plan", first, second, "--out", out)
	require.NoError(t, err)
	require.Contains(t, stdout, "first")
	require.Contains(t, stdout, "second")
	require.Contains(t, stdout, "plan: "+out)
	require.Equal(t, 2, strings.Count(strings.SplitN(stdout, "\n", 2)[0], "bind calls"),
		"what the binds cost, with no plan and under the plan, beside the device allocations")
}

// A plan written to a name ending in .gz is gzipped, and --layout takes it
// back as it takes the plain file: the same plan, the same figures.
func TestPlanTracesWritesAGzippedPlanForAGzName(t *testing.T) {
	first, second := writeTrace(t, "first.trace", shortRun), writeTrace(t, "second.trace", longRun)
	dir := t.TempDir()
	plainOut, packedOut := filepath.Join(dir, "workload.plan"), filepath.Join(dir, "workload.plan.gz")
	_, _, err := execute(t, "plan", first, "--out", plainOut)
	require.NoError(t, err)
	stdout, _, err := execute(t, "plan", first, "--out", packedOut, "--json")
	require.NoError(t, err)
	var line planTraceLine
	require.NoError(t, json.Unmarshal([]byte(strings.TrimSpace(stdout)), &line), stdout)

	packed, err := os.ReadFile(packedOut)
	require.NoError(t, err)
	require.Equal(t, []byte{0x1f, 0x8b}, packed[:2], "a gzip stream")
	require.Equal(t, line.FileBytes, len(packed), "the size told is the file's")
	plainFile, err := plan.ReadFile(plainOut)
	require.NoError(t, err)
	packedFile, err := plan.ReadFile(packedOut)
	require.NoError(t, err)
	require.True(t, plainFile.Layout.Equal(packedFile.Layout))

	plainRun, _, err := executeReplay(t, "--layout", plainOut, "--json", second)
	require.NoError(t, err)
	packedRun, _, err := executeReplay(t, "--layout", packedOut, "--json", second)
	require.NoError(t, err)
	require.Equal(t, parseReplayLines(t, plainRun), parseReplayLines(t, packedRun))

	cut := filepath.Join(dir, "cut.plan.gz")
	require.NoError(t, os.WriteFile(cut, packed[:len(packed)-4], 0o644))
	_, _, err = executeReplay(t, "--layout", cut, second)
	require.ErrorIs(t, err, plan.ErrPlanFile, "a gzipped plan cut short")
}

func TestPlanFilesForAnotherDeviceOrCorruptAreClearErrors(t *testing.T) {
	first := writeTrace(t, "first.trace", shortRun)
	dir := t.TempDir()
	out := filepath.Join(dir, "workload.plan")
	_, _, err := execute(t, "plan", first, "--out", out)
	require.NoError(t, err)
	data, err := os.ReadFile(out)
	require.NoError(t, err)

	write := func(name string, b []byte) string {
		p := filepath.Join(dir, name)
		require.NoError(t, os.WriteFile(p, b, 0o644))
		return p
	}
	other := write("other.plan", bytes.Replace(data, []byte(`"memory_size":150000000000`), []byte(`"memory_size":80000000000`), 1))
	_, _, err = executeReplay(t, "--layout", other, first)
	require.ErrorIs(t, err, plan.ErrPlanFile)
	var mismatch *plan.DeviceMismatchError
	require.ErrorAs(t, err, &mismatch)
	require.ErrorContains(t, err, "memory_size 80000000000, this one has 150000000000")
	require.ErrorContains(t, err, "the replay's H200 device model", "which device 'this one' is")

	wrapped := write("wrapped.plan", bytes.Replace(data, []byte(`"alignment":16`), []byte(`"alignment":18446744073709551632`), 1))
	_, _, err = executeReplay(t, "--layout", wrapped, first)
	require.ErrorIs(t, err, strictjson.ErrNumberDoesNotFit, "a number past 2^64 is refused, not wrapped")
	for name, b := range map[string][]byte{
		"cut.plan":     data[:len(data)/2],
		"version.plan": bytes.Replace(data, []byte(fmt.Sprintf(`"vkrt_plan":%d`, plan.FileVersion)), []byte(fmt.Sprintf(`"vkrt_plan":%d`, plan.FileVersion+1)), 1),
		"extra.plan":   bytes.Replace(data, []byte(`"traces"`), []byte(`"extra":1,"traces"`), 1),
		"wrapped.plan": bytes.Replace(data, []byte(`"alignment":16`), []byte(`"alignment":18446744073709551632`), 1),
		"layout.plan":  bytes.Replace(data, []byte(`"Virtual"`), []byte(`"Virtua"`), 1),
	} {
		_, _, err := executeReplay(t, "--layout", write(name, b), first)
		require.ErrorIs(t, err, plan.ErrPlanFile, name)
	}

	_, _, err = execute(t, "plan", first)
	require.ErrorContains(t, err, "--out FILE")
}

// A virtual plan is told in a line, not as its JSON: slots run to
// thousands of numbers.
func TestDescribePlanSaysWhatAVirtualPlanExpects(t *testing.T) {
	l := memory.VirtualLayout(memory.VirtualPlan{PlannedBytes: 655360, Slots: []memory.VirtualSlot{{Size: 2048, Offset: 0}, {Size: 4096, Offset: 65536}}})
	got := describePlan(l, planCapacity(l))
	require.Contains(t, got, memory.FormatBytes(655360))
	require.Contains(t, got, "each of the 2 buffers")
	require.NotContains(t, got, "slots")
	require.NotContains(t, got, "65536")
}

// Planning from traces replays them on the device model under the Virtual
// layout: a guest's flags (a layout, a device, --verify) would be ignored,
// so they are refused.
func TestPlanTracesRefusesTheFlagsOfAGuest(t *testing.T) {
	first := writeTrace(t, "first.trace", shortRun)
	out := filepath.Join(t.TempDir(), "workload.plan")
	for _, flag := range [][]string{{"--layout", "sub-slices"}, {"--verify"}, {"--device", "1"}, {"--timeout", "1s"}} {
		_, _, err := execute(t, "plan", append([]string{first, "--out", out}, flag...)...)
		require.ErrorContains(t, err, flag[0]+": only for a WebAssembly workload", "%v", flag)
		require.NoFileExists(t, out)
	}
}

// A guest given after a trace is refused as a guest in the wrong place,
// where the trace reader called its bytes a malformed trace.
func TestPlanTracesRefuseAGuestBesideThem(t *testing.T) {
	first := writeTrace(t, "first.trace", shortRun)
	guest := filepath.Join(t.TempDir(), "workload.bin")
	require.NoError(t, os.WriteFile(guest, []byte("\x00asm\x01\x00\x00\x00"), 0o644))
	out := filepath.Join(t.TempDir(), "workload.plan")
	_, _, err := execute(t, "plan", first, guest, "--out", out)
	require.ErrorContains(t, err, guest+" is a WebAssembly workload")
	require.NotContains(t, err.Error(), "unknown event")
	require.NoFileExists(t, out)
}

// deviceGranule is the sparse granule of the device the command tests run
// on, 0 without sparse residency.
func deviceGranule(t *testing.T) uint64 {
	t.Helper()
	c, err := client.Open(context.Background())
	devtest.SkipUnavailable(t, err)
	defer c.Close()
	return c.SparseGranule()
}

// A plan file from traces is made for the replay's H200 model; a guest run
// on another device (lavapipe, the cpu device) places differently, so the
// plan is refused as one for another device, not applied silently.
func TestRunRefusesAPlanFileForAnotherDevice(t *testing.T) {
	devicesOrSkip(t)
	if deviceGranule(t) == replay.H200Granule {
		t.Skip("the device has the replay model's sparse granule: the plan may well be for it")
	}
	first := writeTrace(t, "first.trace", shortRun)
	out := filepath.Join(t.TempDir(), "workload.plan")
	_, _, err := execute(t, "plan", first, "--out", out)
	require.NoError(t, err)
	guest := watFile(t, `(module (memory 1) (func (export "_start")))`)
	for _, cmd := range []string{"run", "plan"} {
		_, _, err = execute(t, cmd, guestArgs(t, guest, "--layout", out)...)
		require.ErrorIs(t, err, plan.ErrPlanFile, cmd)
		var mismatch *plan.DeviceMismatchError
		require.ErrorAs(t, err, &mismatch, cmd)
		require.ErrorContains(t, err, "the plan was made for a device with", cmd)
	}
}

// A virtual plan on a device without sparse residency builds the SubSlices
// pools: the run says so once on stderr and reports no plan capacity, which
// it never had, rather than a growth of 0 past it.
func TestRunSaysAVirtualPlanIsUnusedWithoutSparseResidency(t *testing.T) {
	devicesOrSkip(t)
	if deviceGranule(t) != 0 {
		t.Skip("the device has sparse residency: the virtual plan is followed")
	}
	layout := `{"Virtual":{"planned_bytes":1048576,"slots":[4096,0,8192,65536]}}`
	guest := watFile(t, `(module (memory 1) (func (export "_start")))`)
	stdout, stderr, err := execute(t, "run", guestArgs(t, guest, "--json", "--layout", layout)...)
	require.NoError(t, err)
	var line runLine
	require.NoError(t, json.Unmarshal([]byte(stdout), &line))
	require.Zero(t, line.PlanCapacity, "no plan is in effect")
	require.Equal(t, 1, strings.Count(stderr, "no sparse residency"), stderr)
	require.Contains(t, stderr, "("+memory.FormatBytes(1048576)+" in 2 slots)")

	// One slot is said as one: "in 1 slots" said it wrong.
	_, stderr, err = execute(t, "run", guestArgs(t, guest, "--json", "--layout", `{"Virtual":{"planned_bytes":1048576,"slots":[4096,0]}}`)...)
	require.NoError(t, err)
	require.Contains(t, stderr, "("+memory.FormatBytes(1048576)+" in 1 slot)")
}

// A guest's plan file records the device it was measured on, in the plan
// file format of traces: a run on that device takes it, a device of
// another alignment or sparse granule refuses it as the plan of traces is
// refused, and vkrt replay checks it against its H200 model. A guest's
// plan written before it recorded the device, a bare layout, still loads.
func TestPlanGuestRecordsItsDevice(t *testing.T) {
	devicesOrSkip(t)
	c, err := client.Open(context.Background())
	devtest.SkipUnavailable(t, err)
	props, granule := c.Properties(), c.SparseGranule()
	require.NoError(t, c.Close())

	mlp := wasmtest.GoFile(t, "examples/mlp", "mlp.wasm")
	dir := t.TempDir()
	planFile := filepath.Join(dir, "plan.json")
	_, errOut, err := execute(t, "plan", guestArgs(t, mlp, "--out", planFile, "--", "--steps", "2")...)
	require.NoError(t, err, errOut)
	pf, err := plan.ReadFile(planFile)
	require.NoError(t, err, "a guest's plan is a plan file")
	require.Equal(t, props, pf.Device)
	require.Equal(t, granule, pf.Granule)
	require.Positive(t, planCapacity(pf.Layout))
	packedFile := filepath.Join(dir, "plan.json.gz")
	_, errOut, err = execute(t, "plan", guestArgs(t, mlp, "--out", packedFile, "--", "--steps", "2")...)
	require.NoError(t, err, errOut)
	packed, err := plan.ReadFile(packedFile)
	require.NoError(t, err, "a guest's plan, gzipped for its name")
	require.True(t, packed.Layout.Equal(pf.Layout), "the same guest, the same plan")

	run := func(layout string) (runLine, error) {
		out, errOut, err := execute(t, "run", guestArgs(t, mlp, "--json", "--layout", layout, "--", "--steps", "2")...)
		var line runLine
		if err == nil {
			require.NoError(t, json.Unmarshal([]byte(out), &line), errOut)
		}
		return line, err
	}
	line, err := run(planFile)
	require.NoError(t, err, "the device it was measured on takes it")
	require.Equal(t, planCapacity(pf.Layout), line.PlanCapacity)
	require.Zero(t, line.Spills)

	other := pf
	other.Device.Alignment *= 2
	data, err := other.MarshalJSON()
	require.NoError(t, err)
	otherFile := filepath.Join(dir, "other.json")
	require.NoError(t, os.WriteFile(otherFile, data, 0o644))
	_, err = run(otherFile)
	var mismatch *plan.DeviceMismatchError
	require.ErrorAs(t, err, &mismatch)
	require.ErrorIs(t, err, plan.ErrPlanFile)
	require.Equal(t, "alignment", mismatch.Field)

	if pf.Device != replay.H200() || pf.Granule != replay.H200Granule {
		_, _, err = execute(t, "replay", "--layout", planFile, writeTrace(t, "short.trace", shortRun))
		require.ErrorAs(t, err, &mismatch, "the replay's H200 model is another device")
	}

	// Before, --out wrote the plan's layout alone.
	bare, err := json.Marshal(pf.Layout)
	require.NoError(t, err)
	bareFile := filepath.Join(dir, "bare.json")
	require.NoError(t, os.WriteFile(bareFile, bare, 0o644))
	line, err = run(bareFile)
	require.NoError(t, err, "a plan without a device still loads")
	require.Equal(t, planCapacity(pf.Layout), line.PlanCapacity)
}

// vkrt plan takes a guest by what it holds as vkrt run does, not only by
// a .wasm name; a pipe is never read ahead of the trace reader, and a file
// that is not WebAssembly is read as a trace.
func TestPlanTakesAGuestByItsContent(t *testing.T) {
	devicesOrSkip(t)
	mlp := wasmtest.GoFile(t, "examples/mlp", "mlp.wasm")
	module, err := os.ReadFile(mlp)
	require.NoError(t, err)
	renamed := filepath.Join(t.TempDir(), "mlp.bin")
	require.NoError(t, os.WriteFile(renamed, module, 0o644))
	out, errOut, err := execute(t, "plan", guestArgs(t, renamed, "--", "--steps", "2")...)
	require.NoError(t, err, errOut)
	require.Contains(t, out, "dry run:  ", "planned as a guest")

	// A trace under any name is still a trace.
	first := writeTrace(t, "first.bin", shortRun)
	planFile := filepath.Join(t.TempDir(), "workload.plan")
	_, errOut, err = execute(t, "plan", first, "--out", planFile)
	require.NoError(t, err, errOut)
	require.FileExists(t, planFile)
}

// plan --out /dev/stdout writes the plan file alone there, and its summary
// to stderr: the plan read back from stdout is one --layout takes.
func TestPlanOutToStdoutKeepsTheSummaryOff(t *testing.T) {
	first := writeTrace(t, "first.trace", shortRun)
	for _, asJSON := range []bool{false, true} {
		args := []string{first, "--out", "/dev/stdout"}
		if asJSON {
			args = append(args, "--json")
		}
		var out, errOut string
		var err error
		piped := withStdout(t, func() { out, errOut, err = execute(t, "plan", args...) })
		require.NoError(t, err)
		require.Empty(t, out)
		require.Contains(t, errOut, "first", "the summary")
		pf, err := plan.DecodeFile([]byte(piped))
		require.NoError(t, err, "stdout holds the plan file alone: %q", piped)
		require.Equal(t, []string{"first"}, pf.Traces)
	}
}

// The plan file's name is shown as a label: an escape sequence in it is
// quoted, not sent to the terminal, which acts on it.
func TestPlanSummaryQuotesAnOutNameATerminalActsOn(t *testing.T) {
	first := writeTrace(t, "first.trace", shortRun)
	out := filepath.Join(t.TempDir(), "x\x1b[31m.json")
	stdout, _, err := execute(t, "plan", first, "--out", out)
	require.NoError(t, err)
	require.NotContains(t, stdout, "\x1b", "the escape reached the terminal")
	require.Contains(t, stdout, strconv.Quote(out))
	_, err = os.Stat(out)
	require.NoError(t, err, "the plan is written under the name given")
}

// Arguments after "--" are a guest's: given after traces they are refused
// as such, where "-- --steps 3" was read as a trace named --steps, "stat
// --steps: no such file or directory". A lone "--", or one before a trace
// whose name starts with a dash, still plans.
func TestPlanTracesRefuseAGuestsArguments(t *testing.T) {
	first := writeTrace(t, "first.trace", shortRun)
	out := filepath.Join(t.TempDir(), "workload.plan")
	_, _, err := execute(t, "plan", first, "--out", out, "--", "--steps", "3")
	require.ErrorContains(t, err, `--steps 3 after "--": arguments for a WebAssembly workload, and `+first+" is a trace")
	require.NotContains(t, err.Error(), "no such file")
	require.NoFileExists(t, out)

	_, _, err = execute(t, "plan", first, "--out", out, "--")
	require.NoError(t, err)
	require.FileExists(t, out)
	dashed := writeTrace(t, "-dashed.trace", shortRun)
	t.Chdir(filepath.Dir(dashed))
	_, _, err = execute(t, "plan", "--out", out, "--", filepath.Base(dashed))
	require.NoError(t, err)
}

// A trace that is not there is said before a missing --out, each on a line
// of its own: the --out line alone sent the user to add a flag, to be told
// then that the trace did not exist.
func TestPlanTracesNamesAMissingTraceBeforeAMissingOut(t *testing.T) {
	_, _, err := execute(t, "plan", "-")
	lines := strings.Split(errorLine(err), "\n")
	require.Len(t, lines, 2, "%v", err)
	require.Equal(t, "vkrt: trace: stat -: no such file or directory (to read standard input, name /dev/stdin)", lines[0])
	require.Equal(t, "vkrt: plan: --out FILE is needed to plan from traces", lines[1])

	_, _, err = execute(t, "plan", writeTrace(t, "first.trace", shortRun))
	require.EqualError(t, err, "plan: --out FILE is needed to plan from traces", "the traces are there: the flag alone is missing")
}

// More traces than a plan file names are refused before any is read: the
// last of them, malformed, was what the command said, once it had read
// every trace before it.
func TestPlanTracesRefusesTooManyBeforeReadingThem(t *testing.T) {
	good := writeTrace(t, "run.trace", shortRun)
	paths := make([]string, 0, plan.MaxFileTraces+1)
	for range plan.MaxFileTraces {
		paths = append(paths, good)
	}
	paths = append(paths, writeTrace(t, "bad.trace", "not a trace\n"))
	_, _, err := execute(t, "plan", append([]string{"--out", filepath.Join(t.TempDir(), "p.plan")}, paths...)...)
	require.ErrorIs(t, err, plan.ErrCannotPlan)
	require.ErrorContains(t, err, fmt.Sprintf("%d runs, more than the %d a plan file names", plan.MaxFileTraces+1, plan.MaxFileTraces))
}

// vkrt plan --json and the plan file name each trace by its own name,
// JSON escaping what it must: both carried the name as the table shows
// it, quoted and escaped, escaped again.
func TestPlanTracesJSONCarriesTheTracesOwnName(t *testing.T) {
	name := "\"x\ny\""
	first := writeTrace(t, name+".trace", shortRun)
	out := filepath.Join(t.TempDir(), "workload.plan")
	stdout, _, err := execute(t, "plan", first, "--out", out, "--json")
	require.NoError(t, err)
	var line planTraceLine
	require.NoError(t, json.Unmarshal([]byte(strings.TrimSpace(stdout)), &line), stdout)
	require.Equal(t, name, line.Trace)
	data, err := os.ReadFile(out)
	require.NoError(t, err)
	pf, err := plan.DecodeFile(data)
	require.NoError(t, err)
	require.Equal(t, []string{name}, pf.Traces)

	table, _, err := execute(t, "plan", first, "--out", out)
	require.NoError(t, err)
	require.Contains(t, table, `"\"x\ny\""`, "the table shows it quoted")
}
