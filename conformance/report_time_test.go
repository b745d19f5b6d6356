package conformance_test

import (
	"bytes"
	"encoding/json"
	"io"
	"strings"
	"testing"
	"time"

	"github.com/vkrt/vkrt/conformance"
)

// The table and the JUnit document give one check the same time.
func TestTableAndJUnitAgreeOnTime(t *testing.T) {
	d := 6900 * time.Microsecond
	rep := conformance.Report{Suite: "device", Started: time.Now(), Results: []conformance.Result{
		{Check: "kernel/add", Rule: "r", Status: conformance.Pass, Duration: d, Seconds: d.Seconds()},
	}}
	var table bytes.Buffer
	if err := rep.WriteTable(&table); err != nil {
		t.Fatal(err)
	}
	junit := rep.JUnit().Suites[0].Cases[0].Time
	row := strings.Fields(strings.Split(table.String(), "\n")[1])
	t.Logf("table row %q, junit time %q, --json seconds %v", row, junit, d.Seconds())
	if row[2] != "7ms" {
		t.Fatalf("a check of %v: the table says %s, the JUnit %ss (and the terminal line, Round(ms), 7ms)", d, row[2], junit)
	}
}

// A report read back from its JSON (which holds each check's seconds, not
// its Duration) and written again keeps its times: every "seconds" was 0,
// and every JUnit time 0.000.
func TestAReportReadBackKeepsItsTimes(t *testing.T) {
	rep := conformance.Report{Suite: "device", Started: time.Now().UTC(), Results: []conformance.Result{
		{Check: "storage/ok", Rule: "r", Status: conformance.Pass, Duration: 1500 * time.Microsecond},
		{Check: "kernel/add", Rule: "r", Status: conformance.Fail, Duration: 2 * time.Second, Evidence: []string{"wrong"}},
	}}
	var first bytes.Buffer
	if err := rep.WriteJSON(&first); err != nil {
		t.Fatal(err)
	}
	var back conformance.Report
	if err := json.Unmarshal(first.Bytes(), &back); err != nil {
		t.Fatal(err)
	}
	var again bytes.Buffer
	if err := back.WriteJSON(&again); err != nil {
		t.Fatal(err)
	}
	if first.String() != again.String() {
		t.Errorf("written, read back and written again, the report changed:\n%s%s", first.String(), again.String())
	}
	for _, w := range []struct {
		what  string
		write func(conformance.Report, io.Writer) error
	}{
		{"the JUnit document", conformance.Report.WriteJUnit},
		{"the table", conformance.Report.WriteTable},
	} {
		var written, writtenBack bytes.Buffer
		if err := w.write(rep, &written); err != nil {
			t.Fatal(err)
		}
		if err := w.write(back, &writtenBack); err != nil {
			t.Fatal(err)
		}
		if written.String() != writtenBack.String() {
			t.Errorf("%s of the report read back differs:\n%s%s", w.what, written.String(), writtenBack.String())
		}
	}
}
