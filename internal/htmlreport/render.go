package htmlreport

import (
	_ "embed"
	"errors"
	"fmt"
	"html/template"
	"io"
	"math"
	"strconv"
	"strings"
	"unicode"

	json "github.com/goccy/go-json"

	"github.com/vkrt/vkrt/memory"
)

// Buckets is how many buckets of events a chart draws: one per pixel column.
const Buckets = plotWidth

// Page is everything one report shows.
type Page struct {
	Traces []*TraceReport
	// Env, when set, is an environment's memory records.
	Env *EnvRecords
}

//go:embed report.html.tmpl
var pageTemplate string

//go:embed report.js
var pageScript string

var tmpl = template.Must(template.New("report").Parse(pageTemplate))

// ErrInvalidPage: a Page that cannot be drawn: a nil trace or one without
// its run under the default layout, or environment records whose Groups
// do not stand one for each of its Records. Render refused none of them and
// panicked.
var ErrInvalidPage = errors.New("htmlreport: invalid page")

// Render writes the page as one self-contained HTML document. A page that
// cannot be drawn is refused with ErrInvalidPage, and nothing is written.
func Render(w io.Writer, p Page) error {
	view := pageView{Script: template.JS(pageScript)}
	ids := map[string]bool{"env": true}
	for i, tr := range p.Traces {
		switch {
		case tr == nil:
			return fmt.Errorf("%w: trace %d of %d is nil", ErrInvalidPage, i+1, len(p.Traces))
		case tr.Default == nil || tr.Default.Result == nil:
			return fmt.Errorf("%w: trace %d of %d (%s) has no run under the default layout", ErrInvalidPage, i+1, len(p.Traces), tr.Name)
		case tr.Plan != nil && tr.Plan.Result == nil:
			return fmt.Errorf("%w: trace %d of %d (%s) has a plan run with no result", ErrInvalidPage, i+1, len(p.Traces), tr.Name)
		}
	}
	if e := p.Env; e != nil && e.Groups != nil && len(e.Groups) != len(e.Records) {
		return fmt.Errorf("%w: environment %s has %s for %s; each group stands for the record drawn at its place",
			ErrInvalidPage, e.Name, plural(uint64(len(e.Groups)), "group"), plural(uint64(len(e.Records)), "record"))
	}
	for _, tr := range p.Traces {
		tv, err := traceViewOf(tr)
		if err != nil {
			return err
		}
		tv.ID = sectionID("trace-"+tr.Name, ids)
		view.Traces = append(view.Traces, tv)
	}
	if p.Env != nil {
		ev, err := envViewOf(p.Env)
		if err != nil {
			return err
		}
		view.Env = ev
	}
	if err := tmpl.Execute(w, view); err != nil {
		return fmt.Errorf("htmlreport: rendering: %w", err)
	}
	return nil
}

type pageView struct {
	Traces []traceView
	Env    *envView
	Script template.JS
}

type traceView struct {
	Name    string
	ID      string // the section's id: see sectionID
	Summary string
	Verdict string
	Rows    []figureRow
	Legend  []legendItem
	Charts  []chartView
}

// sectionID is an id for a section named name: its whitespace, which an
// HTML id must not hold, made underscores, and numbered where that makes it
// one that used already has (traces "a b" and "a_b"). used gains it.
func sectionID(name string, used map[string]bool) string {
	base := strings.Map(func(r rune) rune {
		if unicode.IsSpace(r) {
			return '_'
		}
		return r
	}, name)
	id := base
	for n := 2; used[id]; n++ {
		id = fmt.Sprintf("%s-%d", base, n)
	}
	used[id] = true
	return id
}

type figureRow struct {
	Name, Layout                            string
	Reserved, Ratio, Allocs, Spills, Growth string
	LiveGrowth                              string
}

type legendItem struct{ Label, Solid, Pale string }

type chartView struct {
	Title         string
	Note          string // how the bands are drawn, where not one a pool
	Run           string // "default" or "plan"
	Width, Height int
	PlotX, PlotY  int
	PlotW, PlotH  int
	PlotRight     int
	PlotBottom    int
	TickEnd       int
	LabelX        int
	Bands         []bandView
	LivePath      string
	RangePath     string
	YTicks        []tick
	XTicks        []tick
	FloorY        float64
	FloorLabel    string
	PeakX, PeakY  float64
	PeakLabel     string
	PeakLabelY    float64
	FloorLabelY   float64
	Data          template.JS
}

type bandView struct {
	Pool, Part, Fill, Path string
}

// palette colours pools in the order they first appear in a trace's runs.
var palette = []string{"#4e79a7", "#f28e2b", "#59a14f", "#e15759", "#76b7b2", "#edc948", "#b07aa1", "#ff9da7", "#9c755f", "#bab0ac"}

// colourAt is the colour of the i-th pool: the palette's, then hues a
// golden angle apart in three lightnesses, so that no two pools of a page
// share a colour (the palette repeated from the eleventh, and a chart of
// twelve streams had pools no legend could tell apart).
func colourAt(i int) string {
	if i < len(palette) {
		return palette[i]
	}
	j := i - len(palette)
	h := math.Mod(float64(j)*137.508+20, 360) / 60
	l := []float64{0.42, 0.58, 0.3}[j%3]
	const sat = 0.6
	c := (1 - math.Abs(2*l-1)) * sat
	x := c * (1 - math.Abs(math.Mod(h, 2)-1))
	var r, g, b float64
	switch int(h) {
	case 0:
		r, g = c, x
	case 1:
		r, g = x, c
	case 2:
		g, b = c, x
	case 3:
		g, b = x, c
	case 4:
		r, b = x, c
	default:
		r, b = c, x
	}
	m := l - c/2
	ch := func(v float64) int { return int(math.Round((v + m) * 255)) }
	return fmt.Sprintf("#%02x%02x%02x", ch(r), ch(g), ch(b))
}

// pale mixes a colour with white: the part of a pool reserved and not live.
func pale(hex string) string {
	v, _ := strconv.ParseUint(hex[1:], 16, 32)
	mix := func(c uint64) uint64 { return uint64(math.Round(float64(c)*0.32 + 255*0.68)) }
	return fmt.Sprintf("#%02x%02x%02x", mix(v>>16&0xff), mix(v>>8&0xff), mix(v&0xff))
}

// colours assigns each pool label a palette entry.
type colours struct {
	index  map[string]int
	legend []legendItem
}

func (c *colours) of(label string) string {
	if c.index == nil {
		c.index = map[string]int{}
	}
	i, ok := c.index[label]
	if !ok {
		i = len(c.index)
		c.index[label] = i
		col := colourAt(i)
		c.legend = append(c.legend, legendItem{Label: label, Solid: col, Pale: pale(col)})
	}
	return colourAt(i)
}

// active are the pools of a run that reserved anything: the others are
// not drawn.
func active(r *Run) []int {
	var idx []int
	for p := range r.Pools {
		for _, s := range r.Samples {
			if s.Reserved[p] > 0 {
				idx = append(idx, p)
				break
			}
		}
	}
	return idx
}

// Verdict is the one line a reader takes away from a trace.
func Verdict(tr *TraceReport) string {
	if tr.Plan == nil {
		return "No plan: " + tr.NoPlan.Error()
	}
	d, p := tr.Default.Result, tr.Plan.Result
	s := fmt.Sprintf("plan reserves %s peak live", ratio(p.ReservedPeakBytes, p.PeakLiveBytes))
	if d.ReservedPeakBytes > 0 {
		change := 1 - float64(p.ReservedPeakBytes)/float64(d.ReservedPeakBytes)
		switch pct := percent(math.Abs(change)); {
		case p.ReservedPeakBytes == d.ReservedPeakBytes:
			s += ", as much as the " + tr.DefaultName
		case change > 0:
			s += fmt.Sprintf(", %s %% less than the %s", pct, tr.DefaultName)
		default:
			s += fmt.Sprintf(", %s %% more than the %s", pct, tr.DefaultName)
		}
	}
	s += fmt.Sprintf(", in %s against %s", plural(p.DriverAllocs, "device allocation"), group(d.DriverAllocs))
	if p.Spills > 0 {
		s += ", " + plural(p.Spills, "spill")
	}
	return s
}

// percent writes a fraction as a percentage: whole, or with the decimals
// that keep a difference under 1 % or over 99 % from rounding to 0 or 100.
func percent(f float64) string {
	digits := 0
	if f < 0.01 {
		digits = 1
	}
	for {
		s := strconv.FormatFloat(f*100, 'f', digits, 64)
		v, _ := strconv.ParseFloat(s, 64)
		if digits >= 3 || f <= 0 || f >= 1 || v > 0 && v < 100 {
			return s
		}
		digits++
	}
}

// ratio is reserved over live with three decimals: "1.001×".
func ratio(reserved, live uint64) string {
	if live == 0 {
		return "–"
	}
	return fmt.Sprintf("%.3f×", float64(reserved)/float64(live))
}

func plural(n uint64, noun string) string {
	if n == 1 {
		return "1 " + noun
	}
	return group(n) + " " + noun + "s"
}

// group writes n with thousands separated by commas.
func group(n uint64) string {
	s := strconv.FormatUint(n, 10)
	var b strings.Builder
	for i, r := range s {
		if i > 0 && (len(s)-i)%3 == 0 {
			b.WriteByte(',')
		}
		b.WriteRune(r)
	}
	return b.String()
}

// growth says how often the reservation grew and how far into the stream
// it last did.
func growth(r *Run, events int) string {
	if r.Growths == 0 {
		return "never"
	}
	return fmt.Sprintf("%s×, last at event %s (%.0f %%)", group(uint64(r.Growths)), group(uint64(r.LastGrowth)),
		float64(r.LastGrowth+1)/float64(events)*100)
}

func capitalize(s string) string {
	if s == "" {
		return s
	}
	return strings.ToUpper(s[:1]) + s[1:]
}

// layoutName says what a layout is in a few words.
func layoutName(l memory.Layout) string {
	if a, ok := l.Arena(); ok {
		var bytes uint64
		for _, p := range a.Pages {
			bytes += p
		}
		s := fmt.Sprintf("arena of %s in %s, %s", memory.FormatBytes(bytes), plural(uint64(len(a.Pages)), "page"),
			plural(uint64(len(a.Slots)), "planned slot"))
		if len(a.Fallback) > 0 {
			s += ", then " + plural(uint64(len(a.Fallback)), "sliced pool")
		}
		return s
	}
	if v, ok := l.Virtual(); ok {
		if v.PlannedBytes == 0 {
			return "virtual"
		}
		return "virtual, planned " + memory.FormatBytes(v.PlannedBytes)
	}
	if pools, ok := l.Sliced(); ok {
		return "sliced, " + plural(uint64(len(pools)), "pool")
	}
	return l.Kind().String()
}

func traceViewOf(tr *TraceReport) (traceView, error) {
	tv := traceView{Name: tr.Name, Verdict: Verdict(tr),
		Summary: fmt.Sprintf("%s, %s; peak live %s (%s B)", plural(uint64(tr.Events), "event"), plural(uint64(tr.Allocations), "allocation"),
			memory.FormatBytes(tr.Default.Result.PeakLiveBytes), group(tr.Default.Result.PeakLiveBytes))}
	var cs colours
	type runView struct {
		name, title string
		run         *Run
	}
	runs := []runView{{"default", capitalize(tr.DefaultName) + " (" + layoutName(tr.Default.Result.Layout) + ")", tr.Default}}
	top := tr.Default.Result.ReservedPeakBytes
	if tr.Plan != nil {
		runs = append(runs, runView{"plan", "Plan (" + layoutName(tr.Plan.Result.Layout) + "), " + tr.PlanSource, tr.Plan})
		top = max(top, tr.Plan.Result.ReservedPeakBytes)
	}
	top = topOf(top)
	for _, r := range runs {
		res := r.run.Result
		tv.Rows = append(tv.Rows, figureRow{Name: r.name, Layout: layoutName(res.Layout),
			Reserved: memory.FormatBytes(res.ReservedPeakBytes), Ratio: ratio(res.ReservedPeakBytes, res.PeakLiveBytes),
			Allocs: group(res.DriverAllocs), Spills: group(res.Spills),
			Growth: growth(r.run, tr.Events)})
		cv, err := chartOf(r.run, r.name, r.title, top, tr.Events, &cs)
		if err != nil {
			return traceView{}, err
		}
		tv.Charts = append(tv.Charts, cv)
	}
	tv.Legend = cs.legend
	return tv, nil
}

func chartOf(run *Run, name, title string, top uint64, events int, cs *colours) (chartView, error) {
	s := traceScale(top)
	res := run.Result
	cv := chartView{Title: title, Run: name, Width: chartWidth, Height: chartHeight, PlotX: marginLeft, PlotY: marginTop,
		PlotW: plotWidth, PlotH: plotHeight, PlotRight: marginLeft + plotWidth, PlotBottom: marginTop + plotHeight, TickEnd: marginTop + plotHeight + 5, LabelX: marginLeft + plotWidth + 8, YTicks: byteTicks(top, s), XTicks: eventTicks(events)}
	if len(run.Samples) == 0 {
		return cv, nil
	}
	switch streams := len(run.Result.Streams); {
	case run.ByStream && streams > 1:
		cv.Note = fmt.Sprintf("Its %d streams have %d pools in all, more than a chart draws (%d): each colour is one stream, its %s summed.",
			streams, streams*run.PoolsPerStream, MaxPools, plural(uint64(run.PoolsPerStream), "pool"))
	case run.ByStream:
		cv.Note = fmt.Sprintf("Its layout has %d pools, more than a chart draws (%d): they are drawn summed, in one colour.", run.PoolsPerStream, MaxPools)
	}
	cols := columns(run.Samples, events)
	pools := active(run)
	labels, colors := make([]string, len(pools)), make([]string, len(pools))
	for i, p := range pools {
		labels[i] = run.poolLabel(p)
		colors[i] = cs.of(labels[i])
	}
	// Paint from the top pool down: each pool's pale band reaches the top
	// of its stack, its solid band the live bytes above the pools below,
	// and the next pool down paints over what lies under its own top.
	below := func(k int) func(Sample) uint64 {
		return func(smp Sample) uint64 {
			var n uint64
			for _, p := range pools[:k] {
				n += smp.Reserved[p]
			}
			return n
		}
	}
	for k := len(pools) - 1; k >= 0; k-- {
		p, under, col := pools[k], below(k), colors[k]
		cv.Bands = append(cv.Bands,
			bandView{Pool: labels[k], Part: "reserved", Fill: pale(col),
				Path: area(levels(cols, run.Samples, func(smp Sample) uint64 { return under(smp) + smp.Reserved[p] }), s)},
			bandView{Pool: labels[k], Part: "live", Fill: col,
				Path: area(levels(cols, run.Samples, func(smp Sample) uint64 { return under(smp) + smp.Live[p] }), s)})
	}
	cv.LivePath, cv.RangePath = liveLine(cols, s), liveRange(cols, s)
	cv.FloorY = s.y(res.PeakLiveBytes)
	cv.FloorLabel = memory.FormatBytes(res.PeakLiveBytes)
	cv.PeakY = s.y(res.ReservedPeakBytes)
	cv.PeakX = marginLeft + (float64(run.PeakReservedEvent)+0.5)*plotWidth/float64(max(events, 1))
	cv.PeakLabel = memory.FormatBytes(res.ReservedPeakBytes)
	// Two lines each: the reserved peak's above its height, the floor's
	// below, pushed apart when the plan sits on the floor.
	cv.PeakLabelY, cv.FloorLabelY = cv.PeakY-19, cv.FloorY+14
	if cv.FloorLabelY-cv.PeakLabelY < 34 {
		cv.FloorLabelY = cv.PeakLabelY + 34
	}
	data, err := json.Marshal(hoverData(cols, run.Samples, pools, labels, colors, events))
	if err != nil {
		return chartView{}, fmt.Errorf("htmlreport: encoding the chart of %s: %w", res.Trace, err)
	}
	cv.Data = template.JS(data)
	return cv, nil
}

// hover is what the page's script reads when the pointer is over a chart:
// per column, its events, the range of the totals, and every drawn pool at
// the column's most reserved event. Bytes are exact.
type hover struct {
	Events int      `json:"events"`
	Pools  []string `json:"pools"`
	Colors []string `json:"colors,omitempty"`
	// Cols: first event, last event, live min, live max, reserved min,
	// reserved max, the event of the reserved max, then live and reserved
	// bytes of each pool there.
	Cols [][]uint64 `json:"cols"`
}

func hoverData(cols []column, samples []Sample, pools []int, labels, colors []string, events int) hover {
	h := hover{Events: events, Pools: labels, Colors: colors, Cols: make([][]uint64, 0, len(cols))}
	for _, c := range cols {
		if c.Peak < 0 {
			h.Cols = append(h.Cols, nil)
			continue
		}
		peak := samples[c.Peak]
		row := []uint64{uint64(c.First), uint64(c.Last), c.LiveMin, c.LiveMax, c.ReservedMin, c.ResMax, uint64(peak.Event)}
		for _, p := range pools {
			row = append(row, peak.Live[p], peak.Reserved[p])
		}
		h.Cols = append(h.Cols, row)
	}
	return h
}
