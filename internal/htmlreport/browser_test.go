package htmlreport

import (
	"bytes"
	"context"
	"fmt"
	"image"
	"image/png"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/vkrt/vkrt/dryrun/plan"
	"github.com/vkrt/vkrt/dryrun/replay"
	"github.com/vkrt/vkrt/dryrun/trace"
	"github.com/vkrt/vkrt/internal/tracetest"
	"github.com/vkrt/vkrt/memory"
)

// testDefault is the layout the tests replay without a plan: vkrt replay's.
var testDefault = Layouts{Default: memory.VirtualLayout(memory.VirtualPlan{}), DefaultName: "default layout"}

// chromium finds Debian's headless-capable browser. In CI, or with
// VKRT_REQUIRE_BROWSER=1, a missing browser fails the test; elsewhere it
// skips it.
func chromium(t *testing.T) string {
	t.Helper()
	for _, name := range []string{"chromium", "chromium-browser"} {
		if path, err := exec.LookPath(name); err == nil {
			return path
		}
	}
	if os.Getenv("CI") == "true" || os.Getenv("VKRT_REQUIRE_BROWSER") == "1" {
		t.Fatal("chromium is not installed (ci/install.sh installs it)")
	}
	t.Skip("chromium is not installed")
	return ""
}

// browse loads a page in a fresh headless chromium with extra flags and
// returns what it printed.
func browse(t *testing.T, browser, page string, flags ...string) []byte {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	args := append([]string{"--headless", "--no-sandbox", "--disable-gpu", "--disable-background-networking",
		"--disable-component-update", "--disable-sync", "--no-first-run", "--hide-scrollbars", "--disable-dev-shm-usage",
		"--force-color-profile=srgb", "--user-data-dir=" + t.TempDir()}, flags...)
	cmd := exec.CommandContext(ctx, browser, append(args, "file://"+page)...)
	var stdout, stderr bytes.Buffer
	cmd.Stdout, cmd.Stderr = &stdout, &stderr
	start := time.Now()
	err := cmd.Run()
	require.NoError(t, err, "chromium: %s", stderr.String())
	t.Logf("chromium %s: %v", strings.Join(flags, " "), time.Since(start).Round(time.Millisecond))
	return stdout.Bytes()
}

// hoverCheck moves the pointer onto the middle of the pixel column of the
// default chart's reserved peak and copies what the tooltip says into the
// DOM. Mouse events take whole CSS pixels, so the page is loaded at a width
// that draws the chart at its own size.
const hoverCheck = `<script>
(function () {
  var fig = document.querySelector('figure.chart[data-run="default"]');
  var svg = fig.querySelector("svg"), peak = svg.querySelector("circle.peak"), hit = svg.querySelector(".hit");
  var box = svg.getBoundingClientRect(), k = box.width / svg.viewBox.baseVal.width;
  var x0 = Number(hit.getAttribute("x")), column = Math.floor(Number(peak.getAttribute("cx")) - x0);
  var x = box.left + (x0 + column + 0.5) * k, y = box.top + Number(peak.getAttribute("cy")) * k;
  hit.dispatchEvent(new MouseEvent("mousemove", {clientX: x, clientY: y, bubbles: true}));
  document.body.dataset.tip = fig.querySelector(".tip").textContent;
  document.body.dataset.loadedMs = String(Math.round(performance.now()));
})();
</script>
</body>`

func attr(t *testing.T, dom, selector, name string) string {
	t.Helper()
	m := regexp.MustCompile(selector + `[^>]*\s` + name + `="([^"]*)"`).FindStringSubmatch(dom)
	require.NotNil(t, m, "%s %s in the DOM", selector, name)
	return m[1]
}

func TestReportInHeadlessChromium(t *testing.T) {
	browser := chromium(t)
	// The largest shipped trace; the smallest when planning is slowed.
	name := "llama_generate"
	if tracetest.Quick() {
		name = "resnet50_train"
	}
	trace := tracetest.Read(t, name)

	// What the page must show, measured by the replay itself.
	dry, err := replay.Run(trace, testDefault.Default, replay.Options{})
	require.NoError(t, err)
	layout, err := plan.Derive(dry.Report, plan.Options{Strength: plan.Strong, Trace: trace})
	require.NoError(t, err)
	planned, err := replay.Run(trace, layout, replay.Options{})
	require.NoError(t, err)

	start := time.Now()
	tr, err := ReplayTrace(trace, testDefault, Buckets, Progress{})
	require.NoError(t, err)
	var html bytes.Buffer
	// The environment holds the pools' reports at the end of both runs.
	env := &EnvRecords{Name: "bench", Records: []EnvRecord{
		{ID: 1, Label: "default, end", Time: time.Date(2026, 1, 2, 3, 4, 5, 0, time.UTC), Report: dry.Report},
		{ID: 2, Label: "plan, end", Time: time.Date(2026, 1, 2, 3, 9, 5, 0, time.UTC), Report: planned.Report},
	}}
	require.NoError(t, Render(&html, Page{Traces: []*TraceReport{tr}, Env: env}))
	t.Logf("%s: %d events replayed twice, planned and rendered in %v: %d B of HTML", name, len(trace.Events),
		time.Since(start).Round(time.Millisecond), html.Len())
	dir := t.TempDir()
	page := filepath.Join(dir, "report.html")
	require.NoError(t, os.WriteFile(page, bytes.Replace(html.Bytes(), []byte("</body>"), []byte(hoverCheck), 1), 0o644))

	const window = "--window-size=1180,1100"
	dom := string(browse(t, browser, page, "--dump-dom", window))
	require.Contains(t, dom, `data-ready="yes"`, "the page's script ran to its end")
	require.Equal(t, "2", attr(t, dom, "<body", "data-charts"))
	for _, r := range env.Records {
		require.Equal(t, strconv.FormatUint(r.Report.Usage().BytesReserved, 10),
			attr(t, dom, fmt.Sprintf(`<g class="record" data-id="%d"`, r.ID), "data-reserved"), "record %d", r.ID)
		require.Contains(t, dom, r.Label+" · "+r.Time.Format("15:04:05"), "record %d is labelled with its time", r.ID)
	}
	for _, run := range []struct {
		name string
		res  *replay.Result
	}{{"default", dry}, {"plan", planned}} {
		fig := `<figure class="chart" data-run="` + run.name + `"`
		require.Equal(t, strconv.FormatUint(run.res.ReservedPeakBytes, 10), attr(t, dom, fig, "data-drawn-peak-reserved"),
			"%s: the drawn reserved peak is the replay's, exactly", run.name)
		require.Equal(t, strconv.FormatUint(run.res.PeakLiveBytes, 10), attr(t, dom, fig, "data-drawn-peak-live"),
			"%s: the drawn live peak is the replay's, exactly", run.name)
		// One live and one reserved band per pool that ever held a page.
		section := dom[strings.Index(dom, fig):]
		section = section[:strings.Index(section, "</figure>")]
		for _, p := range append(run.res.Report.Dynamic, run.res.Report.Persistent) {
			n := strings.Count(section, `data-pool="`+poolLabel(p)+`"`)
			if p.PagesPeak == 0 {
				require.Zero(t, n, "%s: %s never held a page and is not drawn", run.name, poolLabel(p))
				continue
			}
			require.Equal(t, 2, n, "%s: %s is drawn live and reserved", run.name, poolLabel(p))
		}
	}
	change, word := 1-float64(planned.ReservedPeakBytes)/float64(dry.ReservedPeakBytes), "less"
	if change < 0 {
		change, word = -change, "more"
	}
	verdict := fmt.Sprintf("plan reserves %.3f× peak live, %s %% %s than the default layout, in %d device allocation",
		planned.Ratio(), percent(change), word, planned.DriverAllocs)
	require.Contains(t, dom, `<p class="verdict">`+verdict)
	t.Logf("the page parsed, drew and ran its script %s ms after navigation began", attr(t, dom, "<body", "data-loaded-ms"))
	tip := attr(t, dom, "<body", "data-tip")
	require.Regexp(t, `reserved(?:[^B]*B – )?`+regexp.QuoteMeta(memory.FormatBytes(dry.ReservedPeakBytes))+`(?:[0-9,]+ – )?`+
		regexp.QuoteMeta(group(dry.ReservedPeakBytes)+" B"), tip, "hovering the peak reads it, exactly")

	shot := filepath.Join(dir, "report.png")
	browse(t, browser, page, "--screenshot="+shot, window)
	f, err := os.Open(shot)
	require.NoError(t, err)
	defer f.Close()
	img, err := png.Decode(f)
	require.NoError(t, err)
	colours, inked := map[uint32]int{}, 0
	b := img.Bounds()
	for y := b.Min.Y; y < b.Max.Y; y++ {
		for x := b.Min.X; x < b.Max.X; x++ {
			r, g, bl, _ := img.At(x, y).RGBA()
			c := r>>8<<16 | g>>8<<8 | bl>>8
			colours[c]++
			if c != 0xffffff {
				inked++
			}
		}
	}
	require.Greater(t, len(colours), 200, "a screenshot of charts and text has many colours")
	require.Greater(t, float64(inked)/float64(b.Dx()*b.Dy()), 0.1, "a tenth of the screenshot is not white")
	// The plan's largest pool fills a large area in its own colour.
	largest := planned.Report.Dynamic[0]
	want := legendColour(t, tr, poolLabel(largest))
	require.Greater(t, nearColour(img, want), 10_000, "the plan's %s is painted in %s", poolLabel(largest), want)
}

func legendColour(t *testing.T, tr *TraceReport, label string) string {
	t.Helper()
	tv, err := traceViewOf(tr)
	require.NoError(t, err)
	for _, l := range tv.Legend {
		if l.Label == label {
			return l.Solid
		}
	}
	t.Fatalf("%s is not in the legend", label)
	return ""
}

// nearColour counts the pixels within a few levels of a #rrggbb colour.
func nearColour(img image.Image, hex string) int {
	v, _ := strconv.ParseUint(hex[1:], 16, 32)
	want := [3]int{int(v >> 16 & 0xff), int(v >> 8 & 0xff), int(v & 0xff)}
	n := 0
	b := img.Bounds()
	for y := b.Min.Y; y < b.Max.Y; y++ {
		for x := b.Min.X; x < b.Max.X; x++ {
			r, g, bl, _ := img.At(x, y).RGBA()
			got := [3]int{int(r >> 8), int(g >> 8), int(bl >> 8)}
			near := true
			for i := range got {
				if d := got[i] - want[i]; d < -3 || d > 3 {
					near = false
				}
			}
			if near {
				n++
			}
		}
	}
	return n
}

// The tooltip writes bytes as the page's figures do (memory.FormatBytes):
// 999,999 B live read "1000.00 KB" under the pointer and "1.00 MB" beside
// the chart.
func TestTheTooltipWritesBytesAsTheFiguresDo(t *testing.T) {
	browser := chromium(t)
	const live = 999_999
	one := &trace.Trace{Name: "one", Allocations: 1, Events: []trace.Event{{Op: trace.OpAlloc, Index: 0, Size: live}}}
	tr, err := ReplayTrace(one, testDefault, Buckets, Progress{})
	require.NoError(t, err)
	var html bytes.Buffer
	require.NoError(t, Render(&html, Page{Traces: []*TraceReport{tr}}))
	page := filepath.Join(t.TempDir(), "report.html")
	require.NoError(t, os.WriteFile(page, bytes.Replace(html.Bytes(), []byte("</body>"), []byte(hoverCheck), 1), 0o644))
	dom := string(browse(t, browser, page, "--dump-dom", "--window-size=1180,1100"))
	tip := attr(t, dom, "<body", "data-tip")
	require.Contains(t, tip, "live"+memory.FormatBytes(live)+group(live)+" B", "the live row: %s", tip)
	require.Equal(t, "1.00 MB", memory.FormatBytes(live))
}

// labelsCheck counts the labels under the records chart that are not
// wholly inside its picture, and says which.
const labelsCheck = `<script>
(function () {
  var svg = document.querySelector("figure.records svg"), box = svg.getBoundingClientRect(), out = [];
  svg.querySelectorAll("text").forEach(function (t) {
    var r = t.getBoundingClientRect();
    if (r.left < box.left - 0.5 || r.right > box.right + 0.5 || r.top < box.top - 0.5 || r.bottom > box.bottom + 0.5)
      out.push(t.textContent + " [" + [r.left - box.left, r.right - box.right, r.bottom - box.bottom].map(Math.round) + "]");
  });
  document.body.dataset.labels = String(svg.querySelectorAll("text").length);
  document.body.dataset.outside = out.join(" | ");
})();
</script>
</body>`

// Every label under the records chart is drawn whole, a long one too, on
// the first bar as on the last: the labels of 38 records ran past the
// chart's left edge and under its bottom, their beginnings cut off.
func TestEnvLabelsAreDrawnInsideTheirChart(t *testing.T) {
	browser := chromium(t)
	at := time.Date(2026, 12, 7, 10, 0, 0, 0, time.UTC)
	for _, tc := range []struct {
		records int
		label   string
		step    time.Duration
	}{
		{1, "<script>alert(1)</script> after the long run", time.Second},
		{38, "after training step number %d of the long run", 2 * time.Hour},
	} {
		env := &EnvRecords{Name: "labels"}
		for i := range tc.records {
			label := tc.label
			if tc.records > 1 {
				label = fmt.Sprintf(label, i)
			}
			env.Add(EnvRecord{ID: int64(i + 1), Label: label, Time: at.Add(time.Duration(i) * tc.step), Report: memory.Report{
				Persistent: memory.PoolReport{Kind: memory.PersistentKind{}, Usage: memory.Usage{NumberAllocs: 1, BytesInUse: 1000, BytesReserved: 4000}}}})
		}
		var html bytes.Buffer
		require.NoError(t, Render(&html, Page{Env: env}))
		page := filepath.Join(t.TempDir(), "report.html")
		require.NoError(t, os.WriteFile(page, bytes.Replace(html.Bytes(), []byte("</body>"), []byte(labelsCheck), 1), 0o644))
		dom := string(browse(t, browser, page, "--dump-dom", "--window-size=1180,1100"))
		require.NotEqual(t, "0", attr(t, dom, "<body", "data-labels"))
		require.Empty(t, attr(t, dom, "<body", "data-outside"), "%d records %q: labels outside the chart", tc.records, tc.label)
	}
}
