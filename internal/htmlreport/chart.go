package htmlreport

import (
	"fmt"
	"math"
	"strconv"
	"strings"

	"github.com/vkrt/vkrt/memory"
)

// The geometry of one chart, in CSS pixels. The plot is plotWidth columns
// wide, one bucket of events each.
const (
	chartWidth   = 1080
	chartHeight  = 250
	marginLeft   = 76
	marginRight  = 150
	marginTop    = 14
	marginBottom = 36
	plotWidth    = chartWidth - marginLeft - marginRight
	plotHeight   = chartHeight - marginTop - marginBottom
)

// column is what a pixel column of a chart covers: its events and the
// extremes of the totals over them.
type column struct {
	First, Last          int // events, inclusive
	LiveMin, LiveMax     uint64
	ReservedMin, ResMax  uint64
	Peak                 int // the sample with the most reserved bytes
	LiveFirst, LiveFinal uint64
	from, to             int // the samples drawn in it
}

// columns splits the samples into plotWidth columns of events, the same
// buckets the downsampler kept them in. A column holding no event (a stream
// shorter than the plot is wide) shows the step of the event before it.
func columns(samples []Sample, events int) []column {
	cols := make([]column, 0, plotWidth)
	j := 0
	for c := range plotWidth {
		first, last := ceilDiv(c*events, plotWidth), ceilDiv((c+1)*events, plotWidth)-1
		for j < len(samples) && samples[j].Event < first {
			j++
		}
		end := j
		for end < len(samples) && samples[end].Event <= last {
			end++
		}
		in, at := samples[j:end], j
		if len(in) == 0 {
			if j == 0 {
				cols = append(cols, column{First: first, Last: first, Peak: -1, from: 0, to: 0})
				continue
			}
			in, at = samples[j-1:j], j-1
		}
		col := column{First: in[0].Event, Last: in[len(in)-1].Event, LiveMin: math.MaxUint64, ReservedMin: math.MaxUint64,
			LiveFirst: in[0].TotalLive(), LiveFinal: in[len(in)-1].TotalLive(), Peak: at, from: at, to: at + len(in)}
		if len(in) > 1 || in[0].Event >= first {
			col.First, col.Last = first, last
		}
		for k, s := range in {
			l, r := s.TotalLive(), s.TotalReserved()
			col.LiveMin, col.LiveMax = min(col.LiveMin, l), max(col.LiveMax, l)
			col.ReservedMin = min(col.ReservedMin, r)
			if r > col.ResMax {
				col.ResMax, col.Peak = r, at+k
			}
		}
		cols = append(cols, col)
	}
	return cols
}

func ceilDiv(a, b int) int { return (a + b - 1) / b }

// scale maps bytes to a y pixel of the plot.
type scale struct {
	top          uint64
	base, height float64 // the plot's bottom and height in pixels
}

func traceScale(top uint64) scale {
	return scale{top: top, base: marginTop + plotHeight, height: plotHeight}
}

func (s scale) y(v uint64) float64 {
	return s.base - float64(v)/float64(s.top)*s.height
}

// path draws a step curve, one level per column, skipping repeats so flat
// stretches cost two points.
type path struct {
	b      strings.Builder
	points int
}

func (p *path) to(x, y float64) {
	cmd := "L"
	if p.points == 0 {
		cmd = "M"
	}
	p.b.WriteString(cmd)
	p.b.WriteString(strconv.FormatFloat(x, 'f', -1, 64))
	p.b.WriteByte(' ')
	p.b.WriteString(strconv.FormatFloat(math.Round(y*10)/10, 'f', -1, 64))
	p.points++
}

// area is the region under levels (one per column) down to the baseline.
func area(levels []uint64, s scale) string {
	var p path
	base := s.base
	prev := s.y(levels[0])
	p.to(marginLeft, base)
	p.to(marginLeft, prev)
	for c, v := range levels[1:] {
		if y := s.y(v); math.Round(y*10) != math.Round(prev*10) {
			x := float64(marginLeft + c + 1)
			p.to(x, prev)
			p.to(x, y)
			prev = y
		}
	}
	p.to(marginLeft+plotWidth, prev)
	p.to(marginLeft+plotWidth, base)
	p.b.WriteString("Z")
	return p.b.String()
}

// liveLine draws the most live bytes of each column, a step per column.
func liveLine(cols []column, s scale) string {
	var p path
	prev := math.NaN()
	for c, col := range cols {
		if y := math.Round(s.y(col.LiveMax)*10) / 10; y != prev {
			x := float64(marginLeft + c)
			if c > 0 {
				p.to(x, prev)
			}
			p.to(x, y)
			prev = y
		}
	}
	p.to(marginLeft+plotWidth, prev)
	return p.b.String()
}

// liveRange is the region between the least and the most live bytes of
// each column: where the stream swings within a pixel's events.
func liveRange(cols []column, s scale) string {
	var p path
	for c, col := range cols {
		p.to(float64(marginLeft+c), s.y(col.LiveMax))
		p.to(float64(marginLeft+c+1), s.y(col.LiveMax))
	}
	for c := len(cols) - 1; c >= 0; c-- {
		p.to(float64(marginLeft+c+1), s.y(cols[c].LiveMin))
		p.to(float64(marginLeft+c), s.y(cols[c].LiveMin))
	}
	p.b.WriteString("Z")
	return p.b.String()
}

// levels is, per column, the most a curve over the samples reaches.
func levels(cols []column, samples []Sample, curve func(Sample) uint64) []uint64 {
	out := make([]uint64, len(cols))
	for c, col := range cols {
		for _, s := range samples[col.from:col.to] {
			out[c] = max(out[c], curve(s))
		}
	}
	return out
}

// tick is one labelled grid line.
type tick struct {
	Pos   float64
	Label string
}

// byteTicks are round steps of a power-of-1000 unit up to top, the
// units memory.FormatBytes writes (a record of exabytes read "15000000 TB").
func byteTicks(top uint64, s scale) []tick {
	unit, name := uint64(1), "B"
	for _, u := range []struct {
		n    uint64
		name string
	}{{1e3, "KB"}, {1e6, "MB"}, {1e9, "GB"}, {1e12, "TB"}, {1e15, "PB"}, {1e18, "EB"}} {
		if top >= u.n {
			unit, name = u.n, u.name
		}
	}
	// A whole byte at the least: steps of a fifth of a byte (a chart of
	// records of 0 B has a top of 1 B) fell on whole bytes, all at one
	// height, their labels ("0.6000000000000001 B") written over each other.
	step := max(niceStep(float64(top)/float64(unit)/5)*float64(unit), 1)
	var ticks []tick
	for v := 0.0; v <= float64(top); v += step {
		ticks = append(ticks, tick{Pos: s.y(uint64(v)), Label: strconv.FormatFloat(v/float64(unit), 'f', -1, 64) + " " + name})
	}
	return ticks
}

// eventTicks are round event numbers along the plot, every one in the
// unit of the step: "2.5k", "5k", where a step of 2,500 read "2500", "5k".
func eventTicks(events int) []tick {
	step := max(1, int(niceStep(float64(events)/8)))
	unit, suffix := 1, ""
	switch {
	case step >= 1_000_000:
		unit, suffix = 1_000_000, "M"
	case step >= 1000:
		unit, suffix = 1000, "k"
	}
	var ticks []tick
	for e := 0; e <= events; e += step {
		label := strconv.FormatFloat(float64(e)/float64(unit), 'f', -1, 64)
		if e > 0 {
			label += suffix
		}
		ticks = append(ticks, tick{Pos: marginLeft + float64(e)*plotWidth/float64(max(events, 1)), Label: label})
	}
	return ticks
}

// niceStep is the 1, 2, 2.5 or 5 times a power of ten nearest above x.
func niceStep(x float64) float64 {
	if x <= 0 {
		return 1
	}
	p := math.Pow(10, math.Floor(math.Log10(x)))
	for _, m := range []float64{1, 2, 2.5, 5, 10} {
		if m*p >= x {
			return m * p
		}
	}
	return 10 * p
}

// topOf is the chart's byte range: a little above the largest value, and
// no more than 64 bits hold (a float past them converts to no fixed
// uint64: 2^63 on amd64, under the value).
func topOf(v uint64) uint64 {
	f := float64(v) * 1.08
	if f >= math.MaxUint64 {
		return math.MaxUint64
	}
	return max(uint64(f), 1)
}

// poolLabel names a pool by what its configuration does.
func poolLabel(r memory.PoolReport) string {
	switch k := r.Kind.(type) {
	case memory.SlicedKind:
		s := fmt.Sprintf("slices ≤ %s in %s pages", sizeLabel(k.MaxSliceSize), sizeLabel(k.PageSize))
		if k.MaxPoolSize != nil {
			s += ", cap " + sizeLabel(*k.MaxPoolSize)
		}
		return s
	case memory.ExclusiveKind:
		s := "a page of its own each, ≤ " + sizeLabel(k.MaxAllocSize)
		if k.MaxPoolSize != nil {
			s += ", cap " + sizeLabel(*k.MaxPoolSize)
		}
		return s
	case memory.DirectKind:
		return "direct allocations"
	case memory.PersistentKind:
		return "persistent"
	case memory.VirtualKind:
		s := fmt.Sprintf("virtual range, %s granules", sizeLabel(k.GranuleSize))
		if k.PlannedBytes > 0 {
			s += ", planned " + memory.FormatBytes(k.PlannedBytes)
		}
		return s
	case memory.ArenaKind:
		return fmt.Sprintf("arena: %s, %s", memory.FormatBytes(k.PageBytes), plural(k.Slots, "slot"))
	}
	return fmt.Sprintf("%T", r.Kind)
}

// sizeLabel writes a power-of-two configuration size in binary units, the
// way it was set; any other size in powers of 1000.
func sizeLabel(n uint64) string {
	for _, u := range []struct {
		n    uint64
		name string
	}{{1 << 30, "GiB"}, {1 << 20, "MiB"}, {1 << 10, "KiB"}} {
		if n >= u.n && n%u.n == 0 && n/u.n < 1024 {
			return strconv.FormatUint(n/u.n, 10) + " " + u.name
		}
	}
	return memory.FormatBytes(n)
}
