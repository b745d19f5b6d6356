package conformance_test

import (
	"bytes"
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
