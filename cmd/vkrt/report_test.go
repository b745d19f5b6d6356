package main

import (
	"bytes"
	"fmt"
	"os"
	"path/filepath"
	"regexp"
	"strings"
	"testing"

	json "github.com/goccy/go-json"
	"github.com/spf13/cobra"
	"github.com/stretchr/testify/require"

	"github.com/vkrt/vkrt/dryrun/plan"
	"github.com/vkrt/vkrt/internal/htmlreport"
	"github.com/vkrt/vkrt/internal/strictjson"
	"github.com/vkrt/vkrt/memory"
	"github.com/vkrt/vkrt/runtime/environment"
)

// smallTrace writes a stream of a few events: a 3 MB tensor outlives two
// smaller ones.
func smallTrace(t *testing.T, dir string) string {
	t.Helper()
	path := filepath.Join(dir, "small.trace")
	require.NoError(t, os.WriteFile(path, []byte("a 1 3000000 0\na 2 1000 0\nf 2\na 3 500000 0\nf 3\nf 1\n"), 0o644))
	return path
}

// executeReport runs `vkrt report --html FILE args... small.trace` and
// returns the page it wrote.
func executeReport(t *testing.T, args ...string) string {
	t.Helper()
	dir := t.TempDir()
	out := filepath.Join(dir, "report.html")
	_, _, err := execute(t, "report", append(append([]string{"--html", out}, args...), smallTrace(t, dir))...)
	require.NoError(t, err)
	page, err := os.ReadFile(out)
	require.NoError(t, err)
	return string(page)
}

func TestReportWritesTracesAndEnvironment(t *testing.T) {
	t.Setenv(environment.DirEnvVar, t.TempDir())
	seedEnvironment(t, "bench")
	html := executeReport(t, "--env", "bench")
	require.Contains(t, html, `data-trace="small"`)
	// The figures vkrt replay --plan measures for the same stream.
	out, _, err := execute(t, "replay", "--plan", "--json", smallTrace(t, t.TempDir()))
	require.NoError(t, err)
	var replayed struct {
		PeakLiveBytes uint64 `json:"peak_live_bytes"`
		DriverAllocs  uint64 `json:"driver_allocs"`
		Plan          struct {
			ReservedPeakBytes uint64 `json:"reserved_peak_bytes"`
			DriverAllocs      uint64 `json:"driver_allocs"`
		} `json:"plan"`
	}
	require.NoError(t, json.Unmarshal([]byte(out), &replayed))
	require.Regexp(t, fmt.Sprintf(`<p class="verdict">plan reserves %.3f× peak live, [^<]*, in %d device allocations? against %d</p>`,
		float64(replayed.Plan.ReservedPeakBytes)/float64(replayed.PeakLiveBytes), replayed.Plan.DriverAllocs, replayed.DriverAllocs), html)
	require.Contains(t, html, fmt.Sprintf("peak live %s (%s B)", memory.FormatBytes(replayed.PeakLiveBytes), "3,500,000"),
		"the floor is the stream's peak live bytes")
	// The environment: one bar per memory record, the note left out.
	require.Equal(t, 3, strings.Count(html, `<g class="record"`))
	for i, label := range []string{"model loaded", "after the dry run", "after the real run"} {
		require.Contains(t, html, fmt.Sprintf("<title>#%d %s, ", i+1, label))
	}
	require.NotContains(t, html, "after the note")
	require.Contains(t, html, `data-reserved="`+"2097664"+`"`, "the second record reserves 2 MiB + 512 B")
	require.NotRegexp(t, regexp.MustCompile(`(?i)(src|href)=|https?://|@import|url\(`), html, "nothing is fetched")
}

// An environment of more memory records than the chart has bars is drawn
// in groups of records in a row, each bar the record of its group that
// reserved the most: here the last of each, as each record reserves more
// than the one before.
func TestReportDrawsManyRecordsInGroups(t *testing.T) {
	t.Setenv(environment.DirEnvVar, t.TempDir())
	env, err := environment.Open("many")
	require.NoError(t, err)
	n := 2*htmlreport.MaxEnvBars + 1
	for i := range n {
		body, err := json.Marshal(sampleMemoryRecord(fmt.Sprint("step ", i+1), uint64(i+1)))
		require.NoError(t, err)
		_, err = env.PutJSON(t.Context(), environment.KindMemory, fmt.Sprint("step ", i+1), body)
		require.NoError(t, err)
	}
	require.NoError(t, env.Close())
	html := executeReport(t, "--env", "many")
	// 2×MaxEnvBars records are MaxEnvBars groups of two; the next joins
	// them into groups of four and stands alone.
	bars := htmlreport.MaxEnvBars/2 + 1
	require.Equal(t, bars, strings.Count(html, `<g class="record"`))
	require.Contains(t, html, fmt.Sprintf("%d memory records, ", n))
	require.Contains(t, html, fmt.Sprintf(", in %d bars</p>", bars))
	require.Contains(t, html, "One bar per 4 memory records in a row")
	require.Contains(t, html, `<g class="record" data-id="4" `)
	require.Contains(t, html, "<title>records #1 to #4 (4, ")
	require.Contains(t, html, fmt.Sprintf(`<g class="record" data-id="%d" `, n), "the last record stands alone")
}

func TestReportDrawsTheRestWhenOneRecordCannotBeDecoded(t *testing.T) {
	t.Setenv(environment.DirEnvVar, t.TempDir())
	seedEnvironment(t, "bench")
	addUndecodableRecord(t, "bench")
	dir := t.TempDir()
	out := filepath.Join(dir, "report.html")
	_, _, err := execute(t, "report", "--html", out, "--env", "bench", smallTrace(t, dir))
	require.ErrorIs(t, err, strictjson.ErrNumberDoesNotFit, "the bad record is reported, not drawn as 1 B")
	require.ErrorContains(t, err, "1 of 5 records could not be decoded (left out of the records chart)")
	require.ErrorContains(t, err, "decoding record 5 ", "the error names the record")

	page, readErr := os.ReadFile(out)
	require.NoError(t, readErr, "the page is written all the same")
	html := string(page)
	require.Contains(t, html, `data-trace="small"`)
	require.Equal(t, 4, strings.Count(html, `<g class="record"`), "every record that decodes is drawn")
	require.NotContains(t, html, `<g class="record" data-id="5"`)
	require.Contains(t, html, `<g class="record" data-id="6" data-live="1500" data-reserved="1049088"`)
	require.Regexp(t, `<div class="undecodable"><p>1 record could not be decoded and is not drawn:</p>\s*<ul><li>#5 wrapped, [^<]*decoding record 5 [^<]*</li></ul></div>`, html)
}

func TestReportChartsEveryStreamsPools(t *testing.T) {
	// Each stream has pools of its own; the second one's tensors are live
	// while the first one's are, so the reserved peak spans both.
	dir := t.TempDir()
	two := filepath.Join(dir, "two.trace")
	require.NoError(t, os.WriteFile(two, []byte("a 1 3000000 0\na 2 1000000 1\nf 1\na 3 500000 1\nf 3\nf 2\n"), 0o644))
	out, _, err := execute(t, "replay", "--json", two)
	require.NoError(t, err)
	var replayed struct {
		PeakLiveBytes     uint64 `json:"peak_live_bytes"`
		ReservedPeakBytes uint64 `json:"reserved_peak_bytes"`
	}
	require.NoError(t, json.Unmarshal([]byte(out), &replayed))
	require.Equal(t, uint64(4_000_000), replayed.PeakLiveBytes)

	page := filepath.Join(dir, "report.html")
	// A plan is per stream, so this trace is drawn under a given one.
	_, _, err = execute(t, "report", "--html", page, "--plan", "sub-slices", two)
	require.NoError(t, err)
	body, err := os.ReadFile(page)
	require.NoError(t, err)
	html := string(body)
	for _, stream := range []string{"0", "1"} {
		require.Contains(t, html, `data-pool="stream `+stream+`: virtual range, 64 KiB granules"`, "each stream's pools are drawn and named")
	}
	require.Contains(t, html, `dy="14">`+memory.FormatBytes(replayed.ReservedPeakBytes)+`</tspan>`, "the reserved peak across both streams")
	require.Contains(t, html, "peak live 4.00 MB (4,000,000 B)")
}

// A trace of several streams cannot be planned (plans are per stream): its
// run without a plan is drawn all the same, the page and the error saying
// why there is no plan, and the command fails once the page is written.
func TestReportDrawsATraceItCannotPlanWithoutAPlan(t *testing.T) {
	dir := t.TempDir()
	two := filepath.Join(dir, "two.trace")
	require.NoError(t, os.WriteFile(two, []byte("a 1 3000000 0\na 2 1000000 1\nf 1\na 3 500000 1\nf 3\nf 2\n"), 0o644))
	page := filepath.Join(dir, "report.html")
	_, _, err := execute(t, "report", "--html", page, smallTrace(t, dir), two)
	require.ErrorIs(t, err, plan.ErrCannotPlan)
	require.ErrorContains(t, err, "two is drawn without a plan")
	require.ErrorContains(t, err, "allocates on streams 0 and 1")
	require.Equal(t, 1, exitStatus(err), "a page with a part left out is not a success")

	body, readErr := os.ReadFile(page)
	require.NoError(t, readErr, "the page is written all the same")
	html := string(body)
	_, small, ok := strings.Cut(html, `data-trace="small"`)
	require.True(t, ok)
	small, twoSection, ok := strings.Cut(small, `data-trace="two"`)
	require.True(t, ok)
	require.Contains(t, small, `<figure class="chart" data-run="plan">`, "the other trace keeps its plan")
	require.Contains(t, twoSection, `<figure class="chart" data-run="default">`)
	for _, stream := range []string{"0", "1"} {
		require.Contains(t, twoSection, `data-pool="stream `+stream+`: `, "each stream's pools are drawn")
	}
	require.NotContains(t, twoSection, `data-run="plan"`)
	require.Regexp(t, `<p class="verdict">No plan: [^<]*allocates on streams 0 and 1; pools and plans are per stream`, twoSection)
}

func TestReportUnderAGivenPlan(t *testing.T) {
	html := executeReport(t, "--plan", "exclusive-pages")
	require.Contains(t, html, "given by --plan exclusive-pages")
	require.Contains(t, html, "Plan ("+memory.ExclusivePagesLayout().Kind().String()+")")
	require.Contains(t, html, `data-pool="a page of its own each`, "the plan's pools are drawn")
}

func TestReportRefusesBadInputAndLeavesTheOldPage(t *testing.T) {
	dir := t.TempDir()
	out := filepath.Join(dir, "report.html")
	require.NoError(t, os.WriteFile(out, []byte("old"), 0o644))
	bad := filepath.Join(dir, "bad.trace")
	require.NoError(t, os.WriteFile(bad, []byte("a 1 100 0\nx\n"), 0o644))
	for _, args := range [][]string{
		{"--html", out},
		{"--html", out, bad},
		{"--html", out, filepath.Join(dir, "missing.trace")},
		{"--html", out, "--plan", "no-such-layout", smallTrace(t, dir)},
		{"--html", out, "--env", "no-such-env"},
		{"--html", filepath.Join(dir, "no-dir", "r.html"), smallTrace(t, dir)},
	} {
		_, _, err := execute(t, "report", args...)
		require.Error(t, err, "%v", args)
		page, err := os.ReadFile(out)
		require.NoError(t, err)
		require.Equal(t, "old", string(page), "%v leaves the old page", args)
	}
	entries, err := os.ReadDir(dir)
	require.NoError(t, err)
	for _, e := range entries {
		require.False(t, strings.HasPrefix(e.Name(), "."), "no temporary file is left: %s", e.Name())
	}
}

func TestReportUnderAnotherRunsPlan(t *testing.T) {
	// vkrt plan saves the first run's plan; the second run's stream differs,
	// so its tensors miss their planned places and spill.
	dir := t.TempDir()
	first, second, planFile := smallTrace(t, dir), filepath.Join(dir, "second.trace"), filepath.Join(dir, "first.plan")
	require.NoError(t, os.WriteFile(second, []byte("a 1 3000000 0\na 2 9000000 0\nf 1\na 3 500000 0\nf 3\nf 2\n"), 0o644))
	_, _, err := execute(t, "plan", first, "--out", planFile)
	require.NoError(t, err)
	out, _, err := execute(t, "replay", "--json", "--layout", planFile, second)
	require.NoError(t, err)
	var replayed struct {
		Spills            uint64 `json:"spills"`
		ReservedPeakBytes uint64 `json:"reserved_peak_bytes"`
	}
	require.NoError(t, json.Unmarshal([]byte(out), &replayed))
	require.Positive(t, replayed.Spills, "the second run misses the first run's plan")

	page := filepath.Join(dir, "report.html")
	_, _, err = execute(t, "report", "--html", page, "--plan", planFile, second)
	require.NoError(t, err)
	body, err := os.ReadFile(page)
	require.NoError(t, err)
	html := string(body)
	require.Contains(t, html, "given by --plan first.plan")
	require.Regexp(t, `<p class="verdict">plan reserves [^<]*, `+fmt.Sprint(replayed.Spills)+` spills?</p>`, html)
	require.Contains(t, html, `<tr data-run="plan"><td>plan</td><td>`+memory.FormatBytes(replayed.ReservedPeakBytes)+`</td>`)
}

func TestReportLeavesOutARecordWhoseTotalsOverflow(t *testing.T) {
	t.Setenv(environment.DirEnvVar, t.TempDir())
	seedEnvironment(t, "bench")
	addOverflowingRecord(t, "bench")
	dir := t.TempDir()
	out := filepath.Join(dir, "report.html")
	_, _, err := execute(t, "report", "--html", out, "--env", "bench", smallTrace(t, dir))
	require.ErrorIs(t, err, errTotalsOverflow)
	require.ErrorContains(t, err, "record 5 ")

	page, readErr := os.ReadFile(out)
	require.NoError(t, readErr, "the page is written all the same")
	html := string(page)
	require.Equal(t, 4, strings.Count(html, `<g class="record"`), "every other record is drawn")
	require.NotContains(t, html, `<g class="record" data-id="5"`)
	require.Regexp(t, `<ul><li>#5 overflowing, [^<]*record 5 [^<]*bytes_reserved</li></ul>`, html)
}

// A terminal sees each trace's stages as vkrt replay shows them: the replay
// under the layout without a plan, the planning and the replay under the
// plan, each counted; stderr that is not a terminal gets none of it.
// An environment that does not exist is found before any trace is read
// and replayed: it was found after every replay, which takes minutes for
// long traces, and a trace that fails as it is read was what it said.
func TestReportFindsAMissingEnvironmentBeforeTheTraces(t *testing.T) {
	t.Setenv(environment.DirEnvVar, t.TempDir())
	dir := t.TempDir()
	bad := filepath.Join(dir, "bad.trace")
	require.NoError(t, os.WriteFile(bad, []byte("a 1 100 0\nx\n"), 0o644))
	_, _, err := execute(t, "report", "--html", filepath.Join(dir, "r.html"), "--env", "no-such-env", bad)
	require.ErrorIs(t, err, os.ErrNotExist)
	require.ErrorContains(t, err, `environment "no-such-env" does not exist`)
	require.NoFileExists(t, filepath.Join(dir, "r.html"))
}

func TestReportShowsProgressWithinATrace(t *testing.T) {
	var buf bytes.Buffer
	bar := &replayProgress{w: &buf, visible: true}
	layout, err := replayLayout("sub-slices")
	require.NoError(t, err)
	traces, err := reportTraces([]string{resnetTrace}, htmlreport.Layouts{Default: layout, DefaultName: "default layout"}, bar)
	require.NoError(t, err)
	require.Len(t, traces, 1)
	for _, stage := range []string{"replaying resnet50_train", "planning resnet50_train", "replaying resnet50_train under the plan"} {
		require.Regexp(t, regexp.QuoteMeta(stage)+`[^\n\r]*\d+/\d+`, buf.String(), "the stage %q is counted", stage)
	}

	dir := t.TempDir()
	_, stderr, err := execute(t, "report", "--html", filepath.Join(dir, "report.html"), smallTrace(t, dir))
	require.NoError(t, err)
	require.Empty(t, stderr, "no progress when stderr is not a terminal")
}

// The environment's write-ahead log and its index are its files too: a
// page written over the log took the records committed in it with it (5
// records a killed writer left in the log, listed before, none after).
func TestReportRefusesToWriteOverTheEnvironmentsLogOrIndex(t *testing.T) {
	t.Setenv(environment.DirEnvVar, t.TempDir())
	writer, err := environment.Open("open")
	require.NoError(t, err)
	defer writer.Close()
	body, err := json.Marshal(sampleMemoryRecord("in the log", 1))
	require.NoError(t, err)
	_, err = writer.PutJSON(t.Context(), environment.KindMemory, "in the log", body)
	require.NoError(t, err)
	for _, side := range []string{"-wal", "-shm"} {
		path := writer.Path() + side
		before, err := os.ReadFile(path)
		require.NoError(t, err)
		_, _, err = execute(t, "report", "--html", path, "--env", "open")
		require.ErrorContains(t, err, "is the input file", side)
		after, err := os.ReadFile(path)
		require.NoError(t, err)
		require.True(t, bytes.Equal(before, after), "%s is left as it was", side)
	}
	recs, err := writer.Query(t.Context(), environment.Query{})
	require.NoError(t, err)
	require.Len(t, recs, 1)

	// Closed cleanly, the environment has no log or index; their paths are
	// its inputs all the same, and the rollback journal's.
	path := writer.Path()
	require.NoError(t, writer.Close())
	for _, side := range []string{"-wal", "-shm", "-journal"} {
		_, err := os.Stat(path + side)
		require.ErrorIs(t, err, os.ErrNotExist, side)
		_, _, err = execute(t, "report", "--html", path+side, "--env", "open")
		require.ErrorContains(t, err, "is the input file", side)
		_, err = os.Stat(path + side)
		require.ErrorIs(t, err, os.ErrNotExist, "no page was written at %s", side)
	}
}

// "-" names no file for report --html or plan --out (conformance's
// reports take it for stdout): each made a file named "-" in the working
// directory and exited 0.
func TestFileOutputsRefuseADash(t *testing.T) {
	t.Setenv(environment.DirEnvVar, t.TempDir())
	seedEnvironment(t, "bench")
	trace, err := filepath.Abs(filepath.Join("..", "..", "testdata", "traces", "gpt2_train.trace.gz"))
	require.NoError(t, err)
	t.Chdir(t.TempDir())
	for _, args := range [][]string{
		{"report", "--html", "-", "--env", "bench"},
		{"plan", trace, "--out", "-"},
	} {
		_, _, err := execute(t, args[0], args[1:]...)
		require.ErrorContains(t, err, "name the file to write", "%v", args)
		_, err = os.Stat("-")
		require.ErrorIs(t, err, os.ErrNotExist, "%v made a file named -", args)
	}
}

// A --layout or --plan file's name is shown quoted where it holds a rune
// that is not printable: a bidirectional override in it turned the
// verdict's figures after it around.
func TestReportQuotesALayoutFileNameThatIsNotPrintable(t *testing.T) {
	first := writeTrace(t, "first.trace", shortRun)
	layout := filepath.Join(t.TempDir(), "lay\u202eout.json")
	require.NoError(t, os.WriteFile(layout, []byte(`"Direct"`), 0o644))
	out := filepath.Join(t.TempDir(), "page.html")
	_, _, err := execute(t, "report", "--html", out, "--layout", layout, "--plan", layout, first)
	require.NoError(t, err)
	page, err := os.ReadFile(out)
	require.NoError(t, err)
	require.NotContains(t, string(page), "\u202e", "the override is not in the page")
	require.Contains(t, string(page), `lay\u202eout.json`)
}

// Traces of one name (a run and its second run in variants/) get sections
// of their own names, told apart by their paths: one heading and anchor
// each, the same path given twice numbered.
func TestReportTellsTracesOfOneNameApart(t *testing.T) {
	t.Chdir(t.TempDir())
	require.NoError(t, os.Mkdir("variants", 0o755))
	for _, p := range []string{"run.trace", "variants/run.trace"} {
		require.NoError(t, os.WriteFile(p, []byte(shortRun), 0o644))
	}
	_, _, err := execute(t, "report", "--html", "page.html", "run.trace", "variants/run.trace", "variants/run.trace")
	require.NoError(t, err)
	page, err := os.ReadFile("page.html")
	require.NoError(t, err)
	for _, name := range []string{"run", "variants/run", "variants/run (2)"} {
		// An id holds no whitespace.
		require.Equal(t, 1, strings.Count(string(page), `id="trace-`+strings.ReplaceAll(name, " ", "_")+`"`), name)
		require.Equal(t, 1, strings.Count(string(page), "<h2>"+name+"</h2>"), name)
	}
}

// --layout and --plan shape the traces' charts: given with an environment
// alone, which they would not change, they are refused, not ignored.
func TestReportRefusesALayoutWithNoTraceToApplyItTo(t *testing.T) {
	t.Setenv(environment.DirEnvVar, t.TempDir())
	seedEnvironment(t, "bench")
	out := filepath.Join(t.TempDir(), "report.html")
	for _, args := range [][]string{{"--layout", "sub-slices"}, {"--plan", "sub-slices"}} {
		_, _, err := execute(t, "report", append([]string{"--html", out, "--env", "bench"}, args...)...)
		require.ErrorContains(t, err, args[0]+" applies to traces")
		_, err = os.Stat(out)
		require.ErrorIs(t, err, os.ErrNotExist)
	}
	_, _, err := execute(t, "report", "--html", out, "--env", "bench")
	require.NoError(t, err)
}

// Every --layout and report's --plan take a plan file vkrt plan --out
// wrote, and their help says so, as replay's does: it named a layout's
// file alone.
func TestLayoutFlagsHelpNamesThePlanFileTheyTake(t *testing.T) {
	commands := map[string]*cobra.Command{}
	for _, c := range rootCmd.Commands() {
		commands[c.Name()] = c
	}
	for _, name := range []string{"run", "plan", "report"} {
		require.Contains(t, commands[name].Flags().Lookup("layout").Usage, "a plan file (vkrt plan --out)", name)
	}
	require.Contains(t, commands["report"].Flags().Lookup("plan").Usage, "a plan file (vkrt plan --out)")
	require.Contains(t, commands["report"].Long, "a plan file: vkrt plan --out of traces")

	dir := t.TempDir()
	trace, planFile := smallTrace(t, dir), filepath.Join(dir, "run.plan")
	_, _, err := execute(t, "plan", trace, "--out", planFile)
	require.NoError(t, err)
	_, _, err = execute(t, "report", "--html", filepath.Join(dir, "report.html"), "--layout", planFile, "--plan", planFile, trace)
	require.NoError(t, err, "as the help says")
}

// An environment with no memory records is said on stderr as vkrt records
// says it, and the command succeeds as records does: the page alone said
// "no memory records", with nothing on stderr.
func TestReportOfAnEnvironmentWithoutMemoryRecordsSaysSo(t *testing.T) {
	t.Setenv(environment.DirEnvVar, t.TempDir())
	empty, err := environment.Open("empty")
	require.NoError(t, err)
	require.NoError(t, empty.Close())
	out := filepath.Join(t.TempDir(), "report.html")
	_, stderr, err := execute(t, "report", "--html", out, "--env", "empty")
	require.NoError(t, err)
	require.Equal(t, `vkrt: environment "empty" holds no records`+"\n", stderr)
	page, err := os.ReadFile(out)
	require.NoError(t, err)
	require.Contains(t, string(page), "no memory records")

	notes, err := environment.Open("notes")
	require.NoError(t, err)
	_, err = notes.PutJSON(t.Context(), "note", "a note", []byte(`{"text":"not a memory record"}`))
	require.NoError(t, err)
	require.NoError(t, notes.Close())
	_, stderr, err = execute(t, "report", "--html", out, "--env", "notes")
	require.NoError(t, err)
	require.Equal(t, `vkrt: no record of kind "memory" in environment "notes" (its kinds: "note")`+"\n", stderr)
	_, recordsStderr, err := execute(t, "records", "--env", "notes")
	require.NoError(t, err)
	require.Equal(t, recordsStderr, stderr, "as vkrt records says it")
}
