package main

import (
	"bytes"
	"context"
	"encoding/json"
	"encoding/xml"
	"errors"
	"os"
	"path/filepath"
	"strings"
	"syscall"
	"testing"

	"github.com/spf13/pflag"
	"github.com/stretchr/testify/require"

	"github.com/vkrt/vkrt/client"
	"github.com/vkrt/vkrt/conformance"
	"github.com/vkrt/vkrt/device"
	"github.com/vkrt/vkrt/device/cpu"
	vkruntime "github.com/vkrt/vkrt/runtime"
)

// junitDoc is the JUnit XML a CI system reads, declared here on its own so
// the test reads the file as an outside tool would.
type junitDoc struct {
	XMLName  xml.Name `xml:"testsuites"`
	Tests    int      `xml:"tests,attr"`
	Failures int      `xml:"failures,attr"`
	Skipped  int      `xml:"skipped,attr"`
	Suites   []struct {
		Name     string `xml:"name,attr"`
		Tests    int    `xml:"tests,attr"`
		Failures int    `xml:"failures,attr"`
		Cases    []struct {
			Name    string `xml:"name,attr"`
			Time    string `xml:"time,attr"`
			Failure *struct {
				Message string `xml:"message,attr"`
				Text    string `xml:",chardata"`
			} `xml:"failure"`
			Skipped *struct {
				Message string `xml:"message,attr"`
			} `xml:"skipped"`
		} `xml:"testcase"`
	} `xml:"testsuite"`
}

// The whole suite on the default device (lavapipe in CI): every check
// passes or is not supported, and the JUnit and JSON files parse.
func TestConformanceOnTheDefaultDevice(t *testing.T) {
	devicesOrSkip(t)
	dir := t.TempDir()
	junitPath, jsonPath := filepath.Join(dir, "conformance.xml"), filepath.Join(dir, "conformance.json")
	out, _, err := execute(t, "conformance", "--junit", junitPath, "--json", jsonPath)
	require.NoError(t, err, out)
	require.Contains(t, out, "0 failed")

	raw, err := os.ReadFile(junitPath)
	require.NoError(t, err)
	var doc junitDoc
	require.NoError(t, xml.Unmarshal(raw, &doc))
	require.Len(t, doc.Suites, 1)
	suite := doc.Suites[0]
	require.GreaterOrEqual(t, len(suite.Cases), 30)
	require.Equal(t, len(suite.Cases), doc.Tests)
	require.Zero(t, doc.Failures)
	skipped := 0
	for _, c := range suite.Cases {
		require.Nil(t, c.Failure, "%s failed: %+v", c.Name, c.Failure)
		require.Contains(t, out, c.Name, "the table lists every check")
		if c.Skipped != nil {
			skipped++
			require.True(t, strings.HasPrefix(c.Skipped.Message, "not supported: "), c.Skipped.Message)
		}
	}
	require.Equal(t, skipped, doc.Skipped)

	var rep struct {
		Target  string `json:"target"`
		Failed  int    `json:"failed"`
		Results []struct {
			Check  string `json:"check"`
			Rule   string `json:"rule"`
			Result string `json:"result"`
		} `json:"results"`
	}
	raw, err = os.ReadFile(jsonPath)
	require.NoError(t, err)
	require.NoError(t, json.Unmarshal(raw, &rep))
	require.NotEmpty(t, rep.Target)
	require.Zero(t, rep.Failed)
	require.Len(t, rep.Results, len(suite.Cases))
	for i, r := range rep.Results {
		require.Equal(t, suite.Cases[i].Name, r.Check)
		require.NotEmpty(t, r.Rule)
		require.Contains(t, []string{"pass", "not supported"}, r.Result)
	}
}

// flippingDevice is the pure-Go device with a flaw: every read comes back
// with its first byte flipped.
type flippingDevice struct{ device.Device }

func (d flippingDevice) Download(ctx context.Context, src vkruntime.StorageHandle, dst []byte) error {
	err := d.Device.Download(ctx, src, dst)
	if len(dst) > 0 {
		dst[0] ^= 0xFF
	}
	return err
}

type failingClose struct{ device.Device }

func (d failingClose) Close() error {
	return errors.Join(d.Device.Close(), errors.New("the device would not close"))
}

// A device that breaks rules fails the checks of them: the exit is an
// error, and the table and the JUnit name the rule and the evidence.
func TestConformanceFailsWhenChecksFail(t *testing.T) {
	broken := conformance.OnDevice(func(ctx context.Context, cfg device.Config) (device.Device, error) {
		d, err := cpu.Open(ctx, cfg)
		return flippingDevice{d}, err
	})
	var stdout, stderr bytes.Buffer
	junitPath := filepath.Join(t.TempDir(), "c.xml")
	err := runConformance(context.Background(), &stdout, &stderr, broken, conformanceFlags{run: "^device/(zero-initialised|create-round-trip|properties)$", junit: junitPath})
	require.ErrorContains(t, err, "2 of 3 checks failed")
	require.Contains(t, stdout.String(), "device/properties ")
	require.Contains(t, stdout.String(), "rule: Every new buffer reads as zeros")
	require.Contains(t, stdout.String(), "rule: A buffer created from bytes reads back those bytes")
	require.Contains(t, stdout.String(), "bytes corrupt, the first at byte 0")
	raw, err := os.ReadFile(junitPath)
	require.NoError(t, err)
	var doc junitDoc
	require.NoError(t, xml.Unmarshal(raw, &doc))
	require.Equal(t, 2, doc.Failures)
	failures := 0
	for _, c := range doc.Suites[0].Cases {
		if c.Failure != nil {
			failures++
			require.Contains(t, c.Failure.Text, "bytes corrupt")
		}
	}
	require.Equal(t, 2, failures)

	// The count's noun agrees with it: "1 of 1 checks failed" said it wrong.
	err = runConformance(context.Background(), &stdout, &stderr, broken, conformanceFlags{run: "^device/zero-initialised$", timeout: conformance.DefaultTimeout})
	require.EqualError(t, err, "1 of 1 check failed: [device/zero-initialised]")
}

// A device that does not open is one error, not a failure of every check.
func TestConformanceSaysOnceWhenTheDeviceDoesNotOpen(t *testing.T) {
	missing := func(context.Context, conformance.DeviceConfig) (*client.Client, error) {
		return nil, errors.New("the device fell off the bus")
	}
	var stdout, stderr bytes.Buffer
	err := runConformance(context.Background(), &stdout, &stderr, missing, conformanceFlags{})
	require.ErrorContains(t, err, "the device fell off the bus")
	require.Empty(t, stdout.String())
}

func TestConformanceRefusesBadFlags(t *testing.T) {
	_, _, err := execute(t, "conformance", "--device", "-1")
	require.EqualError(t, err, "--device -1: want a device index, 0 or more (vkrt devices lists them)")
	_, _, err = execute(t, "conformance", "--run", "(")
	require.ErrorContains(t, err, "--run")
	_, _, err = execute(t, "conformance", "--run", "^no such check$")
	require.ErrorContains(t, err, "no check matches")
	_, _, err = execute(t, "conformance", "--device", "99")
	require.Error(t, err, "there is no device 99")
	_, _, err = execute(t, "conformance", "--json", "-", "--junit", "-")
	require.ErrorContains(t, err, "cannot both go to stdout")
	for _, timeout := range []string{"0", "-1s"} {
		// The suite would run each check for up to its default 5 minutes.
		_, _, err = execute(t, "conformance", "--run", "^kernel/add$", "--timeout", timeout)
		require.ErrorContains(t, err, "--timeout")
		require.ErrorContains(t, err, "want a positive duration", timeout)
	}
	// --help names the flag's value N, not a phrase of its usage.
	cmd, _, err := rootCmd.Find([]string{"conformance"})
	require.NoError(t, err)
	name, usage := pflag.UnquoteUsage(cmd.Flags().Lookup("device"))
	require.Equal(t, "N", name, usage)
}

// --json - puts the report on stdout as one JSON object on one line, and
// the table on stderr.
func TestConformanceJSONToStdout(t *testing.T) {
	devicesOrSkip(t)
	out, errOut, err := execute(t, "conformance", "--run", "^kernel/add$", "--json", "-")
	require.NoError(t, err)
	require.Equal(t, 1, strings.Count(out, "\n"), "one line: %q", out)
	var rep struct {
		Passed  int `json:"passed"`
		Results []struct {
			Check  string `json:"check"`
			Result string `json:"result"`
		} `json:"results"`
	}
	require.NoError(t, json.Unmarshal([]byte(out), &rep))
	require.Equal(t, 1, rep.Passed)
	require.Equal(t, "kernel/add", rep.Results[0].Check)
	require.Contains(t, errOut, "1 check: 1 passed")
}

// --list names the checks --run selects, with their rules, and runs none.
func TestConformanceListsChecks(t *testing.T) {
	out, _, err := execute(t, "conformance", "--list", "--run", "^kernel/")
	require.NoError(t, err)
	require.Contains(t, out, "kernel/matmul\n    matmul matches a float64 CPU product")
	require.NotContains(t, out, "storage/")
	out, _, err = execute(t, "conformance", "--list")
	require.NoError(t, err)
	require.GreaterOrEqual(t, strings.Count(out, "\n    "), 30)
}

// countingCPU opens every client on a pure-Go device of its own and counts
// the opens: a suite that never started opened none.
func countingCPU(opened *int) conformance.OpenClient {
	open := conformance.OnDevice(cpu.Open)
	return func(ctx context.Context, cfg conformance.DeviceConfig) (*client.Client, error) {
		*opened++
		return open(ctx, cfg)
	}
}

// The command opens the device once before the checks, to find whether it
// opens and to name it in the report; each check then opens its own. The
// suite opened it a second time before the first check, for the name the
// command had already had.
func TestConformanceOpensTheDeviceOnceBeforeTheChecks(t *testing.T) {
	dir := t.TempDir()
	opened := 0
	var stdout, stderr bytes.Buffer
	out := filepath.Join(dir, "c.json")
	err := runConformance(context.Background(), &stdout, &stderr, countingCPU(&opened), conformanceFlags{run: "^device/properties$", json: out, timeout: conformance.DefaultTimeout})
	require.NoError(t, err, stdout.String())
	require.Equal(t, 2, opened, "the command's open and the one check's")
	data, err := os.ReadFile(out)
	require.NoError(t, err)
	var rep struct {
		Target string `json:"target"`
	}
	require.NoError(t, json.Unmarshal(data, &rep))
	d, err := cpu.New()
	require.NoError(t, err)
	require.Equal(t, d.Name(), rep.Target, "the report names the device")
	require.NoError(t, d.Close())
}

// A report file that cannot be written is an error before the suite runs,
// naming the flag and the path, and the check leaves nothing behind.
func TestConformanceReportThatCannotBeWrittenFailsBeforeTheSuite(t *testing.T) {
	dir := t.TempDir()
	opened := 0
	var stdout, stderr bytes.Buffer
	missing := filepath.Join(dir, "no-dir", "c.json")
	err := runConformance(context.Background(), &stdout, &stderr, countingCPU(&opened), conformanceFlags{run: "^kernel/add$", json: missing})
	require.Zero(t, opened, "the suite never started")
	require.ErrorIs(t, err, os.ErrNotExist)
	require.ErrorContains(t, err, "--json "+missing+": ")
	require.NotContains(t, err.Error(), ".c.json.", "the temporary file is not what the user named")

	err = runConformance(context.Background(), &stdout, &stderr, countingCPU(&opened), conformanceFlags{run: "^kernel/add$", json: filepath.Join(dir, "c.json"), junit: dir})
	require.ErrorContains(t, err, "--junit "+dir+": is a directory")

	require.Zero(t, opened, "the suite never started")
	require.Empty(t, stdout.String())
	entries, err := os.ReadDir(dir)
	require.NoError(t, err)
	require.Empty(t, entries, "checking the paths wrote nothing")
}

// A suite that does not start (its device does not open) still writes the
// reports asked for, saying why, with every selected check not run, and
// fails: a CI reading the report finds why, not a missing file.
func TestConformanceThatDoesNotStartReportsWhy(t *testing.T) {
	dir := t.TempDir()
	missing := func(context.Context, conformance.DeviceConfig) (*client.Client, error) {
		return nil, errors.New("the device fell off the bus")
	}
	const why = "the device did not open: the device fell off the bus"
	type jsonReport struct {
		NotStarted  string   `json:"not_started"`
		Interrupted string   `json:"interrupted"`
		NotRun      []string `json:"not_run"`
		Results     []any    `json:"results"`
	}
	var stdout, stderr bytes.Buffer
	jsonPath, junitPath := filepath.Join(dir, "c.json"), filepath.Join(dir, "c.xml")
	err := runConformance(context.Background(), &stdout, &stderr, missing, conformanceFlags{run: "^kernel/(add|mul)$", json: jsonPath, junit: junitPath})
	require.EqualError(t, err, "the device fell off the bus")
	require.Empty(t, stdout.String(), "no table: the error says it once")

	data, rerr := os.ReadFile(jsonPath)
	require.NoError(t, rerr)
	var rep jsonReport
	require.NoError(t, json.Unmarshal(data, &rep))
	require.Equal(t, jsonReport{NotStarted: why, Interrupted: why, NotRun: []string{"kernel/add", "kernel/mul"}, Results: []any{}}, rep)

	data, rerr = os.ReadFile(junitPath)
	require.NoError(t, rerr)
	var doc struct {
		Tests  int `xml:"tests,attr"`
		Errors int `xml:"errors,attr"`
		Suites []struct {
			Props []conformance.JUnitProperty `xml:"properties>property"`
			Cases []struct {
				Name  string `xml:"name,attr"`
				Error *struct {
					Message string `xml:"message,attr"`
				} `xml:"error"`
			} `xml:"testcase"`
		} `xml:"testsuite"`
	}
	require.NoError(t, xml.Unmarshal(data, &doc))
	require.Equal(t, 2, doc.Tests)
	require.Equal(t, 2, doc.Errors)
	require.Len(t, doc.Suites, 1)
	require.Contains(t, doc.Suites[0].Props, conformance.JUnitProperty{Name: "not_started", Value: why})
	require.Len(t, doc.Suites[0].Cases, 2)
	for _, c := range doc.Suites[0].Cases {
		require.NotNil(t, c.Error, c.Name)
		require.Equal(t, "not run: "+why, c.Error.Message)
	}

	// A device that opens for its name but does not close says so.
	closeFails := conformance.OnDevice(func(ctx context.Context, cfg device.Config) (device.Device, error) {
		d, err := cpu.Open(ctx, cfg)
		return failingClose{d}, err
	})
	err = runConformance(context.Background(), &stdout, &stderr, closeFails, conformanceFlags{run: "^kernel/add$", json: jsonPath})
	require.ErrorContains(t, err, "the device would not close")
	data, rerr = os.ReadFile(jsonPath)
	require.NoError(t, rerr)
	rep = jsonReport{}
	require.NoError(t, json.Unmarshal(data, &rep))
	require.True(t, strings.HasPrefix(rep.NotStarted, "the device did not close: "), rep.NotStarted)
	require.Equal(t, rep.NotStarted, rep.Interrupted)
	require.Contains(t, rep.Interrupted, "the device would not close")
	require.Equal(t, []string{"kernel/add"}, rep.NotRun)

	// To stdout too: the report is the whole of it.
	stdout.Reset()
	err = runConformance(context.Background(), &stdout, &stderr, missing, conformanceFlags{run: "^kernel/add$", json: "-"})
	require.EqualError(t, err, "the device fell off the bus")
	rep = jsonReport{}
	require.NoError(t, json.Unmarshal(stdout.Bytes(), &rep), stdout.String())
	require.Equal(t, jsonReport{NotStarted: why, Interrupted: why, NotRun: []string{"kernel/add"}, Results: []any{}}, rep)
}

// A report write that fails half way (past the file size limit, as a full
// disk would) leaves the old report as it was, not the first bytes of the
// new one.
func TestConformanceReportThatFailsHalfWayKeepsTheOldFile(t *testing.T) {
	dir := t.TempDir()
	out := filepath.Join(dir, "c.json")
	require.NoError(t, os.WriteFile(out, []byte("old report\n"), 0o644))
	opened := 0
	var stdout, stderr bytes.Buffer

	var err error
	if !underFileSizeLimit(t, 64, func() { // the report of one check is a few hundred bytes
		err = runConformance(context.Background(), &stdout, &stderr, countingCPU(&opened), conformanceFlags{run: "^kernel/add$", json: out})
	}) {
		return
	}

	require.Positive(t, opened, "the suite ran")
	data, rerr := os.ReadFile(out)
	require.NoError(t, rerr)
	require.Equal(t, "old report\n", string(data), "the old file is intact")
	require.ErrorIs(t, err, syscall.EFBIG)
	require.ErrorContains(t, err, "--json "+out+": ")
	noTemporaryFiles(t, dir)
}

// Two reports never share a file or stdout, however they are named: a
// relative name of one file, a link to a file not yet made, "-" and
// /dev/stdout. Refused before the suite runs, making no file.
func TestConformanceRefusesOneOutputForBothReports(t *testing.T) {
	dir := t.TempDir()
	t.Chdir(dir)
	require.NoError(t, os.Symlink("x.json", "link.xml"))
	for _, junit := range []string{"./x.json", filepath.Join(dir, "x.json"), "link.xml", "../" + filepath.Base(dir) + "/x.json"} {
		_, _, err := execute(t, "conformance", "--run", "^kernel/add$", "--json", "x.json", "--junit", junit)
		require.ErrorContains(t, err, "each report needs a file of its own", junit)
		_, err = os.Stat("x.json")
		require.ErrorIs(t, err, os.ErrNotExist, "no report was written (--junit %s)", junit)
	}
	for _, pair := range [][2]string{{"-", "/dev/stdout"}, {"/dev/stdout", "/proc/self/fd/1"}, {"/dev/fd/1", "-"}} {
		_, _, err := execute(t, "conformance", "--run", "^kernel/add$", "--json", pair[0], "--junit", pair[1])
		require.ErrorContains(t, err, "cannot both go to stdout", "%v", pair)
	}
	// The null device keeps neither: both may go there, by any name (a
	// run that wants the exit status alone).
	require.NoError(t, os.Symlink(os.DevNull, "null-link"))
	_, _, err := execute(t, "conformance", "--run", "^kernel/add$", "--json", os.DevNull, "--junit", "null-link")
	require.NoError(t, err)
	fi, err := os.Stat(os.DevNull)
	require.NoError(t, err)
	require.NotZero(t, fi.Mode()&os.ModeCharDevice, "the null device is still one")
}

// withStdout makes the command's descriptor 1 a pipe for fn, and returns
// what fn's outputs named /dev/stdout wrote through it.
func withStdout(t *testing.T, fn func()) string {
	t.Helper()
	w, read := pipe(t)
	old := descriptors[1]
	descriptors[1] = w
	func() {
		defer func() { descriptors[1] = old; w.Close() }()
		fn()
	}()
	return read()
}

// --json /dev/stdout puts the report on stdout as --json - does, and the
// table on stderr, so stdout holds the report alone.
func TestConformanceJSONToDevStdoutMovesTheTable(t *testing.T) {
	devicesOrSkip(t)
	var out, errOut string
	var err error
	piped := withStdout(t, func() {
		out, errOut, err = execute(t, "conformance", "--run", "^kernel/add$", "--json", "/dev/stdout")
	})
	require.NoError(t, err)
	require.Empty(t, out)
	var rep struct {
		Passed int `json:"passed"`
	}
	require.NoError(t, json.Unmarshal([]byte(piped), &rep), "stdout holds one JSON report: %q", piped)
	require.Equal(t, 1, rep.Passed)
	require.Contains(t, errOut, "1 check: 1 passed")
}

// A report that cannot be written leaves the other report and the table
// to be written: the first failed write ended the command, so a --json
// report on a full disk lost the --junit one and the table of a whole run.
func TestConformanceReportThatCannotBeWrittenKeepsTheOthers(t *testing.T) {
	dir := t.TempDir()
	junitPath := filepath.Join(dir, "c.xml")
	opened := 0
	var stdout, stderr bytes.Buffer
	err := runConformance(context.Background(), &stdout, &stderr, countingCPU(&opened), conformanceFlags{run: "^kernel/add$", json: "/dev/full", junit: junitPath, timeout: conformance.DefaultTimeout})
	require.ErrorIs(t, err, syscall.ENOSPC)
	require.ErrorContains(t, err, "--json /dev/full: ")
	raw, rerr := os.ReadFile(junitPath)
	require.NoError(t, rerr, "the JUnit report is written")
	var doc junitDoc
	require.NoError(t, xml.Unmarshal(raw, &doc))
	require.Equal(t, 1, doc.Tests)
	require.Contains(t, stdout.String(), "1 check: 1 passed, 0 failed, 0 not supported", "the table is written")
}
