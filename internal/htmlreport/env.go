package htmlreport

import (
	"fmt"
	"math"
	"strconv"
	"strings"
	"time"
	"unicode/utf8"

	"github.com/vkrt/vkrt/internal/printable"
	"github.com/vkrt/vkrt/internal/saturate"
	"github.com/vkrt/vkrt/memory"
)

// EnvRecord is one memory record of an environment.
type EnvRecord struct {
	ID     int64
	Label  string
	Time   time.Time // the zero Time where the record has none: shown "no time"
	Report memory.Report
}

// EnvRecords are an environment's memory records, oldest first, as the
// chart draws them.
type EnvRecords struct {
	Name string
	// Records are the records drawn, one bar each: every record, or past
	// MaxEnvBars of them (given to Add, or set here and grouped when the
	// page is drawn), the record that reserved the most of each group of
	// records in a row, Groups[i] saying what Records[i] stands for.
	Records []EnvRecord
	Groups  []EnvGroup
	// Undecodable are the memory records that could not be decoded: they
	// are named under the chart, not drawn.
	Undecodable []UndecodableRecord
	per         int // records a full group holds, once grouped
}

// MaxEnvBars bounds the environment chart's bars, two pixels each at
// the least, an even number so groups join two by two: an environment of
// 20,000 memory records drew a bar a twentieth of a pixel wide for each,
// on a page of 52 MB.
const MaxEnvBars = plotWidth / 2 &^ 1

// EnvGroup is the records in a row one bar stands for.
type EnvGroup struct {
	Records             int // how many
	FirstID, LastID     int64
	FirstTime, LastTime time.Time
}

// Add appends a record, the next oldest: to the records drawn one bar
// each, or, past MaxEnvBars of them, to groups of records in a row of a
// power of two each (the last group may hold fewer), keeping the record
// of each group that reserved the most. It holds at most MaxEnvBars
// reports however many records come.
func (e *EnvRecords) Add(r EnvRecord) {
	if e.Groups == nil && len(e.Records) > MaxEnvBars {
		// Set past MaxEnvBars, not added.
		g := e.grouped()
		e.Records, e.Groups, e.per = g.Records, g.Groups, g.per
	}
	if e.Groups == nil {
		if len(e.Records) < MaxEnvBars {
			e.Records = append(e.Records, r)
			return
		}
		e.Groups, e.per = make([]EnvGroup, len(e.Records)), 1
		for i, rec := range e.Records {
			e.Groups[i] = aloneGroup(rec)
		}
	}
	last := len(e.Groups) - 1
	if e.Groups[last].Records == e.per && len(e.Groups) >= MaxEnvBars {
		e.halve()
		last = len(e.Groups) - 1
	}
	if e.Groups[last].Records == e.per {
		e.Records, e.Groups = append(e.Records, r), append(e.Groups, aloneGroup(r))
		return
	}
	g := &e.Groups[last]
	g.Records, g.LastID, g.LastTime = g.Records+1, r.ID, r.Time
	if reserved(r) > reserved(e.Records[last]) {
		e.Records[last] = r
	}
}

// halve joins the MaxEnvBars groups, each full, two by two.
func (e *EnvRecords) halve() {
	n := len(e.Groups) / 2
	for i := range n {
		a, b := e.Groups[2*i], e.Groups[2*i+1]
		rec := e.Records[2*i]
		if reserved(e.Records[2*i+1]) > reserved(rec) {
			rec = e.Records[2*i+1]
		}
		e.Records[i] = rec
		e.Groups[i] = EnvGroup{Records: a.Records + b.Records, FirstID: a.FirstID, FirstTime: a.FirstTime, LastID: b.LastID, LastTime: b.LastTime}
	}
	clear(e.Records[n:]) // their reports go
	e.Records, e.Groups, e.per = e.Records[:n], e.Groups[:n], 2*e.per
}

func aloneGroup(r EnvRecord) EnvGroup {
	return EnvGroup{Records: 1, FirstID: r.ID, LastID: r.ID, FirstTime: r.Time, LastTime: r.Time}
}

func reserved(r EnvRecord) uint64 { return r.Report.Usage().BytesReserved }

// grouped is e with its records grouped as Add groups them, where they
// were set past MaxEnvBars without groups.
func (e *EnvRecords) grouped() *EnvRecords {
	if e.Groups != nil || len(e.Records) <= MaxEnvBars {
		return e
	}
	g := &EnvRecords{Name: e.Name, Undecodable: e.Undecodable}
	for _, r := range e.Records {
		g.Add(r)
	}
	return g
}

// span is how many records e stands for, and the first and last of their
// times, leaving out records of no time (the zero Time): both zero where
// none has one.
func (e *EnvRecords) span() (n int, first, last time.Time) {
	see := func(t time.Time) {
		if t.IsZero() {
			return
		}
		if first.IsZero() || t.Before(first) {
			first = t
		}
		if last.IsZero() || t.After(last) {
			last = t
		}
	}
	if e.Groups == nil {
		for _, r := range e.Records {
			see(r.Time)
		}
		return len(e.Records), first, last
	}
	for _, g := range e.Groups {
		n += g.Records
		see(g.FirstTime)
		see(g.LastTime)
	}
	return n, first, last
}

// timeOf writes t in layout, in UTC, or says "no time" for the zero Time:
// a record whose stored time is not a number read as the year 1.
func timeOf(t time.Time, layout string) string {
	if t.IsZero() {
		return "no time"
	}
	return t.UTC().Format(layout)
}

// maxUndecodableShown bounds the undecodable records the page names, a
// line each: an environment of 100,000 of them, labels of 4 kB each,
// named every one on a page of close to half a gigabyte.
const maxUndecodableShown = 100

// UndecodableRecord is a memory record that could not be decoded, and why.
type UndecodableRecord struct {
	ID     int64
	Label  string
	Time   time.Time // the zero Time where the record has none
	Reason string
}

// The environment chart: one bar per record, labels slanted beneath,
// each starting under its bar and running down to the right, where the
// right margin has room; the bottom margin holds a label of
// envLabelChars and a time. Slanted the other way, ending under their
// bars, the first labels ran past the chart's left edge, and every long
// one under its bottom, their beginnings cut off.
const (
	envHeight       = 360
	envMarginBottom = 140
	envPlotHeight   = envHeight - marginTop - envMarginBottom
	envMaxBar       = 56
	envLabelChars   = 18
	// envMinLabelSlot is the narrowest slot a bar's own label is written
	// under; past that the chart has a time axis of envTimeTicks ticks
	// instead, and a bottom margin of envAxisBottom to hold it.
	envMinLabelSlot = 22
	envTimeTicks    = 7
	envAxisBottom   = 40
)

type envView struct {
	Name, Summary string
	Legend        []legendItem
	Width, Height int
	PlotX, PlotY  int
	PlotRight     int
	PlotBottom    int
	YTicks        []tick
	// XTicks, where the bars are too narrow to be labelled, are the times
	// of the records drawn by a few bars spread over the chart, TickEnd
	// the foot of their marks.
	XTicks  []tick
	TickEnd int
	Bars    []envBar
	// Per is the records a bar stands for, where bars stand for groups:
	// the last may stand for fewer.
	Per int
	// Undecodable says which records are not drawn because they could not
	// be decoded, one line each, the first maxUndecodableShown of them and
	// a line saying how many more; UndecodableHead says how many in all.
	Undecodable     []string
	UndecodableHead string
	// Note says how the bars are drawn where not one band a pool: summed,
	// past MaxPools pools.
	Note string
}

type envBar struct {
	Title        string // the exact values, shown on hover
	Rects        []envRect
	LabelX       float64
	Label        string
	ID           int64
	Live, Reserv uint64
}

type envRect struct {
	X, Y, W, H float64
	Fill, Pool string
	Part       string
}

func envViewOf(e *EnvRecords) (*envView, error) {
	v := &envView{Name: e.Name, Width: chartWidth, Height: envHeight, PlotX: marginLeft, PlotY: marginTop,
		PlotRight: marginLeft + plotWidth, PlotBottom: marginTop + envPlotHeight}
	if n := len(e.Undecodable); n > 0 {
		verb := "are"
		if n == 1 {
			verb = "is"
		}
		v.UndecodableHead = fmt.Sprintf("%s could not be decoded and %s not drawn:", plural(uint64(n), "record"), verb)
	}
	for i, r := range e.Undecodable {
		if i == maxUndecodableShown {
			v.Undecodable = append(v.Undecodable, fmt.Sprintf("and %s, not named here", plural(uint64(len(e.Undecodable)-i), "more record")))
			break
		}
		v.Undecodable = append(v.Undecodable, fmt.Sprintf("#%d %s, %s: %s", r.ID, printable.Label(r.Label), timeOf(r.Time, "2006-01-02 15:04:05 UTC"), r.Reason))
	}
	if len(e.Records) == 0 {
		v.Summary = "no memory records"
		return v, nil
	}
	e = e.grouped()
	n, first, last := e.span()
	v.Summary = fmt.Sprintf("%s, %s to %s", plural(uint64(n), "memory record"),
		first.UTC().Format("2006-01-02 15:04:05"), last.UTC().Format("2006-01-02 15:04:05 UTC"))
	if first.IsZero() {
		v.Summary = plural(uint64(n), "memory record") + ", of no time"
	} else if first.UTC().Truncate(time.Second).Equal(last.UTC().Truncate(time.Second)) {
		// Records of one second are of one time, not a span from it to itself.
		v.Summary = fmt.Sprintf("%s, at %s", plural(uint64(n), "memory record"), last.UTC().Format("2006-01-02 15:04:05 UTC"))
	}
	if e.Groups != nil {
		v.Per = e.per
		v.Summary += fmt.Sprintf(", in %s", plural(uint64(len(e.Groups)), "bar"))
	}
	var most uint64
	for _, r := range e.Records {
		most = max(most, stackHeight(r.Report))
	}
	s := scale{top: topOf(most), base: float64(v.PlotBottom), height: envPlotHeight}
	v.YTicks = byteTicks(s.top, s)
	// Past MaxPools pools (of one record, or told apart on the page) the
	// bars draw each record's pools summed, as a trace's chart draws each
	// stream's: a page of records of 5,000 pools each drew 10,000 rects
	// and a title of 5,000 lines a bar, and a legend of 5,000 swatches,
	// close to a gigabyte for a full chart.
	summed, why := drawsSummed(e.Records)
	if summed {
		v.Note = fmt.Sprintf("%s, more than a chart draws (%d): each bar draws its record's pools summed, in one colour, and its title names the first %d.",
			why, MaxPools, envTitlePools)
	}
	var cs colours
	// Bars are labelled with the clock time, and the day too when the
	// records span more than one.
	clock := "15:04:05"
	if last.Sub(first) >= 24*time.Hour || first.UTC().Day() != last.UTC().Day() {
		clock = "01-02 15:04"
	}
	slot := float64(plotWidth) / float64(len(e.Records))
	width := min(slot*0.7, envMaxBar)
	labelled := slot >= envMinLabelSlot
	if !labelled {
		// Without a label under each bar the chart would have no times at
		// all: a few ticks give them, first bar to last.
		v.Height, v.TickEnd = v.PlotBottom+envAxisBottom, v.PlotBottom+5
		n := len(e.Records)
		for k := range envTimeTicks {
			i := int(math.Round(float64(k) * float64(n-1) / (envTimeTicks - 1)))
			v.XTicks = append(v.XTicks, tick{Pos: marginLeft + slot*(float64(i)+0.5), Label: timeOf(e.Records[i].Time, clock)})
		}
	}
	for i, r := range e.Records {
		x := marginLeft + slot*float64(i) + (slot-width)/2
		u := r.Report.Usage()
		bar := envBar{ID: r.ID, Live: u.BytesInUse, Reserv: u.BytesReserved, LabelX: x + width/2}
		if labelled {
			bar.Label = abbreviateLabel(r.Label, envLabelChars) + " · " + timeOf(r.Time, clock)
		}
		var title strings.Builder
		if e.Groups != nil && e.Groups[i].Records > 1 {
			g := e.Groups[i]
			fmt.Fprintf(&title, "records #%d to #%d (%d, %s to %s), the one that reserved the most drawn:\n", g.FirstID, g.LastID, g.Records,
				timeOf(g.FirstTime, "2006-01-02 15:04:05"), timeOf(g.LastTime, "2006-01-02 15:04:05 UTC"))
		}
		fmt.Fprintf(&title, "#%d %s, %s\nlive %s (%s B), reserved %s (%s B)", r.ID, printable.Label(r.Label), timeOf(r.Time, "2006-01-02 15:04:05 UTC"),
			memory.FormatBytes(u.BytesInUse), group(u.BytesInUse), memory.FormatBytes(u.BytesReserved), group(u.BytesReserved))
		var base uint64
		drawn := drawnPools(r.Report)
		for k, p := range drawn {
			if summed && k == envTitlePools {
				fmt.Fprintf(&title, "\nand %s", plural(uint64(len(drawn)-k), "more pool"))
				break
			}
			fmt.Fprintf(&title, "\n%s: live %s B, reserved %s B", poolLabel(p), group(p.Usage.BytesInUse), group(p.Usage.BytesReserved))
		}
		if summed {
			var sum memory.Usage
			for _, p := range drawn {
				sum.BytesInUse, sum.BytesReserved = saturate.Add(sum.BytesInUse, p.Usage.BytesInUse), saturate.Add(sum.BytesReserved, p.Usage.BytesReserved)
			}
			drawn = nil
			if sum.BytesReserved > 0 {
				drawn = []memory.PoolReport{{Usage: sum}}
			}
		}
		for _, p := range drawn {
			label := allPools
			if !summed {
				label = poolLabel(p)
			}
			col := cs.of(label)
			// Stacked as stackHeight stacks them, saturating: a stack
			// wrapped past 2^64 drew the pools above it from near 0 B up,
			// rects of negative height that no browser draws.
			top, live := s.y(saturate.Add(base, p.Usage.BytesReserved)), s.y(saturate.Add(base, p.Usage.BytesInUse))
			bottom := s.y(base)
			bar.Rects = append(bar.Rects,
				envRect{X: x, Y: top, W: width, H: bottom - top, Fill: pale(col), Pool: label, Part: "reserved"},
				envRect{X: x, Y: live, W: width, H: bottom - live, Fill: col, Pool: label, Part: "live"})
			base = saturate.Add(base, p.Usage.BytesReserved)
		}
		bar.Title = title.String()
		v.Bars = append(v.Bars, bar)
	}
	v.Legend = cs.legend
	return v, nil
}

// envTitlePools bounds the pools a bar's title names, one line each.
const envTitlePools = 12

// allPools labels the one band of a bar whose pools are drawn summed.
const allPools = "all pools, summed"

// drawnPools are the pools of a report a bar draws, in report order: those
// that reserved anything.
func drawnPools(r memory.Report) []memory.PoolReport {
	var out []memory.PoolReport
	for _, p := range append(append([]memory.PoolReport(nil), r.Dynamic...), r.Persistent) {
		if p.Usage.BytesReserved > 0 {
			out = append(out, p)
		}
	}
	return out
}

// drawsSummed says whether the bars of records draw each record's pools
// summed: where one record has more than MaxPools pools that reserved
// anything, or the records' pools are of more than MaxPools labels in all.
// why says which, as the chart's note begins.
func drawsSummed(records []EnvRecord) (summed bool, why string) {
	labels := map[string]bool{}
	for _, r := range records {
		drawn := drawnPools(r.Report)
		if len(drawn) > MaxPools {
			return true, fmt.Sprintf("Record #%d has %s", r.ID, plural(uint64(len(drawn)), "pool"))
		}
		for _, p := range drawn {
			labels[poolLabel(p)] = true
		}
		if len(labels) > MaxPools {
			return true, fmt.Sprintf("Its records have pools of more than %d configurations", MaxPools)
		}
	}
	return false, ""
}

// stackHeight is the top of a record's bar: each drawn pool's reserved
// or live bytes, whichever is more, on the reserved bytes of the pools
// under it (a decoded report may hold more live than reserved), saturating
// at 2^64-1.
func stackHeight(r memory.Report) uint64 {
	var base, top uint64
	for _, p := range append(append([]memory.PoolReport(nil), r.Dynamic...), r.Persistent) {
		if p.Usage.BytesReserved == 0 {
			continue
		}
		top = max(top, saturate.Add(base, max(p.Usage.BytesReserved, p.Usage.BytesInUse)))
		base = saturate.Add(base, p.Usage.BytesReserved)
	}
	return top
}

// abbreviateLabel is a record's label as printable.Label writes it, cut
// to n characters, marking the cut. A quoted label is cut between its
// escapes and keeps its closing quote, so no escape is left half written.
func abbreviateLabel(label string, n int) string {
	q := printable.Label(label)
	if utf8.RuneCountInString(q) <= n {
		return q
	}
	quoted := q != label
	open, end := "", "…"
	if quoted {
		open, end = `"`, `…"`
	}
	var b strings.Builder
	b.WriteString(open)
	room := n - utf8.RuneCountInString(open) - utf8.RuneCountInString(end)
	for len(label) > 0 {
		_, size := utf8.DecodeRuneInString(label)
		piece := label[:size]
		if quoted {
			piece = strconv.Quote(piece) // one rune, or one byte that is none
			piece = piece[1 : len(piece)-1]
		}
		if room -= utf8.RuneCountInString(piece); room < 0 {
			break
		}
		b.WriteString(piece)
		label = label[size:]
	}
	b.WriteString(end)
	return b.String()
}
