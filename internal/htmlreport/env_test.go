package htmlreport

import (
	"fmt"
	"html"
	"math"
	"slices"
	"strings"
	"testing"
	"time"
	"unicode/utf8"

	"github.com/stretchr/testify/require"

	"github.com/vkrt/vkrt/memory"
)

// A record of more bytes than 2^64/1.08 (within 64 bits, so it decodes)
// stays on its chart: the scale's top above it converted to uint64 out of
// range, which on amd64 gave 2^63, and the bar rose past the plot's top.
func TestEnvBarsOfHugeRecordsStayInsideThePlot(t *testing.T) {
	at := time.Date(2026, 12, 2, 13, 0, 0, 0, time.UTC)
	rec := func(id int64, reserved uint64) EnvRecord {
		return EnvRecord{ID: id, Label: "r", Time: at.Add(time.Duration(id) * time.Second), Report: memory.Report{
			Persistent: memory.PoolReport{Kind: memory.PersistentKind{}, Usage: memory.Usage{NumberAllocs: 1, BytesInUse: 1, BytesReserved: reserved}}}}
	}
	for _, reserved := range []uint64{18_000_000_000_000_000_000, math.MaxUint64, 1 << 63} {
		v, err := envViewOf(&EnvRecords{Name: "e", Records: []EnvRecord{rec(1, reserved), rec(2, 1000)}})
		if err != nil {
			t.Fatal(err)
		}
		requireRectsInsidePlot(t, v, fmt.Sprintf("reserved %d", reserved))
		for _, tk := range v.YTicks {
			if tk.Pos < float64(v.PlotY) || tk.Pos > float64(v.PlotBottom) {
				t.Errorf("reserved %d: tick %q at y %.1f, outside the plot's %d to %d", reserved, tk.Label, tk.Pos, v.PlotY, v.PlotBottom)
			}
		}
	}
}

// A record whose pool has more bytes live than reserved (a report the
// environment holds is any JSON that decodes; vkrt records and report's
// own totals check stacks each pool's larger figure) stays inside its
// chart: the scale counted reserved bytes only, and the live bar of 5,000 B
// over 1,000 B reserved rose four plots above the top.
func TestEnvBarsOfMoreLiveThanReservedStayInsideThePlot(t *testing.T) {
	at := time.Date(2026, 12, 2, 13, 0, 0, 0, time.UTC)
	v, err := envViewOf(&EnvRecords{Name: "e", Records: []EnvRecord{{ID: 1, Label: "r", Time: at, Report: memory.Report{
		Dynamic:    []memory.PoolReport{{Kind: memory.DirectKind{}, Usage: memory.Usage{NumberAllocs: 1, BytesInUse: 5000, BytesReserved: 1000}}},
		Persistent: memory.PoolReport{Kind: memory.PersistentKind{}, Usage: memory.Usage{NumberAllocs: 1, BytesInUse: 10, BytesReserved: 100}}}}}})
	if err != nil {
		t.Fatal(err)
	}
	requireRectsInsidePlot(t, v, "5,000 B live over 1,000 B reserved")
}

// A record whose pools reserve more than 2^64 B together stacks them
// saturating, as its height is reckoned: the stack wrapped past 2^64, and
// the pools above drew from near 0 B up to the bar's top, rects of
// negative height that no browser draws.
func TestEnvBarsOfPoolsPast64BitsTogetherStayInsideThePlot(t *testing.T) {
	at := time.Date(2026, 12, 2, 13, 0, 0, 0, time.UTC)
	v, err := envViewOf(&EnvRecords{Name: "e", Records: []EnvRecord{{ID: 1, Label: "r", Time: at, Report: memory.Report{
		Dynamic:    []memory.PoolReport{{Kind: memory.DirectKind{}, Usage: memory.Usage{NumberAllocs: 1, BytesInUse: 1 << 63, BytesReserved: math.MaxUint64 - 5}}},
		Persistent: memory.PoolReport{Kind: memory.PersistentKind{}, Usage: memory.Usage{NumberAllocs: 1, BytesInUse: 100, BytesReserved: 1000}}}}}})
	require.NoError(t, err)
	requireRectsInsidePlot(t, v, "2^64-6 B and 1,000 B reserved")
	rects := v.Bars[0].Rects
	require.Len(t, rects, 4)
	for _, r := range rects[2:] {
		require.InDelta(t, float64(v.PlotY), r.Y, 0.01, "the persistent pool's %s part is at the top of the stack", r.Part)
	}
}

// An undecodable record with no time (its stored time was not a number)
// says so rather than showing the zero Time's year 1.
func TestAnUndecodableRecordWithNoTimeSaysSo(t *testing.T) {
	at := time.Date(2026, 12, 2, 14, 0, 0, 0, time.UTC)
	v, err := envViewOf(&EnvRecords{Name: "e", Undecodable: []UndecodableRecord{
		{ID: 4, Label: "foreign", Reason: "its stored time is not a number"},
		{ID: 5, Label: "wrapped", Time: at, Reason: "bytes_reserved"},
	}})
	require.NoError(t, err)
	require.Equal(t, []string{"#4 foreign, no time: its stored time is not a number",
		"#5 wrapped, 2026-12-02 14:00:00 UTC: bytes_reserved"}, v.Undecodable)
}

// requireRectsInsidePlot reports every bar rect of v outside its plot.
func requireRectsInsidePlot(t *testing.T, v *envView, what string) {
	t.Helper()
	for _, b := range v.Bars {
		for _, r := range b.Rects {
			if r.Y < float64(v.PlotY) || r.Y+r.H > float64(v.PlotBottom)+1e-9 || r.H < 0 {
				t.Errorf("%s: record %d's %s rect of %s spans y %.1f to %.1f, outside the plot's %d to %d",
					what, b.ID, r.Part, r.Pool, r.Y, r.Y+r.H, v.PlotY, v.PlotBottom)
			}
		}
	}
}

// A label a guest chose is shown as vkrt records shows it: one with a
// bidirectional override or a line break is quoted, in the bar's caption,
// its hover title and the list of undecodable records. Raw, an override
// turned the caption's own time around (14:39:38 read 83:93:41), and line
// breaks put made-up figures at the top of the title.
func TestEnvLabelsCannotRewriteTheFiguresBesideThem(t *testing.T) {
	at := time.Date(2026, 12, 3, 14, 39, 38, 0, time.UTC)
	rep := memory.Report{Persistent: memory.PoolReport{Kind: memory.PersistentKind{}, Usage: memory.Usage{NumberAllocs: 1, BytesInUse: 1, BytesReserved: 10}}}
	v, err := envViewOf(&EnvRecords{Name: "e",
		Records: []EnvRecord{
			{ID: 1, Label: "after step\u202e", Time: at, Report: rep},
			{ID: 2, Label: "x\nlive 0 B (0 B)\n", Time: at.Add(time.Second), Report: rep},
		},
		Undecodable: []UndecodableRecord{{ID: 3, Label: "y\u202e", Time: at, Reason: "bytes_reserved"}}})
	require.NoError(t, err)
	require.Equal(t, `"after step\u202e" · 14:39:38`, v.Bars[0].Label)
	require.True(t, strings.HasPrefix(v.Bars[1].Title, `#2 "x\nlive 0 B (0 B)\n", 2026-12-03 14:39:39 UTC`+"\n"), v.Bars[1].Title)
	require.Equal(t, []string{`#3 "y\u202e", 2026-12-03 14:39:38 UTC: bytes_reserved`}, v.Undecodable)
}

// Past MaxEnvBars records the chart draws groups of records in a row, a
// power of two each but the last, each by the record of the group that
// reserved the most (the earliest of equals), and holds no more reports
// than bars: every record is in one group, in order.
func TestEnvRecordsPastMaxEnvBarsAreDrawnInGroups(t *testing.T) {
	at := time.Date(2026, 12, 6, 5, 0, 0, 0, time.UTC)
	rec := func(id int64) EnvRecord {
		reserved := uint64(id*7919%1000 + 1) // repeats: equals come
		return EnvRecord{ID: id, Label: fmt.Sprint("r", id), Time: at.Add(time.Duration(id) * time.Second), Report: memory.Report{
			Persistent: memory.PoolReport{Kind: memory.PersistentKind{}, Usage: memory.Usage{NumberAllocs: 1, BytesInUse: 1, BytesReserved: reserved}}}}
	}
	for _, n := range []int{1, MaxEnvBars, MaxEnvBars + 1, 2 * MaxEnvBars, 3*MaxEnvBars + 5, 20_000} {
		var e EnvRecords
		all := make([]EnvRecord, n)
		for i := range all {
			all[i] = rec(int64(i + 1))
			e.Add(all[i])
			require.LessOrEqual(t, len(e.Records), MaxEnvBars, "%d records, after %d", n, i+1)
		}
		if n <= MaxEnvBars {
			require.Nil(t, e.Groups, "%d records", n)
			require.Equal(t, all, e.Records, "%d records", n)
			continue
		}
		require.Len(t, e.Groups, len(e.Records))
		per, next := e.Groups[0].Records, int64(1)
		require.Equal(t, 0, per&(per-1), "%d records: groups of %d, a power of two", n, per)
		for i, g := range e.Groups {
			require.Equal(t, next, g.FirstID, "%d records: group %d", n, i)
			require.Equal(t, g.LastID-g.FirstID+1, int64(g.Records), "%d records: group %d", n, i)
			if i < len(e.Groups)-1 {
				require.Equal(t, per, g.Records, "%d records: group %d", n, i)
			} else {
				require.LessOrEqual(t, g.Records, per)
			}
			require.Equal(t, all[g.FirstID-1].Time, g.FirstTime)
			require.Equal(t, all[g.LastID-1].Time, g.LastTime)
			most := all[g.FirstID-1]
			for _, r := range all[g.FirstID:g.LastID] {
				if reserved(r) > reserved(most) {
					most = r
				}
			}
			require.Equal(t, most.ID, e.Records[i].ID, "%d records: group %d draws the record that reserved the most", n, i)
			next = g.LastID + 1
		}
		require.Equal(t, int64(n+1), next, "%d records: every one in a group", n)

		// Records set past MaxEnvBars are grouped the same way when added
		// to or drawn.
		set := EnvRecords{Records: slices.Clone(all[:n-1])}
		set.Add(all[n-1])
		require.Equal(t, e.Records, set.Records, "%d records", n)
		require.Equal(t, e.Groups, set.Groups, "%d records", n)
		v, err := envViewOf(&EnvRecords{Name: "e", Records: all})
		require.NoError(t, err)
		require.Len(t, v.Bars, len(e.Records))
		for i, b := range v.Bars {
			require.Equal(t, e.Records[i].ID, b.ID)
		}
		require.Equal(t, per, v.Per)
		require.Contains(t, v.Summary, fmt.Sprintf("%s, ", plural(uint64(n), "memory record")))
		require.Contains(t, v.Summary, fmt.Sprintf(", in %s", plural(uint64(len(v.Bars)), "bar")))
		g := e.Groups[0]
		require.True(t, strings.HasPrefix(v.Bars[0].Title, fmt.Sprintf("records #1 to #%d (%d, 2026-12-06 05:00:01 to ", g.LastID, g.Records)), v.Bars[0].Title)
		requireRectsInsidePlot(t, v, fmt.Sprintf("%d records", n))
	}
}

// A label cut for its bar keeps whole characters, and a quoted one (it
// holds what does not print) whole escapes and its closing quote: the cut
// fell inside an escape ("👩\u200d👩\…).
func TestAbbreviatedLabelsKeepWholeEscapes(t *testing.T) {
	for _, tc := range []struct{ label, want string }{
		{"after the real run", "after the real run"},
		{"after the second real run", "after the second …"},
		{"👩\u200d👩\u200d👧\u200d👦 family", `"👩\u200d👩\u200d👧…"`},
		{"a\x00b", `"a\x00b"`},
		{"bad \xff byte and more", `"bad \xff byte a…"`},
	} {
		got := abbreviateLabel(tc.label, envLabelChars)
		require.Equal(t, tc.want, got, "%q", tc.label)
		require.LessOrEqual(t, utf8.RuneCountInString(got), envLabelChars, got)
	}
}

// Records written in one second are said to be of that time: one record
// read "1 memory record, 2026-12-07 10:00:01 to 2026-12-07 10:00:01 UTC".
func TestEnvRecordsOfOneSecondAreSaidToBeOfIt(t *testing.T) {
	at := time.Date(2026, 12, 7, 10, 0, 1, 0, time.UTC)
	rec := func(id int64, when time.Time) EnvRecord {
		return EnvRecord{ID: id, Label: "r", Time: when, Report: memory.Report{
			Persistent: memory.PoolReport{Kind: memory.PersistentKind{}, Usage: memory.Usage{NumberAllocs: 1, BytesInUse: 1, BytesReserved: 10}}}}
	}
	for _, tc := range []struct {
		records []EnvRecord
		want    string
	}{
		{[]EnvRecord{rec(1, at)}, "1 memory record, at 2026-12-07 10:00:01 UTC"},
		{[]EnvRecord{rec(1, at), rec(2, at.Add(time.Millisecond))}, "2 memory records, at 2026-12-07 10:00:01 UTC"},
		{[]EnvRecord{rec(1, at), rec(2, at.Add(time.Second))}, "2 memory records, 2026-12-07 10:00:01 to 2026-12-07 10:00:02 UTC"},
	} {
		v, err := envViewOf(&EnvRecords{Name: "e", Records: tc.records})
		require.NoError(t, err)
		require.Equal(t, tc.want, v.Summary)
	}
}

// Bars too narrow to be labelled get a time axis: a few ticks, first bar
// to last, each at a bar and giving the time of the record it draws, in a
// bottom margin that holds them. 1,000 records drawn as 250 bars had no
// times at all under them.
func TestEnvBarsTooNarrowToLabelGetATimeAxis(t *testing.T) {
	at := time.Date(2026, 12, 2, 13, 0, 0, 0, time.UTC)
	records := func(n int) *EnvRecords {
		e := &EnvRecords{Name: "e"}
		for i := range n {
			e.Add(EnvRecord{ID: int64(i + 1), Label: "step", Time: at.Add(time.Duration(i) * 37 * time.Second), Report: memory.Report{
				Persistent: memory.PoolReport{Kind: memory.PersistentKind{}, Usage: memory.Usage{NumberAllocs: 1, BytesInUse: uint64(1000 + i), BytesReserved: uint64(2000 + i)}}}})
		}
		return e
	}
	for _, n := range []int{39, 1000} {
		e := records(n)
		v, err := envViewOf(e)
		require.NoError(t, err)
		for _, b := range v.Bars {
			require.Empty(t, b.Label, "%d records: too narrow to label", n)
		}
		require.GreaterOrEqual(t, len(v.XTicks), 3, "%d records", n)
		slot := float64(plotWidth) / float64(len(v.Bars))
		prev := math.Inf(-1)
		for _, tk := range v.XTicks {
			require.Greater(t, tk.Pos, prev, "%d records: ticks left to right", n)
			prev = tk.Pos
			i := int((tk.Pos - marginLeft) / slot)
			require.InDelta(t, marginLeft+slot*(float64(i)+0.5), tk.Pos, 1e-9, "%d records: a tick at a bar", n)
			require.Equal(t, e.Records[i].Time.UTC().Format("15:04:05"), tk.Label, "%d records: the time of the record drawn", n)
		}
		require.Equal(t, e.Records[0].Time.UTC().Format("15:04:05"), v.XTicks[0].Label, "%d records: from the first bar", n)
		require.Equal(t, e.Records[len(e.Records)-1].Time.UTC().Format("15:04:05"), v.XTicks[len(v.XTicks)-1].Label, "%d records: to the last", n)
		require.GreaterOrEqual(t, v.Height, v.PlotBottom+30, "%d records: the margin holds the times", n)

		var b strings.Builder
		require.NoError(t, Render(&b, Page{Env: e}))
		require.Equal(t, len(v.XTicks), strings.Count(b.String(), `<text class="time-tick"`), "%d records", n)
		require.Contains(t, b.String(), "The times under the chart are those (UTC) of the records drawn by the bars above them.")
	}
	// Bars wide enough are labelled each, and have no other axis.
	v, err := envViewOf(records(38))
	require.NoError(t, err)
	require.Empty(t, v.XTicks)
	require.NotEmpty(t, v.Bars[0].Label)
}

// Records of more pools than a chart draws, in one record or told apart
// across them, are drawn a band a bar, each record's pools summed, with a
// note saying so and titles naming the first pools: records of 5,000
// pools each drew 10,000 rects, a legend of 5,000 swatches and a title of
// 5,000 lines a bar, 6 MB for three records and close to a gigabyte for a
// full chart.
func TestEnvRecordsOfThousandsOfPoolsAreDrawnSummed(t *testing.T) {
	at := time.Date(2026, 12, 2, 13, 0, 0, 0, time.UTC)
	pools := func(n, from int) []memory.PoolReport {
		var out []memory.PoolReport
		for i := range n {
			out = append(out, memory.PoolReport{Kind: memory.ExclusiveKind{MaxAllocSize: uint64(from + i + 1)},
				Usage: memory.Usage{NumberAllocs: 1, BytesInUse: 1, BytesReserved: 10}})
		}
		return out
	}
	for name, reports := range map[string][]memory.Report{
		"5,000 pools a record":          {{Dynamic: pools(5000, 0)}, {Dynamic: pools(5000, 0)}, {Dynamic: pools(5000, 0)}},
		"40 pools a record, 120 in all": {{Dynamic: pools(40, 0)}, {Dynamic: pools(40, 40)}, {Dynamic: pools(40, 80)}},
	} {
		e := &EnvRecords{Name: "e"}
		for i, rep := range reports {
			e.Add(EnvRecord{ID: int64(i + 1), Label: "r", Time: at.Add(time.Duration(i) * time.Second), Report: rep})
		}
		v, err := envViewOf(e)
		require.NoError(t, err)
		require.Len(t, v.Legend, 1, name)
		require.Contains(t, v.Note, "more than a chart draws (64)", name)
		for _, b := range v.Bars {
			require.Len(t, b.Rects, 2, name)
			require.Equal(t, allPools, b.Rects[0].Pool)
			drawn := len(drawnPools(reports[b.ID-1]))
			require.LessOrEqual(t, strings.Count(b.Title, "\n"), 2+envTitlePools+1, name)
			require.Contains(t, b.Title, "\nand "+group(uint64(drawn-envTitlePools))+" more pools", name)
			require.Equal(t, b.Reserv, uint64(10*drawn))
		}
		requireRectsInsidePlot(t, v, name)
		var page strings.Builder
		require.NoError(t, Render(&page, Page{Env: e}))
		require.Less(t, page.Len(), 64<<10, name)
		require.Contains(t, page.String(), html.EscapeString(v.Note), name)
	}

	// 64 pools a record, of 64 configurations in all, are drawn each.
	e := &EnvRecords{Name: "e"}
	e.Add(EnvRecord{ID: 1, Label: "r", Time: at, Report: memory.Report{Dynamic: pools(MaxPools, 0)}})
	v, err := envViewOf(e)
	require.NoError(t, err)
	require.Empty(t, v.Note)
	require.Len(t, v.Legend, MaxPools)
	require.Len(t, v.Bars[0].Rects, 2*MaxPools)
}

// An environment of thousands of undecodable records names the first
// hundred under the chart and says how many more there are: each was
// named, so 10,000 of them with labels of 4 kB made a page of 41 MB.
func TestUndecodableRecordsAreNamedUpToAHundred(t *testing.T) {
	at := time.Date(2026, 12, 3, 14, 39, 38, 0, time.UTC)
	e := &EnvRecords{Name: "e"}
	for i := range 10_000 {
		e.Undecodable = append(e.Undecodable, UndecodableRecord{ID: int64(i + 1), Label: strings.Repeat("l", 4096), Time: at, Reason: "bytes_reserved"})
	}
	v, err := envViewOf(e)
	require.NoError(t, err)
	require.Equal(t, "10,000 records could not be decoded and are not drawn:", v.UndecodableHead)
	require.Len(t, v.Undecodable, maxUndecodableShown+1)
	require.True(t, strings.HasPrefix(v.Undecodable[maxUndecodableShown-1], "#100 "))
	require.Equal(t, "and 9,900 more records, not named here", v.Undecodable[maxUndecodableShown])
	var page strings.Builder
	require.NoError(t, Render(&page, Page{Env: e}))
	require.Less(t, page.Len(), 1<<20)
	require.Contains(t, page.String(), "<p>10,000 records could not be decoded and are not drawn:</p>")

	one, err := envViewOf(&EnvRecords{Name: "e", Undecodable: e.Undecodable[:1]})
	require.NoError(t, err)
	require.Equal(t, "1 record could not be decoded and is not drawn:", one.UndecodableHead)
	require.Len(t, one.Undecodable, 1)
}

// A record of no time (the zero Time: its stored time was not a number)
// says so in its caption and title, and the chart's span and clock are
// those of the records that have one: it read "0001-01-01 00:00:00 UTC",
// the summary spanned two thousand years, and every caption lost its
// seconds to a clock showing the day.
func TestEnvRecordsOfNoTimeSaySo(t *testing.T) {
	rep := memory.Report{Persistent: memory.PoolReport{Kind: memory.PersistentKind{}, Usage: memory.Usage{NumberAllocs: 1, BytesInUse: 1, BytesReserved: 10}}}
	at := time.Date(2026, 12, 3, 14, 0, 0, 0, time.UTC)
	e := &EnvRecords{Name: "e"}
	e.Add(EnvRecord{ID: 1, Label: "a", Report: rep})
	e.Add(EnvRecord{ID: 2, Label: "b", Time: at, Report: rep})
	e.Add(EnvRecord{ID: 3, Label: "c", Time: at.Add(5 * time.Second), Report: rep})
	v, err := envViewOf(e)
	require.NoError(t, err)
	require.Equal(t, "3 memory records, 2026-12-03 14:00:00 to 2026-12-03 14:00:05 UTC", v.Summary)
	require.Equal(t, []string{"a · no time", "b · 14:00:00", "c · 14:00:05"}, []string{v.Bars[0].Label, v.Bars[1].Label, v.Bars[2].Label})
	require.True(t, strings.HasPrefix(v.Bars[0].Title, "#1 a, no time\n"), v.Bars[0].Title)

	none, err := envViewOf(&EnvRecords{Name: "e", Records: e.Records[:1]})
	require.NoError(t, err)
	require.Equal(t, "1 memory record, of no time", none.Summary)
}
