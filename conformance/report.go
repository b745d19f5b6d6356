package conformance

import (
	"cmp"
	"encoding/xml"
	"fmt"
	"io"
	"math"
	"slices"
	"strings"
	"time"

	json "github.com/goccy/go-json"

	"github.com/vkrt/vkrt/internal/printable"
)

// Report is the outcome of a suite run: one result per check, in the order
// they ran.
type Report struct {
	// Suite names what ran: "storage" or "device".
	Suite string `json:"suite"`
	// Target describes what was checked (a device's name), when known.
	Target  string    `json:"target,omitempty"`
	Started time.Time `json:"started"`
	Results []Result  `json:"results"`
	// Interrupted, when the run was ended before every check had run, says
	// what ended it (a signal, the run's deadline); NotRun names the
	// checks that gave no verdict, in order: the one it stopped, if any,
	// and those after it.
	Interrupted string   `json:"interrupted,omitempty"`
	NotRun      []string `json:"not_run,omitempty"`
	// NotStarted, when the suite could not start at all (its device did
	// not open), says why; NotRun then names every check selected, and
	// Results is empty. The JSON report's interrupted and the JUnit
	// suite's property of that name say it too where Interrupted is
	// empty, as they said it before there was a field of its own.
	NotStarted string `json:"not_started,omitempty"`
}

// Counts tallies the results by status.
func (r Report) Counts() (pass, fail, notSupported int) {
	for _, x := range r.Results {
		switch x.Status {
		case Pass:
			pass++
		case Fail:
			fail++
		case NotSupported:
			notSupported++
		}
	}
	return pass, fail, notSupported
}

// Failed is the names of the checks that failed.
func (r Report) Failed() []string {
	var out []string
	for _, x := range r.Results {
		if x.Status == Fail {
			out = append(out, x.Check)
		}
	}
	return out
}

// Result is the result of the named check, if it ran.
func (r Report) Result(check string) (Result, bool) {
	for _, x := range r.Results {
		if x.Check == check {
			return x, true
		}
	}
	return Result{}, false
}

// OK: every check ran and none failed.
func (r Report) OK() bool {
	_, fail, _ := r.Counts()
	return fail == 0 && r.Interrupted == "" && r.NotStarted == ""
}

// stopped is what ended the run before every check had run: Interrupted,
// else NotStarted.
func (r Report) stopped() string { return cmp.Or(r.Interrupted, r.NotStarted) }

func (r Report) duration() time.Duration {
	var d time.Duration
	for _, x := range r.Results {
		d += x.elapsed()
	}
	return d
}

// elapsed is the check's time: Duration, or Seconds where Duration is 0,
// as in a result read back from JSON (which holds Seconds alone). Written
// again, such a report said every check took 0 s.
func (x Result) elapsed() time.Duration {
	if x.Duration != 0 {
		return x.Duration
	}
	return time.Duration(math.Round(x.Seconds * float64(time.Second)))
}

// WriteJSON writes the report as one JSON object on one line, as every
// --json output of vkrt is.
func (r Report) WriteJSON(w io.Writer) error {
	pass, fail, ns := r.Counts()
	r.Results = slices.Clone(r.Results)
	r.Interrupted = r.stopped()
	for i := range r.Results {
		r.Results[i].Seconds = r.Results[i].elapsed().Seconds()
	}
	out := struct {
		Report
		Passed       int     `json:"passed"`
		Failed       int     `json:"failed"`
		NotSupported int     `json:"not_supported"`
		Seconds      float64 `json:"seconds"`
	}{r, pass, fail, ns, r.duration().Seconds()}
	if out.Results == nil {
		out.Results = []Result{} // a run interrupted before its first check
	}
	enc := json.NewEncoder(w)
	return enc.Encode(out)
}

// JUnitSuites is the JUnit XML document CI systems read: one test suite,
// one test case per check. A failure carries the rule as its message and
// the evidence as its text; not supported is a skipped test case; a check
// an interrupted run, or a suite that did not start, did not run is an
// error, so that no CI takes the document for a whole run.
type JUnitSuites struct {
	XMLName  xml.Name     `xml:"testsuites"`
	Tests    int          `xml:"tests,attr"`
	Failures int          `xml:"failures,attr"`
	Errors   int          `xml:"errors,attr"`
	Skipped  int          `xml:"skipped,attr"`
	Time     string       `xml:"time,attr"`
	Suites   []JUnitSuite `xml:"testsuite"`
}

// JUnitSuite is one test suite of a JUnit document.
type JUnitSuite struct {
	Name     string `xml:"name,attr"`
	Tests    int    `xml:"tests,attr"`
	Failures int    `xml:"failures,attr"`
	Errors   int    `xml:"errors,attr"`
	Skipped  int    `xml:"skipped,attr"`
	Time     string `xml:"time,attr"`
	// Timestamp is when the suite started, in UTC, with no zone: the
	// schema JUnit's consumers validate against (Ant's) takes none, and
	// refused "2026-12-07T13:52:24Z".
	Timestamp string          `xml:"timestamp,attr"`
	Props     []JUnitProperty `xml:"properties>property,omitempty"`
	Cases     []JUnitCase     `xml:"testcase"`
}

// JUnitProperty is a name and value of a suite.
type JUnitProperty struct {
	Name  string `xml:"name,attr"`
	Value string `xml:"value,attr"`
}

// JUnitCase is one check of a JUnit document.
type JUnitCase struct {
	Name      string        `xml:"name,attr"`
	ClassName string        `xml:"classname,attr"`
	Time      string        `xml:"time,attr"`
	Failure   *JUnitMessage `xml:"failure,omitempty"`
	Error     *JUnitMessage `xml:"error,omitempty"`
	Skipped   *JUnitMessage `xml:"skipped,omitempty"`
}

// JUnitMessage is a failure, an error or a skip: the message attribute and
// the text.
type JUnitMessage struct {
	Message string `xml:"message,attr"`
	Type    string `xml:"type,attr,omitempty"`
	Text    string `xml:",chardata"`
}

// junitTimestamp is the layout of JUnitSuite.Timestamp.
const junitTimestamp = "2006-01-02T15:04:05"

func seconds(d time.Duration) string { return fmt.Sprintf("%.3f", d.Seconds()) }

// JUnit is the report as a JUnit document.
func (r Report) JUnit() JUnitSuites {
	pass, fail, ns := r.Counts()
	notRun := len(r.NotRun)
	s := JUnitSuite{
		Name: "vkrt conformance: " + r.Suite, Tests: pass + fail + ns + notRun, Failures: fail, Errors: notRun, Skipped: ns,
		Time: seconds(r.duration()), Timestamp: r.Started.UTC().Format(junitTimestamp),
	}
	if r.Target != "" {
		s.Props = []JUnitProperty{{Name: "target", Value: r.Target}}
	}
	if stopped := r.stopped(); stopped != "" {
		s.Props = append(s.Props, JUnitProperty{Name: "interrupted", Value: stopped})
	}
	if r.NotStarted != "" {
		s.Props = append(s.Props, JUnitProperty{Name: "not_started", Value: r.NotStarted})
	}
	for _, x := range r.Results {
		tc := JUnitCase{Name: x.Check, ClassName: "conformance." + r.Suite, Time: seconds(x.elapsed())}
		switch x.Status {
		case Fail:
			tc.Failure = &JUnitMessage{Message: x.Rule, Type: "rule", Text: strings.Join(x.Evidence, "\n")}
		case NotSupported:
			tc.Skipped = &JUnitMessage{Message: "not supported: " + x.Reason}
		}
		s.Cases = append(s.Cases, tc)
	}
	notRunError := JUnitMessage{Message: "not run: the run was interrupted (" + r.Interrupted + ")", Type: "interrupted"}
	if r.Interrupted == "" && r.NotStarted != "" {
		notRunError = JUnitMessage{Message: "not run: " + r.NotStarted, Type: "not started"}
	}
	for _, name := range r.NotRun {
		e := notRunError
		s.Cases = append(s.Cases, JUnitCase{Name: name, ClassName: "conformance." + r.Suite, Time: seconds(0), Error: &e})
	}
	return JUnitSuites{Tests: s.Tests, Failures: fail, Errors: notRun, Skipped: ns, Time: s.Time, Suites: []JUnitSuite{s}}
}

// WriteJUnit writes the report as JUnit XML.
func (r Report) WriteJUnit(w io.Writer) error { return r.JUnit().Write(w) }

// Write writes the document as WriteJUnit does: the XML header, the
// document indented, a final newline.
func (d JUnitSuites) Write(w io.Writer) error {
	if _, err := io.WriteString(w, xml.Header); err != nil {
		return err
	}
	enc := xml.NewEncoder(w)
	enc.Indent("", "  ")
	if err := enc.Encode(d); err != nil {
		return err
	}
	_, err := io.WriteString(w, "\n")
	return err
}

// WriteTable writes the report for a person: one row per check (name,
// result, time) with the rule and the evidence under every failure and the
// missing capability under every check not supported, then the totals.
// The evidence and the capability hold the target's own error text, shown
// escaped where a terminal would act on it (printable.Escaped), a line at a
// time; the JSON and JUnit reports keep it as it came.
func (r Report) WriteTable(w io.Writer) error {
	nameW, statusW := len("CHECK"), len("RESULT")
	for _, x := range r.Results {
		nameW, statusW = max(nameW, len(x.Check)), max(statusW, len(x.Status))
	}
	for _, name := range r.NotRun {
		nameW, statusW = max(nameW, len(name)), max(statusW, len(notRunStatus))
	}
	var b strings.Builder
	row := func(name, status, time string) {
		fmt.Fprintf(&b, "%-*s  %-*s  %s\n", nameW, name, statusW, status, time)
	}
	row("CHECK", "RESULT", "TIME")
	for _, x := range r.Results {
		row(x.Check, string(x.Status), formatDuration(x.elapsed()))
		switch x.Status {
		case Fail:
			fmt.Fprintf(&b, "    rule: %s\n", x.Rule)
			for _, e := range x.Evidence {
				for i, line := range strings.Split(e, "\n") {
					prefix := "    - "
					if i > 0 {
						prefix = "      "
					}
					fmt.Fprintf(&b, "%s%s\n", prefix, printable.Escaped(line))
				}
			}
		case NotSupported:
			fmt.Fprintf(&b, "    %s\n", printable.Escaped(x.Reason))
		}
	}
	for _, name := range r.NotRun {
		row(name, notRunStatus, "-")
	}
	pass, fail, ns := r.Counts()
	ran := len(r.Results)
	noun := "checks"
	if ran+len(r.NotRun) == 1 {
		noun = "check"
	}
	if len(r.NotRun) > 0 {
		what := "interrupted (" + r.Interrupted + ")"
		if r.Interrupted == "" && r.NotStarted != "" {
			what = "not started (" + r.NotStarted + ")"
		}
		fmt.Fprintf(&b, "%s: %d of %d %s not run\n", what, len(r.NotRun), ran+len(r.NotRun), noun)
		noun = "run"
	}
	fmt.Fprintf(&b, "%d %s: %d passed, %d failed, %d not supported (%s)\n", ran, noun, pass, fail, ns, formatDuration(r.duration()))
	_, err := io.WriteString(w, b.String())
	return err
}

// notRunStatus is the table's result for a check an interrupted run did
// not run; the JSON report lists those under not_run instead.
const notRunStatus = "not run"

// formatDuration rounds as the JUnit file's %.3f seconds and the progress
// line's Round do (a check of 6.9 ms read 6ms here and 7ms there).
func formatDuration(d time.Duration) string {
	switch {
	case d < time.Millisecond-time.Microsecond/2:
		return fmt.Sprintf("%dµs", d.Round(time.Microsecond).Microseconds())
	case d < time.Second-time.Millisecond/2:
		return fmt.Sprintf("%dms", d.Round(time.Millisecond).Milliseconds())
	}
	return fmt.Sprintf("%.2fs", d.Seconds())
}
