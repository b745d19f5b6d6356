package main

import (
	"bufio"
	"context"
	"database/sql"
	stdjson "encoding/json"
	"fmt"
	"io/fs"
	"os"
	"path/filepath"
	"strings"
	"syscall"
	"testing"
	"time"
	"unicode/utf8"

	json "github.com/goccy/go-json"
	"github.com/rivo/uniseg"
	"github.com/spf13/cobra"
	"github.com/stretchr/testify/require"

	"github.com/vkrt/vkrt/client"
	"github.com/vkrt/vkrt/device/cpu"
	"github.com/vkrt/vkrt/internal/strictjson"
	"github.com/vkrt/vkrt/memory"
	vkruntime "github.com/vkrt/vkrt/runtime"
	"github.com/vkrt/vkrt/runtime/environment"
)

// executeRecords runs `vkrt records args...` in-process with fresh flag
// values and returns what it wrote.
func executeRecords(t *testing.T, args ...string) (string, error) {
	t.Helper()
	out, errOut, err := execute(t, "records", args...)
	return out + errOut, err
}

func ptr[T any](v T) *T { return &v }

// sampleMemoryRecord is a report of a sliced pool over 1 MB pages and the
// persistent pool, scaled by n so records tell apart.
func sampleMemoryRecord(label string, n uint64) memory.Record {
	return memory.Record{Label: label, Report: memory.Report{
		Dynamic: []memory.PoolReport{{
			Kind:  memory.SlicedKind{PageSize: 1 << 20, MaxSliceSize: 1 << 20, MaxPoolSize: ptr(uint64(4 << 20))},
			Usage: memory.Usage{NumberAllocs: n, BytesInUse: 1000 * n, BytesPadding: 8 * n, BytesReserved: n << 20},
			Pages: n, PagesPeak: n + 1, PagesUnmapped: n, LargestAlloc: 1000,
		}},
		Persistent: memory.PoolReport{
			Kind:  memory.PersistentKind{},
			Usage: memory.Usage{NumberAllocs: 1, BytesInUse: 500, BytesReserved: 512},
			Pages: 1, PagesPeak: 1,
		},
	}}
}

func seedEnvironment(t *testing.T, name string) {
	t.Helper()
	env, err := environment.Open(name)
	require.NoError(t, err)
	defer env.Close()
	ctx := context.Background()
	for i, label := range []string{"model loaded", "after the dry run", "after the real run"} {
		body, err := json.Marshal(sampleMemoryRecord(label, uint64(i+1)))
		require.NoError(t, err)
		_, err = env.PutJSON(ctx, environment.KindMemory, label, body)
		require.NoError(t, err)
	}
	_, err = env.PutJSON(ctx, "note", "after the note", []byte(`{"text":"not a memory record"}`))
	require.NoError(t, err)
}

// addUndecodableRecord adds to a seeded environment a memory record whose
// reserved bytes do not fit in 64 bits, labelled "wrapped" (a decoder that
// wraps numbers would read 1 B), then a good one, "after the bad one".
func addUndecodableRecord(t *testing.T, name string) {
	t.Helper()
	env, err := environment.Open(name)
	require.NoError(t, err)
	defer env.Close()
	good, err := json.Marshal(sampleMemoryRecord("wrapped", 1))
	require.NoError(t, err)
	bad := strings.Replace(string(good), `"bytes_reserved":1048576`, `"bytes_reserved":18446744073709551617`, 1)
	require.NotEqual(t, string(good), bad)
	_, err = env.PutJSON(context.Background(), environment.KindMemory, "wrapped", []byte(bad))
	require.NoError(t, err)
	_, err = env.PutJSON(context.Background(), environment.KindMemory, "after the bad one", good)
	require.NoError(t, err)
	require.NoError(t, env.Close())
}

func TestRecordsTable(t *testing.T) {
	t.Setenv(environment.DirEnvVar, t.TempDir())
	seedEnvironment(t, "bench")

	out, err := executeRecords(t, "--env", "bench")
	require.NoError(t, err)
	lines := strings.Split(strings.TrimRight(out, "\n"), "\n")
	require.Len(t, lines, 4, out)
	require.Equal(t, []string{"ID", "TIME", "KIND", "LABEL", "POOLS", "RESERVED", "IN", "USE", "PEAK", "PAGES"}, strings.Fields(lines[0]))
	// Second record: n=2 → reserved 2 MiB + 512 B, in use 2000+500 B, peak 3+1 pages.
	require.Contains(t, lines[2], "after the dry run")
	fields := strings.Fields(lines[2])
	require.Equal(t, []string{"2", "memory"}, []string{fields[0], fields[3]})
	tail := fields[len(fields)-6:]
	require.Equal(t, []string{"2", memory.FormatBytes(2<<20 + 512), memory.FormatBytes(2500), "4"},
		[]string{tail[0], tail[1] + " " + tail[2], tail[3] + " " + tail[4], tail[5]})
	require.NotContains(t, out, "after the note", "only memory records by default")

	out, err = executeRecords(t, "--env", "bench", "--label", "after *")
	require.NoError(t, err)
	require.Equal(t, 3, strings.Count(out, "\n"), out)
	require.NotContains(t, out, "model loaded")

	out, err = executeRecords(t, "--env", "bench", "--kind", "all", "--last", "2")
	require.NoError(t, err)
	require.Contains(t, out, "after the note")
	require.Contains(t, out, "after the real run")
	require.NotContains(t, out, "after the dry run")
}

func TestRecordsJSON(t *testing.T) {
	t.Setenv(environment.DirEnvVar, t.TempDir())
	seedEnvironment(t, "bench")

	out, err := executeRecords(t, "--env", "bench", "--json")
	require.NoError(t, err)
	sc := bufio.NewScanner(strings.NewReader(out))
	var labels []string
	for sc.Scan() {
		var line struct {
			ID     int64         `json:"id"`
			Kind   string        `json:"kind"`
			Label  string        `json:"label"`
			Time   string        `json:"time"`
			Record memory.Record `json:"record"`
		}
		require.NoError(t, json.Unmarshal(sc.Bytes(), &line), sc.Text())
		require.Equal(t, environment.KindMemory, line.Kind)
		require.Equal(t, line.Label, line.Record.Label)
		require.NotEmpty(t, line.Time)
		n := uint64(len(labels) + 1)
		require.Equal(t, sampleMemoryRecord(line.Label, n), line.Record)
		labels = append(labels, line.Label)
	}
	require.Equal(t, []string{"model loaded", "after the dry run", "after the real run"}, labels)
}

func TestRecordsErrors(t *testing.T) {
	dir := t.TempDir()
	t.Setenv(environment.DirEnvVar, dir)
	_, err := executeRecords(t, "--env", "missing")
	require.ErrorIs(t, err, fs.ErrNotExist)
	require.ErrorContains(t, err, `environment "missing" does not exist`)
	names, err := environment.List()
	require.NoError(t, err)
	require.Empty(t, names, "reading must not create an environment")

	_, err = executeRecords(t, "--env", "../elsewhere")
	require.ErrorIs(t, err, environment.ErrInvalidName)

	seedEnvironment(t, "bench")
	// Bad flags are said to be the flags', before the environment opens.
	_, err = executeRecords(t, "--env", "bench", "--label", "[unclosed")
	require.EqualError(t, err, `--label: label glob "[unclosed" opens a set at byte 0 that never closes`)
	_, err = executeRecords(t, "--env", "missing", "--kind", "ALL")
	require.ErrorIs(t, err, environment.ErrInvalidRecord)
	require.EqualError(t, err, `--kind: environment: invalid record: kind "ALL" contains 'A'; kinds use lower-case letters, digits, '-', '_' and '.' ('all' lists every kind)`)
	_, err = executeRecords(t, "--env", "bench", "--label", strings.Repeat("*", 50001))
	require.EqualError(t, err, "--label: label glob is 50001 bytes long, at most 50000 allowed (a label is at most 4096)")
	_, err = executeRecords(t, "--env", "bench", "--last", "-1")
	require.EqualError(t, err, "--last -1: want a count of the newest records, or 0 for all")
	_, err = executeRecords(t, "--env", "bench", "extra-arg")
	require.Error(t, err)
}

// A --kind no record has lists nothing and succeeds (kinds are open), and
// stderr names the kinds there are: a misspelt kind looked like an empty
// environment. A kind filtered to nothing by --label is not said to be
// missing, and an environment with no records says so.
func TestRecordsSayWhichKindsThereAreWhenNoneIsOfTheKind(t *testing.T) {
	t.Setenv(environment.DirEnvVar, t.TempDir())
	seedEnvironment(t, "bench") // memory records and a note

	out, errOut, err := execute(t, "records", "--env", "bench", "--kind", "memroy")
	require.NoError(t, err)
	require.Equal(t, 1, strings.Count(out, "\n"), "the header alone: %s", out)
	require.Equal(t, `vkrt: no record of kind "memroy" in environment "bench" (its kinds: "memory", "note")`+"\n", errOut)
	_, errOut, err = execute(t, "records", "--env", "bench", "--kind", "memroy", "--json")
	require.NoError(t, err)
	require.Contains(t, errOut, `no record of kind "memroy"`)

	_, errOut, err = execute(t, "records", "--env", "bench", "--label", "nothing like it")
	require.NoError(t, err)
	require.Empty(t, errOut, "records of the kind exist; the label matched none")

	empty, err := environment.Open("empty")
	require.NoError(t, err)
	require.NoError(t, empty.Close())
	_, errOut, err = execute(t, "records", "--env", "empty")
	require.NoError(t, err)
	require.Equal(t, `vkrt: environment "empty" holds no records`+"\n", errOut)
	// Every kind asked for says so too: it listed a header and nothing.
	for _, args := range [][]string{{"--kind", "all"}, {"--kind", "all", "--json"}, {"--kind", "all", "--label", "x*"}} {
		_, errOut, err = execute(t, "records", append([]string{"--env", "empty"}, args...)...)
		require.NoError(t, err)
		require.Equal(t, `vkrt: environment "empty" holds no records`+"\n", errOut, args)
	}
	_, errOut, err = execute(t, "records", "--env", "bench", "--kind", "all", "--label", "nothing like it")
	require.NoError(t, err)
	require.Empty(t, errOut, "records exist; the label matched none")
}

// TestRecordsFromClient reads back what a client recorded (on the pure-Go
// device: the records are the same whatever the device).
func TestRecordsFromClient(t *testing.T) {
	t.Setenv(environment.DirEnvVar, t.TempDir())
	ctx := context.Background()
	dev, err := cpu.New()
	require.NoError(t, err)
	c, err := client.Open(ctx, client.WithBackend(dev), client.WithEnvironment("device"))
	require.NoError(t, err)
	buf, err := c.Empty(ctx, 3000)
	require.NoError(t, err)
	rec, err := c.RecordMemory(ctx, "one buffer")
	require.NoError(t, err)
	want := c.MemoryReport(ctx)
	require.NoError(t, buf.Free())
	require.NoError(t, c.Close())

	out, err := executeRecords(t, "--env", "device", "--json")
	require.NoError(t, err)
	var line struct {
		ID     int64         `json:"id"`
		Record memory.Record `json:"record"`
	}
	require.NoError(t, json.Unmarshal([]byte(strings.TrimSpace(out)), &line), out)
	require.Equal(t, rec.ID, line.ID)
	require.Equal(t, memory.Record{Label: "one buffer", Report: want}, line.Record)

	out, err = executeRecords(t, "--env", "device")
	require.NoError(t, err)
	require.Contains(t, out, "one buffer")
	require.Contains(t, out, memory.FormatBytes(3000))
}

func TestRecordsListsTheRestWhenOneRecordCannotBeDecoded(t *testing.T) {
	t.Setenv(environment.DirEnvVar, t.TempDir())
	seedEnvironment(t, "bench")
	addUndecodableRecord(t, "bench")

	out, err := executeRecords(t, "--env", "bench")
	require.ErrorIs(t, err, strictjson.ErrNumberDoesNotFit, "the bad record is reported, not listed as 1 B")
	require.ErrorContains(t, err, "1 of 5 records could not be decoded")
	lines := strings.Split(strings.TrimRight(out, "\n"), "\n")
	require.Len(t, lines, 6, "a header and every record, the bad one included: %s", out)
	require.Contains(t, lines[4], "wrapped")
	require.Equal(t, []string{"-", "-", "-", "-"}, strings.Fields(lines[4])[len(strings.Fields(lines[4]))-4:])
	require.Contains(t, lines[5], "after the bad one")
	require.Contains(t, lines[5], memory.FormatBytes(1<<20+512))

	// The count's noun agrees with it: "1 of 1 records" said it wrong.
	_, err = executeRecords(t, "--env", "bench", "--label", "wrapped")
	require.ErrorContains(t, err, "1 of 1 record could not be decoded (listed with '-'):")

	// --json writes every record as stored, and fails as the table does.
	out, err = executeRecords(t, "--env", "bench", "--json")
	require.ErrorIs(t, err, strictjson.ErrNumberDoesNotFit)
	require.ErrorContains(t, err, "1 of 5 records could not be decoded")
	jsonLines := strings.Split(strings.TrimRight(out, "\n"), "\n")
	require.Len(t, jsonLines, 5, "%s", out)
	require.Contains(t, jsonLines[3], `"label":"wrapped"`)
	require.Contains(t, jsonLines[3], `"bytes_reserved":18446744073709551617`, "the bad record as stored")
}

// labelledRecordsTable is `vkrt records` over an environment of one memory
// record per label, and its lines: the header and one per record.
func labelledRecordsTable(t *testing.T, labels ...string) (string, []string) {
	t.Helper()
	env, err := environment.Open("labels")
	require.NoError(t, err)
	for _, label := range labels {
		body, err := json.Marshal(sampleMemoryRecord(label, 1))
		require.NoError(t, err)
		_, err = env.PutJSON(context.Background(), environment.KindMemory, label, body)
		require.NoError(t, err)
	}
	require.NoError(t, env.Close())
	out, err := executeRecords(t, "--env", "labels")
	require.NoError(t, err)
	lines := strings.Split(strings.TrimRight(out, "\n"), "\n")
	require.Len(t, lines, len(labels)+1, "one line per record: %s", out)
	return out, lines
}

func TestRecordsEscapesControlCharactersInLabels(t *testing.T) {
	t.Setenv(environment.DirEnvVar, t.TempDir())
	out, lines := labelledRecordsTable(t, "two\nlines", "a\ttab", "plain label", "bell\a\u2028")
	require.NotContains(t, out, "\t")
	require.Contains(t, lines[1], `"two\nlines"`)
	require.Contains(t, lines[2], `"a\ttab"`)
	require.Contains(t, lines[3], "plain label")
	require.NotContains(t, lines[3], `"plain label"`)
	require.Contains(t, lines[4], `"bell\a\u2028"`)
	for _, l := range lines[1:] {
		require.Len(t, strings.Fields(l)[len(strings.Fields(l))-6:], 6)
		require.Equal(t, "2", strings.Fields(l)[len(strings.Fields(l))-6], "the columns after the label stay in place: %q", l)
	}
}

// Two labels never show as one cell: a label of the six characters
// "a\nb" (quotes included) showed as the label a, newline, b did, and a
// right-to-left override was shown as it is.
func TestRecordsLabelsShowDistinct(t *testing.T) {
	t.Setenv(environment.DirEnvVar, t.TempDir())
	out, lines := labelledRecordsTable(t, "a\nb", `"a\nb"`, "x\u202ey", "nb\u00a0sp")
	cells := map[string]bool{}
	for _, l := range lines[1:] {
		cells[strings.Fields(l)[4]] = true
	}
	require.Len(t, cells, 4, "four labels, four cells:\n%s", out)
	require.NotContains(t, out, "\u202e", "the override is escaped")
	require.Contains(t, out, `"x\u202ey"`)
	require.Contains(t, out, `"nb\u00a0sp"`)
}

// The table gives a record's time in UTC, as --json does: it gave local
// time with no zone.
func TestRecordsTableAndJSONAgreeOnTime(t *testing.T) {
	t.Setenv(environment.DirEnvVar, t.TempDir())
	saved := time.Local
	time.Local = time.FixedZone("UTC+5", 5*3600)
	defer func() { time.Local = saved }()
	seedEnvironment(t, "tz")
	table, err := executeRecords(t, "--env", "tz", "--last", "1", "--kind", "all")
	require.NoError(t, err)
	out, err := executeRecords(t, "--env", "tz", "--last", "1", "--kind", "all", "--json")
	require.NoError(t, err)
	var line struct {
		Time time.Time `json:"time"`
	}
	require.NoError(t, json.Unmarshal([]byte(strings.TrimSpace(out)), &line))
	require.Contains(t, table, line.Time.UTC().Format("2006-01-02 15:04:05Z"), "the table's time is the JSON's (%s):\n%s", line.Time, table)
}

func TestRecordsOnAnEmptyFileWritesNothing(t *testing.T) {
	dir := t.TempDir()
	t.Setenv(environment.DirEnvVar, dir)
	path := filepath.Join(dir, "empty.sqlite")
	require.NoError(t, os.WriteFile(path, nil, 0o644))
	out, errOut, err := execute(t, "records", "--env", "empty")
	require.NoError(t, err)
	require.Equal(t, 1, strings.Count(out, "\n"), "only the header: %s", out)
	require.Equal(t, `vkrt: environment "empty" holds no records`+"\n", errOut)
	info, err := os.Stat(path)
	require.NoError(t, err)
	require.Zero(t, info.Size())
	entries, err := os.ReadDir(dir)
	require.NoError(t, err)
	require.Len(t, entries, 1, "no -wal or -shm next to it")
}

func TestRecordsOnAFIFOFailsWithoutHanging(t *testing.T) {
	dir := t.TempDir()
	t.Setenv(environment.DirEnvVar, dir)
	require.NoError(t, syscall.Mkfifo(filepath.Join(dir, "pipe.sqlite"), 0o644))
	done := make(chan error, 1)
	go func() {
		_, err := executeRecords(t, "--env", "pipe")
		done <- err
	}()
	select {
	case err := <-done:
		require.ErrorIs(t, err, environment.ErrNotEnvironment)
	case <-time.After(10 * time.Second):
		t.Fatal("vkrt records hangs on a FIFO")
	}
}

func TestRecordsReadsADirectoryItCannotWrite(t *testing.T) {
	dir := filepath.Join(t.TempDir(), "shared")
	t.Setenv(environment.DirEnvVar, dir)
	seedEnvironment(t, "bench")
	require.NoError(t, os.Chmod(filepath.Join(dir, "bench.sqlite"), 0o444))
	require.NoError(t, os.Chmod(dir, 0o555))
	t.Cleanup(func() { os.Chmod(dir, 0o755) })
	out, err := executeRecords(t, "--env", "bench")
	require.NoError(t, err)
	require.Contains(t, out, "after the real run")
	entries, err := os.ReadDir(dir)
	require.NoError(t, err)
	require.Len(t, entries, 1, "reading leaves no -wal or -shm behind")
}

func TestErrorLineHasOnePrefix(t *testing.T) {
	require.Equal(t, "vkrt: handle not found", errorLine(vkruntime.ErrNotFound))
	// A sentinel of the runtime's, which starts with "vkrt: " of its own,
	// wrapped under words of the command's: the line says "vkrt:" once.
	require.Equal(t, "vkrt: replay: handle not found", errorLine(fmt.Errorf("replay: %w", vkruntime.ErrNotFound)))
	require.Equal(t, "vkrt: replay: huge line 1: 18446744073709551615 B: buffer too big for every pool: asked 18446744073709551615 B",
		errorLine(fmt.Errorf("replay: huge line 1: 18446744073709551615 B: %w", fmt.Errorf("%w: asked 18446744073709551615 B", vkruntime.ErrBufferTooBig))))
	// Only the wrapped error's text loses its prefix: a name before it
	// that holds the same words is shown as it is.
	named := "a: vkrt: handle not found"
	require.Equal(t, "vkrt: "+named+": handle not found", errorLine(fmt.Errorf("%s: %w", named, vkruntime.ErrNotFound)))
	_, err := executeRecords(t, "--env", "../elsewhere")
	require.Error(t, err)
	require.NotContains(t, errorLine(err), "vkrt: vkrt:")
}

// addOverflowingRecord adds to a seeded environment a memory record,
// "overflowing", each of whose numbers fits but whose two dynamic pools'
// reserved bytes sum past 2^64 (wrapped, the total would read 0 B), then a
// good one, "after the overflow".
func addOverflowingRecord(t *testing.T, name string) {
	t.Helper()
	env, err := environment.Open(name)
	require.NoError(t, err)
	defer env.Close()
	rec := sampleMemoryRecord("overflowing", 1)
	big := rec.Report.Dynamic[0]
	big.Usage = memory.Usage{NumberAllocs: 1, BytesInUse: 1, BytesReserved: 1 << 63}
	rec.Report.Dynamic = []memory.PoolReport{big, big}
	rec.Report.Persistent.Usage = memory.Usage{}
	for _, r := range []memory.Record{rec, sampleMemoryRecord("after the overflow", 1)} {
		body, err := json.Marshal(r)
		require.NoError(t, err)
		_, err = env.PutJSON(context.Background(), environment.KindMemory, r.Label, body)
		require.NoError(t, err)
	}
}

func TestRecordsListsARecordWhoseTotalsOverflowWithoutFigures(t *testing.T) {
	t.Setenv(environment.DirEnvVar, t.TempDir())
	seedEnvironment(t, "bench")
	addOverflowingRecord(t, "bench")

	out, err := executeRecords(t, "--env", "bench")
	require.ErrorIs(t, err, errTotalsOverflow)
	require.ErrorContains(t, err, "1 of 5 records could not be decoded")
	require.ErrorContains(t, err, "record 5 ")
	require.ErrorContains(t, err, "bytes_reserved")
	lines := strings.Split(strings.TrimRight(out, "\n"), "\n")
	require.Len(t, lines, 6, "a header and every record, the bad one included: %s", out)
	require.Contains(t, lines[4], "overflowing")
	require.Equal(t, []string{"-", "-", "-", "-"}, strings.Fields(lines[4])[len(strings.Fields(lines[4]))-4:],
		"no wrapped total is shown: %s", lines[4])
	require.Contains(t, lines[5], "after the overflow")
	require.Contains(t, lines[5], memory.FormatBytes(1<<20+512))
}

// A label that is not UTF-8 (written by another program: Put refuses one)
// is quoted too: its bytes went to the terminal as they are, where "a\xffb"
// shows as the label a, U+FFFD, b does.
func TestRecordsQuotesALabelThatIsNotUTF8(t *testing.T) {
	dir := t.TempDir()
	t.Setenv(environment.DirEnvVar, dir)
	out, _ := labelledRecordsTable(t, "a\ufffdb")
	require.Contains(t, out, "a\ufffdb")
	raw, err := sql.Open("sqlite", "file:"+filepath.Join(dir, "labels.sqlite"))
	require.NoError(t, err)
	defer raw.Close()
	body, err := json.Marshal(sampleMemoryRecord("a\xffb", 1))
	require.NoError(t, err)
	_, err = raw.Exec("INSERT INTO records (kind, label, time_ns, body) VALUES ('memory', CAST(? AS TEXT), 1, ?)", []byte("a\xffb"), string(body))
	require.NoError(t, err)
	out, err = executeRecords(t, "--env", "labels")
	require.NoError(t, err)
	lines := strings.Split(strings.TrimRight(out, "\n"), "\n")
	require.Len(t, lines, 3, out)
	require.Contains(t, lines[2], `"a\xffb"`)
	require.NotContains(t, out, "a\xffb")
}

// A record whose stored time is not a number (another program's row) is
// listed with no time and reported as undecodable, and the records around
// it are listed as they are: the whole listing failed on it before.
func TestRecordsListsARecordWhoseTimeIsNotANumber(t *testing.T) {
	dir := t.TempDir()
	t.Setenv(environment.DirEnvVar, dir)
	seedEnvironment(t, "bench")
	raw, err := sql.Open("sqlite", "file:"+filepath.Join(dir, "bench.sqlite"))
	require.NoError(t, err)
	body, err := json.Marshal(sampleMemoryRecord("foreign", 1))
	require.NoError(t, err)
	_, err = raw.Exec("INSERT INTO records (kind, label, time_ns, body) VALUES ('memory', 'foreign', 'abc', ?)", string(body))
	require.NoError(t, err)
	require.NoError(t, raw.Close())

	out, err := executeRecords(t, "--env", "bench")
	require.ErrorIs(t, err, errRecordTime)
	require.ErrorContains(t, err, "1 of 4 records could not be decoded")
	lines := strings.Split(strings.TrimRight(out, "\n"), "\n")
	require.Len(t, lines, 5, "a header and every record, the foreign one included: %s", out)
	require.Contains(t, lines[4], "foreign")
	require.Equal(t, "-", strings.Fields(lines[4])[1], "no time is made up: %s", lines[4])
	require.Contains(t, lines[1], "model loaded")

	out, err = executeRecords(t, "--env", "bench", "--json")
	require.ErrorIs(t, err, errRecordTime)
	var foreign map[string]any
	require.NoError(t, json.Unmarshal([]byte(strings.Split(out, "\n")[3]), &foreign))
	require.Equal(t, "foreign", foreign["label"])
	require.Contains(t, foreign, "time")
	require.Nil(t, foreign["time"])
}

// A label glob whose range has its ends reversed is refused before the
// environment is opened: GLOB matched nothing with it, and records listed
// an empty table, exit 0.
func TestRecordsRefusesAReversedRangeInTheLabelGlob(t *testing.T) {
	t.Setenv(environment.DirEnvVar, t.TempDir())
	seedEnvironment(t, "bench")
	_, err := executeRecords(t, "--env", "bench", "--label", "[z-a]*")
	require.EqualError(t, err, `--label: label glob "[z-a]*" has a set at byte 0 whose range z-a matches nothing (its ends are reversed: a-z)`)
	out, err := executeRecords(t, "--env", "bench", "--label", "[a-z]*")
	require.NoError(t, err)
	require.Contains(t, out, "model loaded")
}

// insertForeignRows writes rows into an environment's records table as
// another program could, its check that a body is JSON taken off first:
// each row's kind, label and body, in order, with a time of 1.
func insertForeignRows(t *testing.T, name string, rows ...[3]string) {
	t.Helper()
	path, err := environment.Path(name)
	require.NoError(t, err)
	db, err := sql.Open("sqlite", "file:"+path)
	require.NoError(t, err)
	defer db.Close()
	db.SetMaxOpenConns(1)
	for _, stmt := range []string{
		"PRAGMA writable_schema = 1",
		`UPDATE sqlite_schema SET sql = replace(sql, 'CHECK (json_valid(body))', '') WHERE name = 'records'`,
		"PRAGMA writable_schema = 0",
	} {
		_, err := db.Exec(stmt)
		require.NoError(t, err, stmt)
	}
	require.NoError(t, db.Close())
	db, err = sql.Open("sqlite", "file:"+path)
	require.NoError(t, err)
	for _, r := range rows {
		_, err := db.Exec("INSERT INTO records (kind, label, time_ns, body) VALUES (?, ?, 1, CAST(? AS TEXT))", r[0], r[1], []byte(r[2]))
		require.NoError(t, err)
	}
	require.NoError(t, db.Close())
}

// jsonLines decodes each line of records --json with encoding/json, which
// refuses a line that is not UTF-8 as goccy's decoder does not.
func jsonLines(t *testing.T, out string) []map[string]any {
	t.Helper()
	var lines []map[string]any
	for _, l := range strings.Split(strings.TrimRight(out, "\n"), "\n") {
		require.True(t, utf8.ValidString(l), "%q", l)
		var line map[string]any
		require.NoError(t, stdjson.Unmarshal([]byte(l), &line), "%q", l)
		lines = append(lines, line)
	}
	return lines
}

// A record whose stored body is not JSON (a damaged page, another
// program's row) gets its line in --json, the body as text, and the records
// after it get theirs: the encoder's error on the raw body ended the
// listing at it. The command fails, naming it, as the table does.
func TestRecordsJSONListsEveryRecordWhenABodyIsNotJSON(t *testing.T) {
	t.Setenv(environment.DirEnvVar, t.TempDir())
	seedEnvironment(t, "bench")
	good, err := json.Marshal(sampleMemoryRecord("after the bad ones", 1))
	require.NoError(t, err)
	insertForeignRows(t, "bench",
		[3]string{"memory", "cut", `{"label":"cut","report":{"dyna` + "\x00\x01"},
		[3]string{"note", "not json", "plain words"},
		[3]string{"memory", "after the bad ones", string(good)})

	out, _, err := execute(t, "records", "--env", "bench", "--kind", "all", "--json")
	require.ErrorContains(t, err, "2 of 7 records could not be decoded")
	require.ErrorContains(t, err, "record 6 (kind \"note\")")
	lines := jsonLines(t, out)
	require.Len(t, lines, 7, out)
	for _, i := range []int{4, 5} {
		require.Nil(t, lines[i]["record"], "%v", lines[i])
		require.NotEmpty(t, lines[i]["error"], "%v", lines[i])
	}
	require.Equal(t, `{"label":"cut","report":{"dyna`+"\x00\x01", lines[4]["record_text"])
	require.Equal(t, "plain words", lines[5]["record_text"])
	require.Contains(t, lines[5]["error"], "not valid JSON")
	require.Equal(t, "after the bad ones", lines[6]["label"])
	require.NotNil(t, lines[6]["record"])
	for _, i := range []int{0, 1, 2, 3, 6} {
		require.NotContains(t, lines[i], "error")
		require.NotContains(t, lines[i], "record_text")
	}

	// The table lists them too, and fails the same way.
	out, err = executeRecords(t, "--env", "bench", "--kind", "all")
	require.ErrorContains(t, err, "2 of 7 records could not be decoded")
	table := strings.Split(strings.TrimRight(out, "\n"), "\n")
	require.Contains(t, table[5], "cut")
	require.Contains(t, table[7], "after the bad ones")
}

// A body another program stored with a byte that is not UTF-8 is no JSON a
// reader takes: --json writes it as text, U+FFFD for each byte, and reports
// it, where it wrote the byte as it was into the line.
func TestRecordsJSONNeverWritesABodyThatIsNotUTF8(t *testing.T) {
	t.Setenv(environment.DirEnvVar, t.TempDir())
	seedEnvironment(t, "bench")
	body, err := json.Marshal(sampleMemoryRecord("a\ufffdb", 1))
	require.NoError(t, err)
	bad := strings.Replace(string(body), "\ufffd", "\xff", 1)
	require.NotEqual(t, string(body), bad)
	insertForeignRows(t, "bench",
		[3]string{"memory", "latin-1", bad},
		[3]string{"note", "latin-1 note", "{\"s\":\"caf\xe9\xff\xfe\"}"})

	out, err := executeRecords(t, "--env", "bench", "--kind", "all", "--json")
	require.ErrorContains(t, err, "2 of 6 records could not be decoded")
	require.ErrorContains(t, err, "not valid UTF-8")
	lines := jsonLines(t, strings.SplitN(out, "vkrt:", 2)[0])
	require.Len(t, lines, 6)
	require.Nil(t, lines[4]["record"])
	require.Equal(t, string(body), lines[4]["record_text"])
	require.Equal(t, "{\"s\":\"caf\ufffd\ufffd\ufffd\"}", lines[5]["record_text"], "each byte that is not UTF-8 its own U+FFFD")
}

// A kind another program stored with a newline or a tab is shown escaped
// in the table, as a label is, and quoted once in the hint that names the
// kinds there are: shown raw it split the row, and the hint quoted it
// twice.
func TestRecordsEscapesControlCharactersInKinds(t *testing.T) {
	t.Setenv(environment.DirEnvVar, t.TempDir())
	seedEnvironment(t, "bench")
	insertForeignRows(t, "bench", [3]string{"two\nlines", "foreign", `{}`}, [3]string{"a\tb", "tabbed", `{}`})

	out, err := executeRecords(t, "--env", "bench", "--kind", "all")
	require.NoError(t, err)
	lines := strings.Split(strings.TrimRight(out, "\n"), "\n")
	require.Len(t, lines, 7, "a header and a row a record: %s", out)
	require.NotContains(t, out, "\t")
	require.Equal(t, []string{"5", "1970-01-01", "00:00:00Z", `"two\nlines"`, "foreign"}, strings.Fields(lines[5])[:5])
	require.Equal(t, []string{"6", "1970-01-01", "00:00:00Z", `"a\tb"`, "tabbed"}, strings.Fields(lines[6])[:5])

	_, errOut, err := execute(t, "records", "--env", "bench", "--kind", "nope")
	require.NoError(t, err)
	require.Equal(t, `vkrt: no record of kind "nope" in environment "bench" (its kinds: "a\tb", "memory", "note", "two\nlines")`+"\n", errOut)
}

// A label of wide characters (CJK, emoji: two terminal columns each)
// leaves the columns after it in line: counted one column a character,
// as text/tabwriter counts them, it pushed the rest of its row right.
func TestRecordsAlignsColumnsPastWideLabels(t *testing.T) {
	t.Setenv(environment.DirEnvVar, t.TempDir())
	out, lines := labelledRecordsTable(t, "训练步骤", "plain", "🚀 launch")
	pools := strings.Index(lines[0], "POOLS")
	require.Positive(t, pools)
	for _, l := range lines[1:] {
		i := strings.Index(l, " 2 ") + 1 // the record's one pool and the persistent one
		require.Positive(t, i, "%q", l)
		require.Equal(t, uniseg.StringWidth(lines[0][:pools]), uniseg.StringWidth(l[:i]), "POOLS starts in one terminal column on every line:\n%s", out)
	}
}

// --last 0 and an empty --label list every record, and their help says so: it
// read "only the newest N records", as though 0 listed none.
func TestRecordsLastZeroAndAnEmptyLabelListEveryRecord(t *testing.T) {
	t.Setenv(environment.DirEnvVar, t.TempDir())
	seedEnvironment(t, "bench")

	all, err := executeRecords(t, "--env", "bench")
	require.NoError(t, err)
	out, err := executeRecords(t, "--env", "bench", "--last", "0", "--label", "")
	require.NoError(t, err)
	require.Equal(t, all, out)
	require.Equal(t, 4, strings.Count(out, "\n"), out)

	var records *cobra.Command
	for _, c := range rootCmd.Commands() {
		if c.Name() == "records" {
			records = c
		}
	}
	require.NotNil(t, records)
	require.Contains(t, records.Flags().Lookup("last").Usage, "(0: all)")
	require.Contains(t, records.Flags().Lookup("label").Usage, "'': every label")
}

// Records that could not be decoded are reported on stderr as one error
// whose reasons are a line each indented under it: the second and later
// were lines of their own without the "vkrt: " prefix every error line has.
func TestRecordsUndecodableAreOneErrorWithAReasonALine(t *testing.T) {
	t.Setenv(environment.DirEnvVar, t.TempDir())
	seedEnvironment(t, "bench")
	insertForeignRows(t, "bench",
		[3]string{"memory", "cut", `{"label":"cut"`},
		[3]string{"note", "not json", "plain words"},
		[3]string{"memory", "empty", `{}`})
	_, err := executeRecords(t, "--env", "bench", "--kind", "all")
	require.Error(t, err)
	lines := strings.Split(errorLine(err), "\n")
	require.Len(t, lines, 4, "%s", errorLine(err))
	require.True(t, strings.HasPrefix(lines[0], "vkrt: 3 of 7 records could not be decoded (listed with '-'):"), lines[0])
	for _, l := range lines[1:] {
		require.True(t, strings.HasPrefix(l, "  "), "%q is indented under the error", l)
	}
	require.Contains(t, lines[2], `record 6 (kind "note")`)
}

// A label glob is SQLite's GLOB, which has no escape character: a
// backslash where a shell's glob or path.Match escapes with it (before
// '*', '?', '[', ']' or a backslash, or ending the glob) is refused before
// the environment opens, saying how to match the character itself. It
// matched the backslash: "a\*" listed "a\b" and not "a*", and "\" was
// taken where path.Match calls it malformed.
func TestRecordsLabelGlobHasNoEscape(t *testing.T) {
	t.Setenv(environment.DirEnvVar, t.TempDir())
	env, err := environment.Open("bench")
	require.NoError(t, err)
	for i, label := range []string{"a*", `a\b`, `\`} {
		body, err := json.Marshal(sampleMemoryRecord(label, uint64(i+1)))
		require.NoError(t, err)
		_, err = env.PutJSON(context.Background(), environment.KindMemory, label, body)
		require.NoError(t, err)
	}
	require.NoError(t, env.Close())
	const noEscape = "a label glob has no escape character (it is SQLite's GLOB)"
	for glob, want := range map[string]string{
		`a\*`:  `--label a\*: ` + noEscape + `: the backslash at byte 1 would match a backslash, not escape the '*' after it; write [*] to match a '*' itself, and [\] for a backslash`,
		`\?`:   `the '?' after it; write [?] to match a '?' itself`,
		`x\[`:  `write [[] to match a '[' itself`,
		`x\]`:  `write ] to match a ']' itself`,
		`\`:    `--label \: ` + noEscape + `: the backslash ending it would match a backslash, where path.Match calls it malformed; write [\] to match a backslash`,
		`a\\*`: `the backslashes at byte 1 match two backslashes, not one; write [\] to match a backslash`,
	} {
		out, err := executeRecords(t, "--env", "bench", "--label", glob)
		require.ErrorContains(t, err, want, glob)
		require.Empty(t, out, glob)
		// Before the environment opens, as the glob's other mistakes are.
		_, err = executeRecords(t, "--env", "no such environment", "--label", glob)
		require.ErrorContains(t, err, want, glob)
	}
	// What the refusals say to write matches the character itself; a
	// backslash before another character, or in a set, is taken as it is.
	for glob, want := range map[string]string{`a[*]`: "a*", `[\]`: `\`, `a\b`: `a\b`, `a[\]?`: `a\b`} {
		out, err := executeRecords(t, "--env", "bench", "--json", "--label", glob)
		require.NoError(t, err, glob)
		var line recordLine
		require.Equal(t, 1, strings.Count(out, "\n"), "%s: %s", glob, out)
		require.NoError(t, json.Unmarshal([]byte(out), &line))
		require.Equal(t, want, line.Label, glob)
	}
}

// Of many records that could not be decoded, stderr names the first 100
// and says how many more, and the error keeps those 100 only: every one
// was a line of its own and held in memory.
func TestRecordsNamesTheFirstHundredUndecodable(t *testing.T) {
	t.Setenv(environment.DirEnvVar, t.TempDir())
	seedEnvironment(t, "bench")
	rows := make([][3]string, 150)
	for i := range rows {
		rows[i] = [3]string{"memory", fmt.Sprintf("not json %d", i), "plain words"}
	}
	insertForeignRows(t, "bench", rows...)
	_, err := executeRecords(t, "--env", "bench", "--kind", "all")
	require.Error(t, err)
	lines := strings.Split(errorLine(err), "\n")
	require.Len(t, lines, 1+100+1, "%s", errorLine(err))
	require.True(t, strings.HasPrefix(lines[0], "vkrt: 150 of 154 records could not be decoded (listed with '-'):"), lines[0])
	require.Contains(t, lines[100], "record 104")
	require.Equal(t, "  and 50 more records, not named here", lines[101])
	var ue *undecodableError
	require.ErrorAs(t, err, &ue)
	require.Len(t, ue.Entries, 100)
	require.Len(t, ue.Errs, 100)
	require.Equal(t, 150, ue.Count)

	// The report's page counts them all, and names the first 100.
	dir := t.TempDir()
	page := filepath.Join(dir, "r.html")
	_, _, err = execute(t, "report", "--env", "bench", "--html", page)
	require.Error(t, err)
	require.Len(t, strings.Split(errorLine(err), "\n"), 102)
	html, rerr := os.ReadFile(page)
	require.NoError(t, rerr)
	require.Contains(t, string(html), "150 records could not be decoded")
}
