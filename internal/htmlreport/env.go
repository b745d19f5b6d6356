package htmlreport

import (
	"fmt"
	"math"
	"math/bits"
	"strings"
	"time"

	"github.com/vkrt/vkrt/internal/printable"
	"github.com/vkrt/vkrt/memory"
)

// EnvRecord is one memory record of an environment.
type EnvRecord struct {
	ID     int64
	Label  string
	Time   time.Time
	Report memory.Report
}

// EnvRecords are an environment's memory records, oldest first.
type EnvRecords struct {
	Name    string
	Records []EnvRecord
	// Undecodable are the memory records that could not be decoded: they
	// are named under the chart, not drawn.
	Undecodable []UndecodableRecord
}

// UndecodableRecord is a memory record that could not be decoded, and why.
type UndecodableRecord struct {
	ID     int64
	Label  string
	Time   time.Time // the zero Time where the record has none
	Reason string
}

// The environment chart: one bar per record, labels slanted beneath.
const (
	envHeight       = 330
	envMarginBottom = 110
	envPlotHeight   = envHeight - marginTop - envMarginBottom
	envMaxBar       = 56
	envLabelChars   = 18
)

type envView struct {
	Name, Summary string
	Legend        []legendItem
	Width, Height int
	PlotX, PlotY  int
	PlotRight     int
	PlotBottom    int
	YTicks        []tick
	Bars          []envBar
	// Undecodable says which records are not drawn because they could not
	// be decoded, one line each.
	Undecodable []string
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
	for _, r := range e.Undecodable {
		when := "no time"
		if !r.Time.IsZero() {
			when = r.Time.UTC().Format("2006-01-02 15:04:05 UTC")
		}
		v.Undecodable = append(v.Undecodable, fmt.Sprintf("#%d %s, %s: %s", r.ID, printable.Label(r.Label), when, r.Reason))
	}
	n := len(e.Records)
	if n == 0 {
		v.Summary = "no memory records"
		return v, nil
	}
	v.Summary = fmt.Sprintf("%s, %s to %s", plural(uint64(n), "memory record"),
		e.Records[0].Time.UTC().Format("2006-01-02 15:04:05"), e.Records[n-1].Time.UTC().Format("2006-01-02 15:04:05 UTC"))
	var most uint64
	for _, r := range e.Records {
		most = max(most, stackHeight(r.Report))
	}
	s := scale{top: topOf(most), base: float64(v.PlotBottom), height: envPlotHeight}
	v.YTicks = byteTicks(s.top, s)
	var cs colours
	// Bars are labelled with the clock time, and the day too when the
	// records span more than one.
	clock := "15:04:05"
	if e.Records[n-1].Time.Sub(e.Records[0].Time) >= 24*time.Hour || e.Records[0].Time.UTC().Day() != e.Records[n-1].Time.UTC().Day() {
		clock = "01-02 15:04"
	}
	slot := float64(plotWidth) / float64(n)
	width := min(slot*0.7, envMaxBar)
	for i, r := range e.Records {
		x := marginLeft + slot*float64(i) + (slot-width)/2
		u := r.Report.Usage()
		bar := envBar{ID: r.ID, Live: u.BytesInUse, Reserv: u.BytesReserved, LabelX: x + width/2}
		if slot >= 22 {
			bar.Label = abbreviate(printable.Label(r.Label), envLabelChars) + " · " + r.Time.UTC().Format(clock)
		}
		var title strings.Builder
		fmt.Fprintf(&title, "#%d %s, %s\nlive %s (%s B), reserved %s (%s B)", r.ID, printable.Label(r.Label), r.Time.UTC().Format("2006-01-02 15:04:05 UTC"),
			memory.FormatBytes(u.BytesInUse), group(u.BytesInUse), memory.FormatBytes(u.BytesReserved), group(u.BytesReserved))
		var base uint64
		for _, p := range append(append([]memory.PoolReport(nil), r.Report.Dynamic...), r.Report.Persistent) {
			if p.Usage.BytesReserved == 0 {
				continue
			}
			label := poolLabel(p)
			col := cs.of(label)
			fmt.Fprintf(&title, "\n%s: live %s B, reserved %s B", label, group(p.Usage.BytesInUse), group(p.Usage.BytesReserved))
			top, live := s.y(base+p.Usage.BytesReserved), s.y(base+p.Usage.BytesInUse)
			bottom := s.y(base)
			bar.Rects = append(bar.Rects,
				envRect{X: x, Y: top, W: width, H: bottom - top, Fill: pale(col), Pool: label, Part: "reserved"},
				envRect{X: x, Y: live, W: width, H: bottom - live, Fill: col, Pool: label, Part: "live"})
			base += p.Usage.BytesReserved
		}
		bar.Title = title.String()
		v.Bars = append(v.Bars, bar)
	}
	v.Legend = cs.legend
	return v, nil
}

// stackHeight is the top of a record's bar: each drawn pool's reserved
// or live bytes, whichever is more, on the reserved bytes of the pools
// under it (a decoded report may hold more live than reserved), saturating
// at 2^64-1.
func stackHeight(r memory.Report) uint64 {
	var base, top uint64
	add := func(a, b uint64) uint64 {
		if s, carry := bits.Add64(a, b, 0); carry == 0 {
			return s
		}
		return math.MaxUint64
	}
	for _, p := range append(append([]memory.PoolReport(nil), r.Dynamic...), r.Persistent) {
		if p.Usage.BytesReserved == 0 {
			continue
		}
		top = max(top, add(base, max(p.Usage.BytesReserved, p.Usage.BytesInUse)))
		base = add(base, p.Usage.BytesReserved)
	}
	return top
}

// abbreviate cuts s to n characters, marking the cut.
func abbreviate(s string, n int) string {
	r := []rune(s)
	if len(r) <= n {
		return s
	}
	return string(r[:n-1]) + "…"
}
