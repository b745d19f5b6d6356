package htmlreport

import (
	"fmt"
	"math"
	"regexp"
	"strings"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/vkrt/vkrt/dryrun/trace"
)

func TestPercentKeepsSmallAndNearlyWholeDifferences(t *testing.T) {
	for f, want := range map[float64]string{
		0.24:     "24",
		0.003:    "0.3",
		0.0004:   "0.04",
		0.99995:  "99.995",
		0.996:    "99.6",
		0:        "0.0",
		1:        "100",
		0.015:    "2",
		0.999999: "100.000",
	} {
		require.Equal(t, want, percent(f), "%v", f)
	}
}

// The byte axis counts in the largest unit under its top, as the figures
// beside it do, in whole bytes at the least: a record of 18.45 EB had
// ticks of "15000000 TB", wider than the margin they are drawn in, and
// records of 0 B ticks of a fifth of a byte, all drawn at 0 B.
func TestByteTicksUseTheUnitOfTheirTop(t *testing.T) {
	for top, want := range map[uint64][]string{
		1:              {"0 B", "1 B"},
		4:              {"0 B", "1 B", "2 B", "3 B", "4 B"},
		999:            {"0 B", "200 B", "400 B", "600 B", "800 B"},
		4_000_000_000:  {"0 GB", "1 GB", "2 GB", "3 GB", "4 GB"},
		5e15:           {"0 PB", "1 PB", "2 PB", "3 PB", "4 PB", "5 PB"},
		math.MaxUint64: {"0 EB", "5 EB", "10 EB", "15 EB"},
	} {
		var got []string
		for i, tk := range byteTicks(top, traceScale(top)) {
			got = append(got, tk.Label)
			if i > 0 {
				require.Less(t, tk.Pos, traceScale(top).base, "top %d: %s is drawn above 0 B", top, tk.Label)
			}
		}
		require.Equal(t, want, got, "top %d", top)
	}
}

// Every pool a page colours gets a colour of its own, live and reserved,
// past the palette too: the eleventh took the first's, so a chart of
// twelve streams drew two streams in one colour, and its legend showed two
// swatches alike.
func TestEveryPoolOfAPageHasItsOwnColour(t *testing.T) {
	var cs colours
	seen := map[string]string{}
	for i := range 2 * MaxPools {
		label := fmt.Sprintf("pool %d", i)
		require.Equal(t, cs.of(label), cs.of(label), "a label keeps its colour")
		item := cs.legend[i]
		require.Regexp(t, `^#[0-9a-f]{6}$`, item.Solid)
		for _, c := range []string{item.Solid, item.Pale} {
			other, taken := seen[c]
			require.False(t, taken, "%s: %s is %s's already", label, c, other)
			seen[c] = label
		}
	}
}

// A trace of one event says "1 event", as it says "1 allocation": it
// read "1 events, 1 allocation".
func TestTheSummaryCountsOneEventInTheSingular(t *testing.T) {
	one := &trace.Trace{Name: "one", Allocations: 1, Events: []trace.Event{{Op: trace.OpAlloc, Index: 0, Size: 100}}}
	tr, err := ReplayTrace(one, testDefault, Buckets, Progress{})
	require.NoError(t, err)
	tv, err := traceViewOf(tr)
	require.NoError(t, err)
	require.True(t, strings.HasPrefix(tv.Summary, "1 event, 1 allocation; "), tv.Summary)
}

// The event axis writes every tick in one unit: a step of 2,500 read
// "2500", "5k", "7500", "10k", "12500".
func TestEventTicksShareTheirUnit(t *testing.T) {
	for events, want := range map[int][]string{
		7:          {"0", "1", "2", "3", "4", "5", "6", "7"},
		2000:       {"0", "250", "500", "750", "1000", "1250", "1500", "1750", "2000"},
		9489:       {"0", "2k", "4k", "6k", "8k"},
		19678:      {"0", "2.5k", "5k", "7.5k", "10k", "12.5k", "15k", "17.5k"},
		286475:     {"0", "50k", "100k", "150k", "200k", "250k"},
		20_000_000: {"0", "2.5M", "5M", "7.5M", "10M", "12.5M", "15M", "17.5M", "20M"},
	} {
		var got []string
		for _, tk := range eventTicks(events) {
			got = append(got, tk.Label)
		}
		require.Equal(t, want, got, "%d events", events)
	}
}

// Section ids hold no whitespace, which an HTML id must not, and stay
// unique where making them so would join two names ("my run" and
// "my_run"); every in-page link finds its section. Ids were the names as
// they were: "trace-my run".
func TestSectionIDsAreValidAndUnique(t *testing.T) {
	one := &trace.Trace{Allocations: 1, Events: []trace.Event{{Op: trace.OpAlloc, Index: 0, Size: 100}}}
	var page Page
	for _, name := range []string{"my run", "my_run", "esc/one (2)", "tab\there", "new\nline", " lead", "my_run"} {
		tr := *one
		tr.Name = name
		rep, err := ReplayTrace(&tr, testDefault, Buckets, Progress{})
		require.NoError(t, err)
		page.Traces = append(page.Traces, rep)
	}
	page.Env = &EnvRecords{Name: "e"}
	var b strings.Builder
	require.NoError(t, Render(&b, page))
	html := b.String()

	ids := map[string]bool{}
	for _, m := range regexp.MustCompile(`\sid="([^"]*)"`).FindAllStringSubmatch(html, -1) {
		id := m[1]
		require.NotEmpty(t, id)
		require.False(t, strings.ContainsAny(id, " \t\n\f\r") || strings.Contains(id, "&#"), "an id with whitespace: %q", id)
		require.False(t, ids[id], "id %q is not unique", id)
		ids[id] = true
	}
	require.Len(t, ids, len(page.Traces)+1, "a section each")
	require.True(t, ids["trace-my_run"])
	require.True(t, ids["trace-esc/one_(2)"])
	for _, m := range regexp.MustCompile(`href="#([^"]*)"`).FindAllStringSubmatch(html, -1) {
		require.True(t, ids[m[1]], "a link to #%s finds no section", m[1])
	}
}

// A page that cannot be drawn (a nil trace, one without its default run,
// records whose groups do not stand one for each) is refused with
// ErrInvalidPage, nothing written: Render panicked on each.
func TestAPageThatCannotBeDrawnIsRefused(t *testing.T) {
	one := &trace.Trace{Name: "one", Allocations: 1, Events: []trace.Event{{Op: trace.OpAlloc, Index: 0, Size: 100}}}
	good, err := ReplayTrace(one, testDefault, Buckets, Progress{})
	require.NoError(t, err)
	recs := []EnvRecord{{ID: 1, Time: time.Unix(1, 0)}, {ID: 2, Time: time.Unix(2, 0)}}
	for name, page := range map[string]Page{
		"nil trace":         {Traces: []*TraceReport{good, nil}},
		"no default run":    {Traces: []*TraceReport{{Name: "x"}}},
		"fewer groups":      {Env: &EnvRecords{Name: "e", Records: recs, Groups: []EnvGroup{{Records: 1}}}},
		"groups of no bars": {Env: &EnvRecords{Name: "e", Records: recs[:1], Groups: []EnvGroup{}}},
	} {
		var b strings.Builder
		require.ErrorIs(t, Render(&b, page), ErrInvalidPage, name)
		require.Zero(t, b.Len(), name)
	}
	var b strings.Builder
	require.NoError(t, Render(&b, Page{Traces: []*TraceReport{good}, Env: &EnvRecords{Name: "e", Records: recs}}))
}
