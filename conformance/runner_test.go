package conformance

import (
	"bytes"
	"context"
	"encoding/xml"
	"errors"
	"regexp"
	"runtime"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"

	json "github.com/goccy/go-json"
	"github.com/stretchr/testify/require"
)

func TestRunnerClassifiesEveryEnding(t *testing.T) {
	cleaned := 0
	checks := []Check{
		{Name: "x/passes", Rule: "passes", run: func(c *checkState) { c.Cleanup(func() { cleaned++ }) }},
		{Name: "x/errors-twice", Rule: "reports two", run: func(c *checkState) {
			c.Errorf("first %d", 1)
			c.Errorf("second %d", 2)
		}},
		{Name: "x/fatal-stops", Rule: "stops", run: func(c *checkState) {
			c.Fatalf("stopped")
			c.Errorf("never reached")
		}},
		{Name: "x/not-supported", Rule: "lacks", run: func(c *checkState) { c.NotSupportedf("no %s", "budget") }},
		{Name: "x/failed-then-not-supported", Rule: "fails first", run: func(c *checkState) {
			c.Errorf("broke it")
			c.NotSupportedf("then lacked")
		}},
		{Name: "x/panics", Rule: "panics", run: func(c *checkState) { panic("boom") }},
		{Name: "x/hangs", Rule: "hangs", run: func(c *checkState) { <-c.Context().Done(); select {} }},
		{Name: "x/overruns", Rule: "stops late", run: func(c *checkState) { <-c.Context().Done() }},
		{Name: "x/goroutine-panics", Rule: "panics elsewhere", run: func(c *checkState) {
			var wg sync.WaitGroup
			c.Go(&wg, func() { panic("boom in a goroutine") })
			c.Go(&wg, func() { c.Fatalf("stopped a goroutine") })
			wg.Wait()
		}},
		{Name: "x/panics-oddly", Rule: "panics with bytes no document may hold", run: func(c *checkState) { panic("\x00\x1b[31m\xff\xfe <&> ]]>") }},
		{Name: "x/floods", Rule: "floods", run: func(c *checkState) {
			for i := range maxEvidence + 5 {
				c.Errorf("misbehaviour %d", i)
			}
		}},
		{Name: "x/cleanup-panics", Rule: "cleanup", run: func(c *checkState) { c.Cleanup(func() { panic("in cleanup") }) }},
	}
	var started, finished []string
	rep := runChecks(context.Background(), "test", checks, Options{
		Timeout:  200 * time.Millisecond,
		Started:  func(i, n int, ch Check) { started = append(started, ch.Name) },
		Finished: func(i, n int, r Result) { finished = append(finished, r.Check) },
	})
	require.Len(t, rep.Results, len(checks))
	require.Equal(t, started, finished)
	status := map[string]Status{}
	for _, r := range rep.Results {
		status[r.Check] = r.Status
	}
	require.Equal(t, map[string]Status{
		"x/passes": Pass, "x/errors-twice": Fail, "x/fatal-stops": Fail, "x/not-supported": NotSupported,
		"x/failed-then-not-supported": Fail, "x/panics": Fail, "x/hangs": Fail, "x/floods": Fail, "x/cleanup-panics": Fail,
		"x/overruns": Fail, "x/goroutine-panics": Fail, "x/panics-oddly": Fail,
	}, status)
	require.Equal(t, 1, cleaned)
	get := func(name string) Result { r, ok := rep.Result(name); require.True(t, ok); return r }
	require.Equal(t, []string{"first 1", "second 2"}, get("x/errors-twice").Evidence)
	require.Equal(t, []string{"stopped"}, get("x/fatal-stops").Evidence)
	require.Equal(t, "no budget", get("x/not-supported").Reason)
	require.Contains(t, get("x/panics").Evidence[0], "panic: boom")
	require.Contains(t, get("x/hangs").Evidence[0], "did not finish within 200ms")
	require.Equal(t, []string{"the check ran past its time of 200ms"}, get("x/overruns").Evidence)
	gp := get("x/goroutine-panics").Evidence
	require.Len(t, gp, 2)
	require.True(t, slices.ContainsFunc(gp, func(e string) bool {
		return strings.HasPrefix(e, "panic in a goroutine of the check: boom in a goroutine")
	}), gp)
	require.Contains(t, gp, "stopped a goroutine")
	flood := get("x/floods").Evidence
	require.Len(t, flood, maxEvidence+1)
	require.Equal(t, "… and 5 more", flood[maxEvidence])
	require.Contains(t, get("x/cleanup-panics").Evidence[0], "panic in cleanup: in cleanup")

	pass, fail, ns := rep.Counts()
	require.Equal(t, [3]int{1, 10, 1}, [3]int{pass, fail, ns})
	require.False(t, rep.OK())
	require.Len(t, rep.Failed(), 10)

	// Whatever the checks did, the report reads back as JSON and as JUnit.
	var js bytes.Buffer
	require.NoError(t, rep.WriteJSON(&js))
	var back Report
	require.NoError(t, json.Unmarshal(js.Bytes(), &back))
	require.Len(t, back.Results, len(checks))
	var ju bytes.Buffer
	require.NoError(t, rep.WriteJUnit(&ju))
	var suites JUnitSuites
	require.NoError(t, xml.Unmarshal(ju.Bytes(), &suites), ju.String())
	require.Equal(t, len(checks), suites.Tests)
	require.Equal(t, 10, suites.Failures)
}

func TestRunnerSelectsByName(t *testing.T) {
	ran := map[string]bool{}
	mk := func(name string) Check { return Check{Name: name, run: func(*checkState) { ran[name] = true }} }
	rep := runChecks(context.Background(), "test", []Check{mk("storage/a"), mk("device/b"), mk("storage/c")}, Options{Run: regexp.MustCompile(`^storage/`)})
	require.Equal(t, map[string]bool{"storage/a": true, "storage/c": true}, ran)
	require.Len(t, rep.Results, 2)
}

func sampleReport() Report {
	return Report{Suite: "device", Target: "a <test> device & co", Started: time.Date(2026, 11, 30, 10, 0, 0, 0, time.UTC), Results: []Result{
		{Check: "storage/ok", Rule: "holds", Status: Pass, Duration: 1500 * time.Microsecond},
		{Check: "device/broken", Rule: "keeps <bytes> & order", Status: Fail, Duration: 2 * time.Second,
			Evidence: []string{"3 of 8 bytes corrupt", "first line\nsecond line"}},
		{Check: "device/memory-budget", Rule: "reports a budget", Status: NotSupported, Duration: time.Millisecond, Reason: "no VK_EXT_memory_budget"},
	}}
}

func TestJUnitReadsBack(t *testing.T) {
	var b bytes.Buffer
	require.NoError(t, sampleReport().WriteJUnit(&b))
	require.True(t, strings.HasPrefix(b.String(), xml.Header))
	var got JUnitSuites
	require.NoError(t, xml.Unmarshal(b.Bytes(), &got))
	require.Equal(t, 3, got.Tests)
	require.Equal(t, 1, got.Failures)
	require.Equal(t, 1, got.Skipped)
	s := got.Suites[0]
	require.Equal(t, []JUnitProperty{{Name: "target", Value: "a <test> device & co"}}, s.Props)
	require.Len(t, s.Cases, 3)
	require.Nil(t, s.Cases[0].Failure)
	require.Equal(t, "0.002", s.Cases[0].Time)
	require.Equal(t, "keeps <bytes> & order", s.Cases[1].Failure.Message)
	require.Equal(t, "3 of 8 bytes corrupt\nfirst line\nsecond line", s.Cases[1].Failure.Text)
	require.Equal(t, "not supported: no VK_EXT_memory_budget", s.Cases[2].Skipped.Message)
}

func TestJSONReadsBack(t *testing.T) {
	var b bytes.Buffer
	require.NoError(t, sampleReport().WriteJSON(&b))
	var got struct {
		Report
		Passed, Failed, NotSupported int
	}
	require.NoError(t, json.Unmarshal(b.Bytes(), &got))
	require.Equal(t, "device", got.Suite)
	require.Equal(t, 1, got.Passed)
	require.Len(t, got.Results, 3)
	require.Equal(t, NotSupported, got.Results[2].Status)
	require.Equal(t, "no VK_EXT_memory_budget", got.Results[2].Reason)
	require.InDelta(t, 2.0, got.Results[1].Seconds, 1e-9)
}

func TestTableShowsRuleAndEvidenceOfFailures(t *testing.T) {
	var b bytes.Buffer
	require.NoError(t, sampleReport().WriteTable(&b))
	require.Equal(t, `CHECK                 RESULT         TIME
storage/ok            pass           2ms
device/broken         fail           2.00s
    rule: keeps <bytes> & order
    - 3 of 8 bytes corrupt
    - first line
      second line
device/memory-budget  not supported  1ms
    no VK_EXT_memory_budget
3 checks: 1 passed, 1 failed, 1 not supported (2.00s)
`, b.String())
}

// A run whose context ends stops: the checks done are reported, the one it
// stopped and the rest are listed as not run with what ended the run, and
// no report reads as a whole run.
func TestInterruptedRunListsTheChecksNotRun(t *testing.T) {
	ctx, cancel := context.WithCancelCause(context.Background())
	defer cancel(nil)
	ran := []string{}
	check := func(name string) Check {
		return Check{Name: name, Rule: name, run: func(c *checkState) { ran = append(ran, name) }}
	}
	checks := []Check{check("x/first"), check("x/second"), {Name: "x/stopped", Rule: "stopped", run: func(c *checkState) {
		ran = append(ran, "x/stopped")
		cancel(errors.New("interrupted by SIGINT"))
		<-c.Context().Done()
		c.Errorf("saw %v", c.Context().Err()) // no verdict: dropped
	}}, check("x/after")}
	rep := runChecks(ctx, "test", checks, Options{Timeout: time.Minute})
	require.Equal(t, []string{"x/first", "x/second", "x/stopped"}, ran, "no check starts after the interrupt")
	require.Len(t, rep.Results, 2)
	require.Equal(t, []string{"x/stopped", "x/after"}, rep.NotRun)
	require.Equal(t, "interrupted by SIGINT", rep.Interrupted)
	require.False(t, rep.OK(), "an interrupted run is not a whole one")
	require.Empty(t, rep.Failed())

	var js bytes.Buffer
	require.NoError(t, rep.WriteJSON(&js))
	var doc struct {
		Results     []Result `json:"results"`
		Passed      int      `json:"passed"`
		Failed      int      `json:"failed"`
		Interrupted string   `json:"interrupted"`
		NotRun      []string `json:"not_run"`
	}
	require.NoError(t, json.Unmarshal(js.Bytes(), &doc))
	require.Len(t, doc.Results, 2)
	require.Equal(t, 2, doc.Passed)
	require.Equal(t, rep.NotRun, doc.NotRun)
	require.Equal(t, rep.Interrupted, doc.Interrupted)

	var x bytes.Buffer
	require.NoError(t, rep.WriteJUnit(&x))
	var junit JUnitSuites
	require.NoError(t, xml.Unmarshal(x.Bytes(), &junit))
	require.Equal(t, 4, junit.Tests)
	require.Equal(t, 2, junit.Errors)
	require.Equal(t, 2, junit.Suites[0].Errors)
	require.Contains(t, junit.Suites[0].Props, JUnitProperty{Name: "interrupted", Value: "interrupted by SIGINT"})
	cases := junit.Suites[0].Cases
	require.Len(t, cases, 4)
	for _, c := range cases[2:] {
		require.NotNil(t, c.Error, c.Name)
		require.Equal(t, "not run: the run was interrupted (interrupted by SIGINT)", c.Error.Message)
	}

	var table bytes.Buffer
	require.NoError(t, rep.WriteTable(&table))
	require.Regexp(t, `(?m)^x/stopped +not run +-$`, table.String())
	require.Regexp(t, `(?m)^x/after +not run +-$`, table.String())
	require.Contains(t, table.String(), "interrupted (interrupted by SIGINT): 2 of 4 checks not run\n2 run: 2 passed, 0 failed, 0 not supported")

	// Ended before the first check: nothing ran, and the JSON still holds
	// a list of results.
	rep = runChecks(ctx, "test", checks, Options{})
	require.Empty(t, rep.Results)
	require.Len(t, rep.NotRun, 4)
	js.Reset()
	require.NoError(t, rep.WriteJSON(&js))
	require.Contains(t, js.String(), `"results":[]`)
}

// A check whose goroutine the target ends with runtime.Goexit (t.Fatal on a
// *testing.T of its own, inside Alloc or Dispatch) checked nothing past
// that call: it fails, wherever the goroutine was, and the suite's own
// Fatalf and NotSupportedf end theirs as before.
func TestRunnerFailsACheckTheTargetEnded(t *testing.T) {
	cleaned := 0
	checks := []Check{
		{Name: "x/target-ends-check", Rule: "ends", run: func(c *checkState) {
			c.Cleanup(func() { cleaned++ })
			runtime.Goexit()
		}},
		{Name: "x/target-ends-goroutine", Rule: "ends elsewhere", run: func(c *checkState) {
			var wg sync.WaitGroup
			c.Go(&wg, func() { runtime.Goexit() })
			c.Go(&wg, func() { c.Fatalf("stopped a goroutine") })
			wg.Wait()
		}},
		{Name: "x/target-ends-cleanup", Rule: "ends in Close", run: func(c *checkState) {
			c.Cleanup(func() { cleaned++ })
			c.Cleanup(func() { runtime.Goexit() })
			c.Cleanup(func() { cleaned++ })
		}},
		{Name: "x/fatal", Rule: "stops", run: func(c *checkState) {
			c.Cleanup(func() { cleaned++ })
			c.Fatalf("stopped")
		}},
		{Name: "x/not-supported", Rule: "lacks", run: func(c *checkState) {
			var wg sync.WaitGroup
			c.Go(&wg, func() { c.Fatalf("stopped a goroutine") })
			wg.Wait()
			c.Cleanup(func() { c.Fatalf("stopped a cleanup") })
			c.NotSupportedf("no budget")
		}},
		{Name: "x/fatal-in-goroutines", Rule: "stops goroutines", run: func(c *checkState) {
			var wg sync.WaitGroup
			for range 8 {
				c.Go(&wg, func() { c.NotSupportedf("no budget here") })
			}
			wg.Wait()
		}},
	}
	rep := runChecks(context.Background(), "test", checks, Options{Timeout: time.Minute})
	get := func(name string) Result { r, ok := rep.Result(name); require.True(t, ok); return r }
	const ended = "ended without finishing: the target ended its goroutine (runtime.Goexit, as t.Fatal does)"
	for name, where := range map[string]string{
		"x/target-ends-check": "the check ", "x/target-ends-goroutine": "a goroutine of the check ", "x/target-ends-cleanup": "a cleanup of the check ",
	} {
		r := get(name)
		require.Equal(t, Fail, r.Status, name)
		require.True(t, slices.ContainsFunc(r.Evidence, func(e string) bool { return strings.HasPrefix(e, where+ended) }), "%s: %q", name, r.Evidence)
		require.True(t, slices.ContainsFunc(r.Evidence, func(e string) bool { return strings.Contains(e, "runtime.Goexit()") }), "the evidence holds the stack of the call: %q", r.Evidence)
	}
	require.Contains(t, get("x/target-ends-goroutine").Evidence, "stopped a goroutine")
	require.Len(t, get("x/target-ends-goroutine").Evidence, 2)
	require.Len(t, get("x/target-ends-cleanup").Evidence, 1)
	require.Equal(t, 4, cleaned, "every cleanup ran, those after one that ended its goroutine too")

	require.Equal(t, Result{Check: "x/fatal", Rule: "stops", Status: Fail, Evidence: []string{"stopped"}}, withoutTime(get("x/fatal")))
	require.Equal(t, Result{Check: "x/not-supported", Rule: "lacks", Status: Fail, Evidence: []string{"stopped a goroutine", "stopped a cleanup"}}, withoutTime(get("x/not-supported")))
	require.Equal(t, Result{Check: "x/fatal-in-goroutines", Rule: "stops goroutines", Status: NotSupported, Reason: "no budget here"}, withoutTime(get("x/fatal-in-goroutines")))
}

func withoutTime(r Result) Result {
	r.Duration, r.Seconds = 0, 0
	return r
}

//go:noinline
func blockedInAGoroutineOfTheCheck() { select {} }

// A check whose goroutine of Go hangs shows that goroutine's stack too:
// its own goroutine only waits for it.
func TestAHungGoroutineOfTheCheckIsShown(t *testing.T) {
	r := runCheck(context.Background(), Check{Name: "x/hangs-in-go", Rule: "hangs", run: func(c *checkState) {
		var wg sync.WaitGroup
		c.Go(&wg, blockedInAGoroutineOfTheCheck)
		wg.Wait()
	}}, 100*time.Millisecond, "")
	require.Equal(t, Fail, r.Status)
	require.Contains(t, r.Evidence[0], "conformance.blockedInAGoroutineOfTheCheck")
	require.Contains(t, r.Evidence[0], "sync.(*WaitGroup).Wait")
}

// The table shows a target's error text escaped where a terminal would act
// on it (an escape sequence, a NUL, bytes that are not UTF-8), a line at a
// time; the JSON report keeps it as it came.
func TestTableEscapesTheTargetsText(t *testing.T) {
	rep := sampleReport()
	rep.Results[1].Evidence = []string{"x \x1b[2J\xff\x00", "first\nsecond \x1b[31m"}
	rep.Results[2].Reason = "no \x1b]0;title\a"
	var b bytes.Buffer
	require.NoError(t, rep.WriteTable(&b))
	require.NotContains(t, b.String(), "\x1b")
	require.NotContains(t, b.String(), "\x00")
	require.Contains(t, b.String(), "    - x \\x1b[2J\\xff\\x00\n")
	require.Contains(t, b.String(), "    - first\n      second \\x1b[31m\n")
	require.Contains(t, b.String(), "    no \\x1b]0;title\\a\n")
	var j bytes.Buffer
	require.NoError(t, rep.WriteJSON(&j))
	var got struct{ Results []Result }
	require.NoError(t, json.Unmarshal(j.Bytes(), &got))
	require.Equal(t, "no \x1b]0;title\a", got.Results[2].Reason)
}

// The JUnit timestamp is the start in UTC with no zone, as Ant's schema
// has it (ISO8601_DATETIME_PATTERN): a suite started at 11:00 in UTC+1
// reads 10:00.
func TestJUnitTimestampIsUTCWithoutAZone(t *testing.T) {
	rep := sampleReport()
	rep.Started = time.Date(2026, 11, 30, 11, 0, 0, 0, time.FixedZone("CET", 3600))
	var b bytes.Buffer
	require.NoError(t, rep.WriteJUnit(&b))
	var got JUnitSuites
	require.NoError(t, xml.Unmarshal(b.Bytes(), &got))
	ts := got.Suites[0].Timestamp
	require.Regexp(t, `^[0-9]{4}-[0-9]{2}-[0-9]{2}T[0-9]{2}:[0-9]{2}:[0-9]{2}$`, ts)
	require.Equal(t, "2026-11-30T10:00:00", ts)
}

// A suite that did not start says why in a field of its own, in every
// form of the report: not_started in JSON (interrupted too, as readers
// before it read it), the JUnit suite's property of that name and each
// check's <error>, and the table. The command rewrote each JUnit message.
func TestReportOfASuiteThatDidNotStart(t *testing.T) {
	const why = "the device did not open: it fell off the bus"
	rep := Report{Suite: "device", NotStarted: why, NotRun: []string{"kernel/add", "kernel/mul"}}
	require.False(t, rep.OK(), "a suite that did not start is not a whole run")

	var js bytes.Buffer
	require.NoError(t, rep.WriteJSON(&js))
	var doc map[string]any
	require.NoError(t, json.Unmarshal(js.Bytes(), &doc))
	require.Equal(t, why, doc["not_started"])
	require.Equal(t, why, doc["interrupted"])
	require.Equal(t, []any{"kernel/add", "kernel/mul"}, doc["not_run"])
	var back Report
	require.NoError(t, json.Unmarshal(js.Bytes(), &back))
	require.Equal(t, why, back.NotStarted)

	var x bytes.Buffer
	require.NoError(t, rep.WriteJUnit(&x))
	var junit JUnitSuites
	require.NoError(t, xml.Unmarshal(x.Bytes(), &junit))
	require.Equal(t, 2, junit.Tests)
	require.Equal(t, 2, junit.Errors)
	props := junit.Suites[0].Props
	require.Contains(t, props, JUnitProperty{Name: "not_started", Value: why})
	require.Contains(t, props, JUnitProperty{Name: "interrupted", Value: why})
	require.Len(t, junit.Suites[0].Cases, 2)
	for _, c := range junit.Suites[0].Cases {
		require.Equal(t, &JUnitMessage{Message: "not run: " + why, Type: "not started"}, c.Error, c.Name)
	}

	var table bytes.Buffer
	require.NoError(t, rep.WriteTable(&table))
	require.Contains(t, table.String(), "not started ("+why+"): 2 of 2 checks not run\n0 run:")
	require.NotContains(t, table.String(), "interrupted")
}
