package environment

import (
	"context"
	"database/sql"
	"errors"
	"fmt"
	"io/fs"
	"os"
	"path/filepath"
	"runtime"
	"slices"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
	"modernc.org/sqlite"

	"github.com/vkrt/vkrt/internal/strictjson"
)

// sampleRecord is a record kind of the tests' own.
type sampleRecord struct {
	Seq  int    `json:"seq"`
	Note string `json:"note"`
}

func (sampleRecord) Kind() string { return "sample" }

// otherRecord is a second kind, to check kinds stay apart.
type otherRecord struct {
	Value float64 `json:"value"`
}

func (otherRecord) Kind() string { return "other" }

// labelledRecord encodes itself the way memory records do: the label
// inside the body, next to the report.
type labelledRecord struct {
	Label  string
	Report map[string]int
}

func (labelledRecord) Kind() string { return KindMemory }

func (r labelledRecord) MarshalJSON() ([]byte, error) {
	return []byte(fmt.Sprintf(`{"label":%q,"report":{"pages":%d}}`, r.Label, r.Report["pages"])), nil
}

func openTemp(t *testing.T, name string, opts ...Option) *Env {
	t.Helper()
	env, err := Open(name, append([]Option{WithDir(t.TempDir())}, opts...)...)
	require.NoError(t, err)
	t.Cleanup(func() { require.NoError(t, env.Close()) })
	return env
}

func TestOpenPutReopen(t *testing.T) {
	dir := t.TempDir()
	ctx := context.Background()
	env, err := Open("bench", WithDir(dir))
	require.NoError(t, err)
	require.Equal(t, filepath.Join(dir, "bench.sqlite"), env.Path())
	require.Equal(t, "bench", env.Name())
	put, err := env.Put(ctx, "model loaded", sampleRecord{Seq: 7, Note: "weights"})
	require.NoError(t, err)
	require.Positive(t, put.ID)
	require.Equal(t, "sample", put.Kind)
	require.NoError(t, env.Close())

	env, err = Open("bench", WithDir(dir), WithoutCreate())
	require.NoError(t, err)
	defer env.Close()
	got, err := env.Get(ctx, put.ID)
	require.NoError(t, err)
	require.Equal(t, put.Label, got.Label)
	require.Equal(t, put.Time.UnixNano(), got.Time.UnixNano())
	require.JSONEq(t, `{"seq":7,"note":"weights"}`, string(got.Body))
	rec, err := Decode[sampleRecord](got)
	require.NoError(t, err)
	require.Equal(t, sampleRecord{Seq: 7, Note: "weights"}, rec)

	_, err = env.Get(ctx, put.ID+100)
	require.ErrorIs(t, err, ErrNoRecord)

	names, err := List(WithDir(dir))
	require.NoError(t, err)
	require.Equal(t, []string{"bench"}, names)
}

// Kinds lists the kinds stored, sorted, each once, for a writer and for a
// read-only reader, and none for an environment with no records (a
// read-only one over an empty file too).
func TestKindsAreTheKindsStored(t *testing.T) {
	dir := t.TempDir()
	ctx := context.Background()
	env, err := Open("bench", WithDir(dir))
	require.NoError(t, err)
	defer env.Close()
	kinds, err := env.Kinds(ctx)
	require.NoError(t, err)
	require.Empty(t, kinds)
	for _, k := range []string{"sample", "memory", "sample", "a-note"} {
		_, err := env.PutJSON(ctx, k, "label", []byte(`{}`))
		require.NoError(t, err)
	}
	want := []string{"a-note", "memory", "sample"}
	kinds, err = env.Kinds(ctx)
	require.NoError(t, err)
	require.Equal(t, want, kinds)

	reader, err := Open("bench", WithDir(dir), ReadOnly())
	require.NoError(t, err)
	defer reader.Close()
	kinds, err = reader.Kinds(ctx)
	require.NoError(t, err)
	require.Equal(t, want, kinds)

	require.NoError(t, os.WriteFile(filepath.Join(dir, "empty.sqlite"), nil, 0o644))
	empty, err := Open("empty", WithDir(dir), ReadOnly())
	require.NoError(t, err)
	defer empty.Close()
	kinds, err = empty.Kinds(ctx)
	require.NoError(t, err)
	require.Empty(t, kinds)
	require.NoError(t, empty.Close())
	_, err = empty.Kinds(ctx)
	require.Error(t, err, "a closed environment")
}

// A data directory that is a file, or a path through one, is named as such,
// with where it was set, matching fs.ErrInvalid: reading, writing and
// listing said only "stat …/default.sqlite: not a directory".
func TestADataDirectoryThatIsAFileIsNamed(t *testing.T) {
	file := filepath.Join(t.TempDir(), "file")
	require.NoError(t, os.WriteFile(file, nil, 0o644))
	t.Setenv(DirEnvVar, file)
	want := "environment: VKRT_ENV_DIR names " + file + ", a file, not a directory: invalid argument"
	_, err := Open("default", ReadOnly())
	require.ErrorIs(t, err, fs.ErrInvalid)
	require.EqualError(t, err, want)
	_, err = Open("default")
	require.ErrorIs(t, err, fs.ErrInvalid)
	require.EqualError(t, err, want)
	_, err = List()
	require.ErrorIs(t, err, fs.ErrInvalid)
	require.EqualError(t, err, want)

	t.Setenv(DirEnvVar, filepath.Join(file, "sub"))
	_, err = Open("default")
	require.ErrorIs(t, err, fs.ErrInvalid)
	require.EqualError(t, err, "environment: VKRT_ENV_DIR names "+filepath.Join(file, "sub")+", a path through a file, not a directory: invalid argument")

	_, err = Open("default", WithDir(file))
	require.ErrorIs(t, err, fs.ErrInvalid)
	require.EqualError(t, err, "environment: the data directory "+file+" is a file, not a directory: invalid argument")
	info, err := os.Stat(file)
	require.NoError(t, err)
	require.Zero(t, info.Size(), "the file is left as it was")
}

func TestDataDirectoryResolution(t *testing.T) {
	home, xdg, moved, opt := t.TempDir(), t.TempDir(), t.TempDir(), t.TempDir()
	t.Setenv("HOME", home)
	t.Setenv("XDG_DATA_HOME", "")
	t.Setenv(DirEnvVar, "")

	p, err := Path("a")
	require.NoError(t, err)
	require.Equal(t, filepath.Join(home, ".local", "share", "vkrt", "env", "a.sqlite"), p)

	t.Setenv("XDG_DATA_HOME", xdg)
	p, err = Path("a")
	require.NoError(t, err)
	require.Equal(t, filepath.Join(xdg, "vkrt", "env", "a.sqlite"), p)

	// A relative XDG_DATA_HOME is ignored, as the XDG specification says:
	// it named another directory from each working directory.
	t.Setenv("XDG_DATA_HOME", "relative/data")
	p, err = Path("a")
	require.NoError(t, err)
	require.Equal(t, filepath.Join(home, ".local", "share", "vkrt", "env", "a.sqlite"), p)
	// With no home either, the error says why the variable was not used.
	t.Setenv("HOME", "")
	_, err = Path("a")
	require.ErrorContains(t, err, `set VKRT_ENV_DIR or an absolute XDG_DATA_HOME: XDG_DATA_HOME "relative/data" is ignored, not being absolute`)
	t.Setenv("HOME", home)
	t.Setenv("XDG_DATA_HOME", xdg)

	t.Setenv(DirEnvVar, moved)
	p, err = Path("a")
	require.NoError(t, err)
	require.Equal(t, filepath.Join(moved, "a.sqlite"), p)

	// An option beats every variable, and options compose without sharing
	// state: the same slice opens where it says each time.
	base := []Option{WithDir(opt)}
	env, err := Open("a", append(base, WithDir(moved))...)
	require.NoError(t, err)
	require.Equal(t, filepath.Join(moved, "a.sqlite"), env.Path())
	require.NoError(t, env.Close())
	env, err = Open("a", base...)
	require.NoError(t, err)
	require.Equal(t, filepath.Join(opt, "a.sqlite"), env.Path())
	require.NoError(t, env.Close())
}

func TestNamesAreValidated(t *testing.T) {
	dir := t.TempDir()
	for _, name := range []string{"", "a/b", `a\b`, "../up", ".hidden", "sp ace", "tab\t", "é", string(make([]byte, 200))} {
		_, err := Open(name, WithDir(dir))
		require.ErrorIs(t, err, ErrInvalidName, "name %q", name)
		require.Contains(t, err.Error(), "environment: invalid name")
	}
	_, err := Open("a/b", WithDir(dir))
	require.ErrorContains(t, err, "path separator")
	// vkrt run --env a/b told its user to "use WithDir", an option the
	// command line does not have.
	require.ErrorContains(t, err, "set "+DirEnvVar+", or pass WithDir in Go")
	entries, err := os.ReadDir(dir)
	require.NoError(t, err)
	require.Empty(t, entries, "a refused name must create nothing")

	for _, name := range []string{"default", "gpt2-train_2026.11", "A1"} {
		require.NoError(t, ValidateName(name))
	}
}

func TestWithoutCreateRefusesMissing(t *testing.T) {
	dir := filepath.Join(t.TempDir(), "not-yet")
	_, err := Open("absent", WithDir(dir), WithoutCreate())
	require.ErrorIs(t, err, fs.ErrNotExist)
	require.ErrorContains(t, err, `environment "absent" does not exist`)
	_, statErr := os.Stat(dir)
	require.ErrorIs(t, statErr, fs.ErrNotExist, "a refused open must not create the directory")
}

func TestRefusesFilesOfOthers(t *testing.T) {
	dir := t.TempDir()
	write := func(name string, data []byte) string {
		p := filepath.Join(dir, name+".sqlite")
		require.NoError(t, os.WriteFile(p, data, 0o644))
		return p
	}
	withSQL := func(name string, stmts ...string) string {
		p := filepath.Join(dir, name+".sqlite")
		db, err := sql.Open("sqlite", p)
		require.NoError(t, err)
		for _, s := range stmts {
			_, err := db.Exec(s)
			require.NoError(t, err)
		}
		require.NoError(t, db.Close())
		return p
	}
	cases := map[string]string{
		"text":    write("text", []byte("name,value\nbert,12\n")),
		"short":   write("short", []byte("SQL")),
		"tables":  withSQL("tables", "CREATE TABLE users (id INTEGER)", "INSERT INTO users VALUES (1)"),
		"foreign": withSQL("foreign", "PRAGMA application_id = 1234"),
	}
	for name, path := range cases {
		before, err := os.ReadFile(path)
		require.NoError(t, err)
		_, err = Open(name, WithDir(dir))
		require.ErrorIs(t, err, ErrNotEnvironment, name)
		require.ErrorContains(t, err, path)
		after, err := os.ReadFile(path)
		require.NoError(t, err)
		require.Equal(t, before, after, "%s: a refused file must be left as it was", name)
		_, err = os.Stat(path + "-wal")
		require.ErrorIs(t, err, fs.ErrNotExist, "%s: no log may be started on a refused file", name)
	}
	// A database of one table is one schema object, in the singular.
	_, err := Open("tables", WithDir(dir))
	require.ErrorContains(t, err, "(1 schema object, user_version 0)")
}

func TestNewerSchemaRefused(t *testing.T) {
	dir := t.TempDir()
	env, err := Open("future", WithDir(dir))
	require.NoError(t, err)
	_, err = env.db.Exec(fmt.Sprintf("PRAGMA user_version = %d", SchemaVersion()+3))
	require.NoError(t, err)
	require.NoError(t, env.Close())

	_, err = Open("future", WithDir(dir))
	require.ErrorIs(t, err, ErrNewerSchema)
	var se *SchemaError
	require.ErrorAs(t, err, &se)
	require.Equal(t, SchemaVersion()+3, se.Version)
	require.Equal(t, SchemaVersion(), se.Supported)
	require.ErrorContains(t, err, fmt.Sprintf("schema version %d, this build reads up to %d", SchemaVersion()+3, SchemaVersion()))
}

func TestMigratesFromMarkedEmptyFile(t *testing.T) {
	// A file marked as an environment at version 0 (created by a build
	// killed before its first migration committed) is brought up to date.
	dir := t.TempDir()
	p := filepath.Join(dir, "half.sqlite")
	db, err := sql.Open("sqlite", p)
	require.NoError(t, err)
	_, err = db.Exec(fmt.Sprintf("PRAGMA application_id = %d", applicationID))
	require.NoError(t, err)
	require.NoError(t, db.Close())

	env, err := Open("half", WithDir(dir))
	require.NoError(t, err)
	defer env.Close()
	var version int64
	require.NoError(t, env.db.QueryRow("PRAGMA user_version").Scan(&version))
	require.Equal(t, SchemaVersion(), version)
	var mode string
	require.NoError(t, env.db.QueryRow("PRAGMA journal_mode").Scan(&mode))
	require.Equal(t, "wal", mode)
	_, err = env.Put(context.Background(), "after migration", sampleRecord{Seq: 1})
	require.NoError(t, err)
}

func TestPutRefusesBadInput(t *testing.T) {
	env := openTemp(t, "bad")
	ctx := context.Background()
	_, err := env.PutJSON(ctx, "sample", "x", []byte(`{"seq":`))
	require.ErrorIs(t, err, ErrInvalidRecord)
	require.ErrorContains(t, err, "not valid JSON")
	// JSON followed by a NUL and anything: SQLite's json_valid and goccy's
	// Valid both stop at the NUL, and the record stored was cut there.
	_, err = env.PutJSON(ctx, "sample", "x", []byte("{}\x00garbage"))
	require.ErrorIs(t, err, ErrInvalidRecord)
	// JSON whose string holds a byte that is no UTF-8: every JSON reader
	// of the record's line in vkrt records --json refused it.
	_, err = env.PutJSON(ctx, "sample", "x", []byte("{\"s\":\"a\xffb\"}"))
	require.ErrorIs(t, err, ErrInvalidRecord)
	require.ErrorContains(t, err, "not valid UTF-8 (byte 7 of 11)")
	require.ErrorIs(t, CheckBody([]byte("{\"s\":\"a\xffb\"}")), ErrInvalidRecord)
	require.ErrorIs(t, CheckBody([]byte(`{"seq":`)), ErrInvalidRecord)
	require.NoError(t, CheckBody([]byte(`{"s":"café"}`)))
	_, err = env.PutJSON(ctx, "Sample Kind", "x", []byte(`{}`))
	require.ErrorIs(t, err, ErrInvalidRecord)
	require.ErrorContains(t, err, `kind "Sample Kind"`)
	_, err = env.PutJSON(ctx, "", "x", []byte(`{}`))
	require.ErrorIs(t, err, ErrInvalidRecord)
	_, err = env.Put(ctx, "", sampleRecord{})
	require.ErrorIs(t, err, ErrInvalidRecord)
	require.ErrorContains(t, err, "label is empty")
	_, err = env.Put(ctx, "x", nil)
	require.ErrorIs(t, err, ErrInvalidRecord)
	_, err = env.Put(ctx, "bad\xffutf8", sampleRecord{})
	require.ErrorIs(t, err, ErrInvalidRecord)
	// A body past the bound is refused as a record, before SQLite's own
	// limit could refuse it as a database error.
	huge := make([]byte, MaxBodyBytes+1)
	huge[0], huge[len(huge)-1] = '"', '"'
	_, err = env.PutJSON(ctx, "sample", "huge", huge)
	require.ErrorIs(t, err, ErrInvalidRecord)
	require.ErrorContains(t, err, "at most 268435456 allowed")

	all, err := env.Query(ctx, Query{})
	require.NoError(t, err)
	require.Empty(t, all, "refused records must store nothing")
}

func TestQuerySelects(t *testing.T) {
	start := time.Date(2026, 11, 29, 12, 0, 0, 0, time.UTC)
	tick := 0
	clock := func() time.Time { tick++; return start.Add(time.Duration(tick) * time.Minute) }
	env := openTemp(t, "query", WithClock(clock))
	ctx := context.Background()
	labels := []string{"model loaded", "after the dry run", "after the real run", "model unloaded"}
	for i, l := range labels {
		_, err := env.Put(ctx, l, sampleRecord{Seq: i})
		require.NoError(t, err)
		_, err = env.Put(ctx, l, otherRecord{Value: float64(i) / 2})
		require.NoError(t, err)
	}
	_, err := env.Put(ctx, "report", labelledRecord{Label: "report", Report: map[string]int{"pages": 3}})
	require.NoError(t, err)

	all, err := env.Query(ctx, Query{})
	require.NoError(t, err)
	require.Len(t, all, 9)
	for i := 1; i < len(all); i++ {
		require.Greater(t, all[i].ID, all[i-1].ID, "oldest first")
	}

	samples, err := env.Query(ctx, Query{Kind: "sample"})
	require.NoError(t, err)
	require.Len(t, samples, 4)

	after, err := env.Query(ctx, Query{LabelGlob: "after *"})
	require.NoError(t, err)
	require.Len(t, after, 4)
	for _, e := range after {
		require.Contains(t, []string{"after the dry run", "after the real run"}, e.Label)
	}
	single, err := env.Query(ctx, Query{Kind: "other", LabelGlob: "model [lu]*"})
	require.NoError(t, err)
	require.Len(t, single, 2)
	require.Equal(t, "model loaded", single[0].Label)
	require.Equal(t, "model unloaded", single[1].Label)

	// Records are stamped at minutes 1..9; Since is inclusive.
	since, err := env.Query(ctx, Query{Since: start.Add(7 * time.Minute)})
	require.NoError(t, err)
	require.Len(t, since, 3)
	require.Equal(t, start.Add(7*time.Minute).UnixNano(), since[0].Time.UnixNano())

	last, err := env.Query(ctx, Query{Kind: "sample", Last: 2})
	require.NoError(t, err)
	require.Len(t, last, 2)
	require.Equal(t, []string{"after the real run", "model unloaded"}, []string{last[0].Label, last[1].Label})

	mem, err := env.Query(ctx, Query{Kind: KindMemory})
	require.NoError(t, err)
	require.Len(t, mem, 1)
	require.Equal(t, `{"label":"report","report":{"pages":3}}`, string(mem[0].Body), "a record's own encoding is stored as it is")

	_, err = env.Query(ctx, Query{LabelGlob: "after [the"})
	require.ErrorIs(t, err, ErrInvalidRecord)
	require.ErrorContains(t, err, "never closes")
	// Past SQLite's GLOB pattern length: refused as the query's, where
	// SQLite's "pattern too complex" matched no error kind.
	_, err = env.Query(ctx, Query{LabelGlob: strings.Repeat("*", 50000)})
	require.NoError(t, err)
	_, err = env.Query(ctx, Query{LabelGlob: strings.Repeat("*", 50001)})
	require.ErrorIs(t, err, ErrInvalidRecord)
	require.ErrorContains(t, err, "50001 bytes long")
	for _, glob := range []string{"[z-a]*", "after [^t-a]he*", "[a-cz-b]"} {
		_, err = env.Query(ctx, Query{LabelGlob: glob})
		require.ErrorIs(t, err, ErrInvalidRecord, glob)
		require.ErrorContains(t, err, "matches nothing", glob)
	}
	for _, glob := range []string{"[a-z]*", "[-a]*", "[a-]*", "[]-a]*", "[a-c-e]*", "after [t-t]he*",
		// A ']' first in a set is a member that starts no range in
		// SQLite's GLOB: ']', '-' and 'A', not a reversed range.
		"[]-A]*", "[^]-A]*"} {
		_, err = env.Query(ctx, Query{LabelGlob: glob})
		require.NoError(t, err, glob)
	}
	ranged, err := env.Query(ctx, Query{LabelGlob: "after [s-u]he*"})
	require.NoError(t, err)
	require.NotEmpty(t, ranged)
	_, err = env.Query(ctx, Query{Last: -1})
	require.ErrorIs(t, err, ErrInvalidRecord)
	_, err = env.Query(ctx, Query{Kind: "No Such"})
	require.ErrorIs(t, err, ErrInvalidRecord)
}

func TestTypedQueries(t *testing.T) {
	env := openTemp(t, "typed")
	ctx := context.Background()
	for i := range 3 {
		_, err := env.Put(ctx, fmt.Sprintf("step %d", i), sampleRecord{Seq: i, Note: "n"})
		require.NoError(t, err)
	}
	_, err := env.Put(ctx, "step 9", otherRecord{Value: 1.5})
	require.NoError(t, err)

	typed, err := QueryAs[sampleRecord](ctx, env, Query{LabelGlob: "step *"})
	require.NoError(t, err)
	require.Len(t, typed, 3)
	for i, r := range typed {
		require.Equal(t, i, r.Value.Seq)
		require.Equal(t, fmt.Sprintf("step %d", i), r.Label)
	}
	others, err := QueryAs[otherRecord](ctx, env, Query{})
	require.NoError(t, err)
	require.Len(t, others, 1)
	require.Equal(t, 1.5, others[0].Value.Value)

	_, err = QueryAs[sampleRecord](ctx, env, Query{Kind: "other"})
	require.ErrorIs(t, err, ErrKindMismatch)
	_, err = Decode[sampleRecord](others[0].Entry)
	require.ErrorIs(t, err, ErrKindMismatch)
	require.ErrorContains(t, err, `kind "other"`)
}

// EachAs lists the records of its type's kind, decoded, across pages, and
// stops at the first that cannot be decoded, or at fn's error.
func TestEachAsDecodesPageByPage(t *testing.T) {
	env := openTemp(t, "typed-pages")
	ctx := context.Background()
	n := 2*EachPage + 3
	for i := range n {
		_, err := env.Put(ctx, fmt.Sprint("step ", i), sampleRecord{Seq: i})
		require.NoError(t, err)
		if i%100 == 0 {
			_, err = env.Put(ctx, "other", otherRecord{Value: float64(i)})
			require.NoError(t, err)
		}
	}
	var seqs []int
	require.NoError(t, EachAs(ctx, env, Query{}, func(r Typed[sampleRecord]) error {
		require.Equal(t, fmt.Sprint("step ", r.Value.Seq), r.Label)
		seqs = append(seqs, r.Value.Seq)
		return nil
	}))
	require.Len(t, seqs, n)
	for i, seq := range seqs {
		require.Equal(t, i, seq)
	}
	all, err := QueryAs[sampleRecord](ctx, env, Query{})
	require.NoError(t, err)
	require.Len(t, all, n)

	err = EachAs(ctx, env, Query{Kind: "other"}, func(Typed[sampleRecord]) error { return nil })
	require.ErrorIs(t, err, ErrKindMismatch)

	stop := errors.New("enough")
	listed := 0
	err = EachAs(ctx, env, Query{}, func(Typed[sampleRecord]) error {
		if listed++; listed == EachPage+1 {
			return stop
		}
		return nil
	})
	require.Same(t, stop, err)
	require.Equal(t, EachPage+1, listed)

	_, err = env.PutJSON(ctx, "sample", "bad", []byte(`{"seq":"not a number","note":""}`))
	require.NoError(t, err)
	listed = 0
	err = EachAs(ctx, env, Query{}, func(Typed[sampleRecord]) error { listed++; return nil })
	require.Error(t, err)
	require.Equal(t, n, listed, "every record before the bad one is listed")
	_, err = QueryAs[sampleRecord](ctx, env, Query{})
	require.Error(t, err)
}

func TestClosedEnvironment(t *testing.T) {
	env, err := Open("closed", WithDir(t.TempDir()))
	require.NoError(t, err)
	require.NoError(t, env.Close())
	require.NoError(t, env.Close())
	_, err = env.Put(context.Background(), "late", sampleRecord{})
	require.ErrorIs(t, err, ErrClosed)
	// The name and "environment" once: it read 'environment "closed":
	// environment: closed'.
	require.EqualError(t, err, `environment "closed": closed`)
	_, err = env.Query(context.Background(), Query{})
	require.ErrorIs(t, err, ErrClosed)
	require.EqualError(t, err, `environment "closed": closed`)
}

func TestMigratesToNewerSchema(t *testing.T) {
	dir := t.TempDir()
	ctx := context.Background()
	env, err := Open("old", WithDir(dir))
	require.NoError(t, err)
	put, err := env.Put(ctx, "before the upgrade", sampleRecord{Seq: 1, Note: "kept"})
	require.NoError(t, err)
	require.NoError(t, env.Close())

	// A build with one more migration opens the file, upgrades it once and
	// keeps every record.
	saved := migrations
	t.Cleanup(func() { migrations = saved })
	migrations = append(slices.Clone(saved), `ALTER TABLE records ADD COLUMN origin TEXT NOT NULL DEFAULT ''`)
	for range 2 {
		env, err = Open("old", WithDir(dir))
		require.NoError(t, err)
		var version int64
		require.NoError(t, env.db.QueryRow("PRAGMA user_version").Scan(&version))
		require.Equal(t, int64(len(saved)+1), version)
		var origin string
		require.NoError(t, env.db.QueryRow("SELECT origin FROM records WHERE id = ?", put.ID).Scan(&origin))
		got, err := env.Get(ctx, put.ID)
		require.NoError(t, err)
		require.Equal(t, put.Body, got.Body)
		require.NoError(t, env.Close())
	}

	// The older build refuses the upgraded file instead of misreading it.
	migrations = saved
	_, err = Open("old", WithDir(dir))
	require.ErrorIs(t, err, ErrNewerSchema)
}

type sizedRecord struct {
	BytesReserved uint64 `json:"bytes_reserved"`
	Pages         uint32 `json:"pages"`
}

func (sizedRecord) Kind() string { return "sized" }

func TestRecordDecodingRefusesNumbersPastTheirField(t *testing.T) {
	env := openTemp(t, "numbers")
	ctx := context.Background()
	for _, body := range []string{
		`{"bytes_reserved":18446744073709551617,"pages":1}`,
		`{"bytes_reserved":18446744073709551616,"pages":1}`,
		`{"bytes_reserved":-1,"pages":1}`,
		`{"bytes_reserved":1e6,"pages":1}`,
		`{"bytes_reserved":1.5,"pages":1}`,
		`{"bytes_reserved":1,"pages":4294967296}`,
	} {
		ent, err := env.PutJSON(ctx, "sized", body, []byte(body))
		require.NoError(t, err, "the body is valid JSON, so it is stored")
		_, err = Decode[sizedRecord](ent)
		require.ErrorIs(t, err, strictjson.ErrNumberDoesNotFit, body)
		_, err = QueryAs[sizedRecord](ctx, env, Query{LabelGlob: body})
		require.ErrorIs(t, err, strictjson.ErrNumberDoesNotFit, body)
	}
	ent, err := env.PutJSON(ctx, "sized", "fits", []byte(`{"bytes_reserved":18446744073709551615,"pages":4294967295}`))
	require.NoError(t, err)
	v, err := Decode[sizedRecord](ent)
	require.NoError(t, err)
	require.Equal(t, sizedRecord{BytesReserved: 1<<64 - 1, Pages: 1<<32 - 1}, v)
}

// Each reads a page of records at a time, so a listing of a large
// environment holds one page, not every record: the records of several
// pages come in order, once each, with Last and a label glob selecting
// across page boundaries as Query does; records put while it lists are
// left out; an error of fn ends it and is returned as it is.
func TestEachReadsPageByPage(t *testing.T) {
	env := openTemp(t, "pages")
	ctx := context.Background()
	n := 2*EachPage + 3
	for i := range n {
		label := "even"
		if i%2 == 1 {
			label = "odd"
		}
		_, err := env.Put(ctx, label, sampleRecord{Seq: i})
		require.NoError(t, err)
	}
	for _, q := range []Query{{}, {Last: EachPage + 7}, {LabelGlob: "o*"}, {LabelGlob: "e*", Last: EachPage + 1}, {Kind: "sample", Last: 1}, {Kind: "other"}} {
		var seqs []int
		err := env.Each(ctx, q, func(ent Entry) error {
			rec, err := Decode[sampleRecord](ent)
			require.NoError(t, err)
			seqs = append(seqs, rec.Seq)
			return nil
		})
		require.NoError(t, err)
		var wantSeqs []int
		for i := range n {
			if q.LabelGlob == "o*" && i%2 == 0 || q.LabelGlob == "e*" && i%2 == 1 || q.Kind == "other" {
				continue
			}
			wantSeqs = append(wantSeqs, i)
		}
		if q.Last > 0 {
			wantSeqs = wantSeqs[len(wantSeqs)-q.Last:]
		}
		require.Equal(t, wantSeqs, seqs, "%+v", q)
	}

	listed := 0
	err := env.Each(ctx, Query{}, func(Entry) error {
		if listed == 0 {
			_, err := env.Put(ctx, "late", sampleRecord{Seq: -1})
			require.NoError(t, err)
		}
		listed++
		return nil
	})
	require.NoError(t, err)
	require.Equal(t, n, listed, "a record put while Each lists is left out")
	all, err := env.Query(ctx, Query{})
	require.NoError(t, err)
	require.Len(t, all, n+1, "and listed by the next")

	stop := errors.New("enough")
	listed = 0
	err = env.Each(ctx, Query{}, func(Entry) error {
		listed++
		if listed == EachPage+1 {
			return stop
		}
		return nil
	})
	require.Same(t, stop, err)
	require.Equal(t, EachPage+1, listed)
}

// A page of Each ends early where its bodies are large: 24 records of
// 4 MiB were read as one page, held at once (EachPage bodies of
// MaxBodyBytes are 64 GiB), where a page now stops at 16 MiB of bodies.
// The records are listed all the same, in order, once each.
func TestEachPageOfLargeBodiesIsBounded(t *testing.T) {
	env := openTemp(t, "large")
	ctx := context.Background()
	const n, size = 24, 4 << 20
	body := []byte(`"` + strings.Repeat("x", size) + `"`)
	for i := range n {
		_, err := env.PutJSON(ctx, "blob", strconv.Itoa(i), body)
		require.NoError(t, err)
	}
	var labels []string
	var most uint64
	err := env.Each(ctx, Query{}, func(ent Entry) error {
		labels = append(labels, ent.Label)
		runtime.GC()
		var ms runtime.MemStats
		runtime.ReadMemStats(&ms)
		most = max(most, ms.HeapAlloc)
		return nil
	})
	require.NoError(t, err)
	want := make([]string, n)
	for i := range want {
		want[i] = strconv.Itoa(i)
	}
	require.Equal(t, want, labels)
	require.Less(t, most, uint64(n*size/2), "a listing holds a page of bodies, 16 MiB of them at most")
}

// An Env closed while Each lists (from fn, or another goroutine) ends the
// listing at its next page with ErrClosed: a reader's next page failed
// with "sql: database is closed", matching no error kind, and a writer's
// with ErrReplaced, saying to open again a file that never went (its own
// Close removed the log).
func TestEachOfAnEnvClosedMidListingIsErrClosed(t *testing.T) {
	ctx := context.Background()
	dir := t.TempDir()
	w, err := Open("closing", WithDir(dir))
	require.NoError(t, err)
	for i := range EachPage + 5 {
		_, err := w.Put(ctx, "r", sampleRecord{Seq: i})
		require.NoError(t, err)
	}
	for _, readOnly := range []bool{false, true} {
		env := w
		if readOnly {
			env, err = Open("closing", WithDir(dir), ReadOnly())
			require.NoError(t, err)
		}
		listed := 0
		err = env.Each(ctx, Query{}, func(Entry) error {
			if listed++; listed == 1 {
				require.NoError(t, env.Close())
			}
			return nil
		})
		require.ErrorIs(t, err, ErrClosed, "read-only %v", readOnly)
		require.NotErrorIs(t, err, ErrReplaced)
		require.Equal(t, EachPage, listed, "the page read before Close is listed")
	}
}

// A Put that an Env's Close overtakes (here: the clock closes it, after
// Put's checks and before its write) is ErrClosed: it was ErrReplaced,
// saying the file went, as Close removed the log.
func TestPutOvertakenByCloseIsErrClosed(t *testing.T) {
	var env *Env
	env, err := Open("overtaken", WithDir(t.TempDir()), WithClock(func() time.Time {
		env.Close()
		return time.Now()
	}))
	require.NoError(t, err)
	_, err = env.Put(context.Background(), "r", sampleRecord{Seq: 1})
	require.ErrorIs(t, err, ErrClosed)
	require.NotErrorIs(t, err, ErrReplaced)
}

// requireNamedOnce checks that err names the environment name once and
// says "environment:" nowhere: a write that met a closed Env read
// 'environment "x": closed (the write failed: environment "x": writing …)',
// and a writer's read of a file that went 'environment "x": reading
// records: environment "x": file removed …'.
func requireNamedOnce(t *testing.T, name string, err error) {
	t.Helper()
	require.Error(t, err)
	msg := err.Error()
	require.Equal(t, 1, strings.Count(msg, fmt.Sprintf("environment %q", name)), "%s", msg)
	require.True(t, strings.HasPrefix(msg, fmt.Sprintf("environment %q", name)), "%s", msg)
	require.NotContains(t, msg, "environment:")
}

// A Put that Close overtakes, or whose file goes between its checks and
// its write, names the environment once, and matches both the sentinel
// and SQLite's error, which it told only as text.
func TestAStoppedWriteNamesTheEnvironmentOnce(t *testing.T) {
	ctx := context.Background()
	var env *Env
	env, err := Open("overtaken", WithDir(t.TempDir()), WithClock(func() time.Time {
		env.Close()
		return time.Now()
	}))
	require.NoError(t, err)
	_, err = env.Put(ctx, "r", sampleRecord{Seq: 1})
	require.ErrorIs(t, err, ErrClosed)
	requireNamedOnce(t, "overtaken", err)
	require.Contains(t, err.Error(), `environment "overtaken": closed (writing "sample" record "r" failed: `)

	var moved *Env
	moved, err = Open("moved", WithDir(t.TempDir()), WithClock(func() time.Time {
		os.Remove(moved.Path())
		return time.Now()
	}))
	require.NoError(t, err)
	defer moved.Close()
	_, err = moved.Put(ctx, "r", sampleRecord{Seq: 1})
	require.ErrorIs(t, err, ErrReplaced)
	var se *sqlite.Error
	require.ErrorAs(t, err, &se, "SQLite's error is kept: %v", err)
	requireNamedOnce(t, "moved", err)
	require.Contains(t, err.Error(), `(writing "sample" record "r" failed: `)
}

// A read that meets an Env closed, a writer's file gone, or a reader's
// file gone as it opens it again, names the environment once.
func TestAFailedReadNamesTheEnvironmentOnce(t *testing.T) {
	ctx := context.Background()
	dir := t.TempDir()
	w, err := Open("gone", WithDir(dir))
	require.NoError(t, err)
	defer w.Close()
	_, err = w.Put(ctx, "r", sampleRecord{Seq: 1})
	require.NoError(t, err)
	require.NoError(t, os.Remove(w.Path()))

	_, err = w.Query(ctx, Query{})
	require.ErrorIs(t, err, ErrReplaced)
	requireNamedOnce(t, "gone", err)
	require.True(t, strings.HasPrefix(err.Error(), `environment "gone": reading records: file removed or replaced while open: `), "%v", err)
	_, err = w.Get(ctx, 1)
	require.ErrorIs(t, err, ErrReplaced)
	requireNamedOnce(t, "gone", err)
	_, err = w.Kinds(ctx)
	require.ErrorIs(t, err, ErrReplaced)
	requireNamedOnce(t, "gone", err)

	path := filledEnvironment(t, dir, "unlinked", 1)
	r, err := Open("unlinked", WithDir(dir), ReadOnly())
	require.NoError(t, err)
	defer r.Close()
	require.NoError(t, os.Remove(path))
	_, err = r.Get(ctx, 1)
	require.ErrorIs(t, err, fs.ErrNotExist)
	requireNamedOnce(t, "unlinked", err)

	c, err := Open("closing", WithDir(dir))
	require.NoError(t, err)
	for i := range EachPage + 1 {
		_, err := c.Put(ctx, "r", sampleRecord{Seq: i})
		require.NoError(t, err)
	}
	err = c.Each(ctx, Query{}, func(Entry) error { return c.Close() })
	require.ErrorIs(t, err, ErrClosed)
	requireNamedOnce(t, "closing", err)
}

// pointerKind is a record kind whose Kind method is its pointer's.
type pointerKind struct {
	N int `json:"n"`
}

func (*pointerKind) Kind() string { return "pointer" }

// A nil pointer record is refused, its Kind method the value's or the
// pointer's: the first panicked ("value method … called using nil
// pointer"), the second stored the body null. A typed query or Decode of a
// pointer type asks the kind of the value it points to: they panicked the
// same way for *sampleRecord.
func TestNilPointerRecordsAndPointerTypes(t *testing.T) {
	ctx := context.Background()
	env, err := Open("pointers", WithDir(t.TempDir()))
	require.NoError(t, err)
	defer env.Close()
	for _, rec := range []Record{(*sampleRecord)(nil), (*pointerKind)(nil)} {
		require.NotPanics(t, func() {
			_, err = env.Put(ctx, "nil", rec)
		})
		require.ErrorIs(t, err, ErrInvalidRecord)
		require.ErrorContains(t, err, fmt.Sprintf("nil %T record", rec))
	}
	got, err := env.Query(ctx, Query{})
	require.NoError(t, err)
	require.Empty(t, got, "nothing was stored")

	_, err = env.Put(ctx, "value", &sampleRecord{Seq: 7})
	require.NoError(t, err)
	ent, err := env.Put(ctx, "pointer", &pointerKind{N: 3})
	require.NoError(t, err)
	require.Equal(t, "pointer", ent.Kind)
	var typed []Typed[*sampleRecord]
	require.NotPanics(t, func() { typed, err = QueryAs[*sampleRecord](ctx, env, Query{}) })
	require.NoError(t, err)
	require.Len(t, typed, 1)
	require.Equal(t, 7, typed[0].Value.Seq)
	ptrs, err := QueryAs[*pointerKind](ctx, env, Query{})
	require.NoError(t, err)
	require.Len(t, ptrs, 1)
	require.Equal(t, 3, ptrs[0].Value.N)
	require.NotPanics(t, func() { _, err = Decode[*sampleRecord](ent) })
	require.ErrorIs(t, err, ErrKindMismatch)
}

// A nil clock is the default one: every Put panicked.
func TestANilClockIsTheDefault(t *testing.T) {
	env, err := Open("clock", WithDir(t.TempDir()), WithClock(nil))
	require.NoError(t, err)
	defer env.Close()
	before := time.Now()
	var ent Entry
	require.NotPanics(t, func() { ent, err = env.Put(context.Background(), "r", sampleRecord{Seq: 1}) })
	require.NoError(t, err)
	require.False(t, ent.Time.Before(before.Truncate(0)), "stamped %v, before %v", ent.Time, before)
}

// Puts that race the Env's Close either store their record and say so, or
// fail with ErrClosed and store nothing: a Put that committed as Close ran
// was told ErrReplaced, its write-ahead log gone and its record "committed
// … maybe into the file that went", which Close had moved into the file
// (35 of 40 rounds here said so), and a client opened the environment
// again for it.
func TestPutsRacingCloseAreStoredOrErrClosed(t *testing.T) {
	ctx := context.Background()
	dir := t.TempDir()
	stored := map[string]bool{}
	var mu sync.Mutex
	for round := range 40 {
		env, err := Open("race", WithDir(dir))
		require.NoError(t, err)
		var wg sync.WaitGroup
		for g := range 4 {
			wg.Go(func() {
				for i := range 20 {
					label := fmt.Sprintf("r%d-%d-%d", round, g, i)
					_, err := env.Put(ctx, label, sampleRecord{Seq: i})
					mu.Lock()
					stored[label] = err == nil
					mu.Unlock()
					if err != nil {
						assert.ErrorIs(t, err, ErrClosed)
						assert.NotErrorIs(t, err, ErrReplaced)
						return
					}
				}
			})
		}
		time.Sleep(time.Duration(round%8) * time.Millisecond)
		require.NoError(t, env.Close())
		wg.Wait()
	}
	env, err := Open("race", WithDir(dir), ReadOnly())
	require.NoError(t, err)
	defer env.Close()
	got, err := env.Query(ctx, Query{})
	require.NoError(t, err)
	found := map[string]bool{}
	for _, e := range got {
		found[e.Label] = true
	}
	for label, ok := range stored {
		require.Equal(t, ok, found[label], "record %s: Put said stored %v", label, ok)
	}
}

// An Open whose context has ended makes no file: SQLite refused to open
// the one it made, and the empty file stayed, an environment List named.
func TestOpenWithAnEndedContextMakesNoFile(t *testing.T) {
	dir := t.TempDir()
	ctx, cancel := context.WithCancel(context.Background())
	cancel()
	_, err := OpenContext(ctx, "ended", WithDir(dir))
	require.ErrorIs(t, err, context.Canceled)
	require.EqualError(t, err, `environment "ended": opening: context canceled`)
	names, err := List(WithDir(dir))
	require.NoError(t, err)
	require.Empty(t, names)
	_, err = os.Stat(filepath.Join(dir, "ended.sqlite"))
	require.ErrorIs(t, err, fs.ErrNotExist)
}

// A label glob holding a NUL byte is refused (ErrInvalidRecord): SQLite's
// GLOB ended the pattern at it, so "a\x00zzz" listed the record labelled
// "a", though no label holds a NUL.
func TestALabelGlobWithANULIsRefused(t *testing.T) {
	ctx := context.Background()
	env, err := Open("nul", WithDir(t.TempDir()))
	require.NoError(t, err)
	defer env.Close()
	_, err = env.Put(ctx, "a", sampleRecord{})
	require.NoError(t, err)
	got, err := env.Query(ctx, Query{LabelGlob: "a\x00zzz"})
	require.ErrorIs(t, err, ErrInvalidRecord)
	require.ErrorContains(t, err, "NUL byte at byte 1")
	require.Empty(t, got)
	require.Error(t, CheckLabelGlob("*\x00"))
}

// A label glob that is not UTF-8 is refused (ErrInvalidRecord): SQLite's
// GLOB read the byte as U+FFFD, so "a\xffb" listed the record labelled
// "a\ufffdb", though every label is UTF-8.
func TestALabelGlobThatIsNotUTF8IsRefused(t *testing.T) {
	ctx := context.Background()
	env, err := Open("utf8", WithDir(t.TempDir()))
	require.NoError(t, err)
	defer env.Close()
	_, err = env.Put(ctx, "a\ufffdb", sampleRecord{})
	require.NoError(t, err)
	got, err := env.Query(ctx, Query{LabelGlob: "a\xffb"})
	require.ErrorIs(t, err, ErrInvalidRecord)
	require.ErrorContains(t, err, "not valid UTF-8 (byte 1)")
	require.Empty(t, got)
	got, err = env.Query(ctx, Query{LabelGlob: "a\ufffdb"})
	require.NoError(t, err)
	require.Len(t, got, 1, "U+FFFD itself still matches")
}

// A body that is not JSON is refused saying where and why: the bare "is
// not valid JSON (20002 bytes)" was all a body nested past encoding/json's
// 10,000 levels (valid, yet no reader decodes it) was told, as one of
// broken syntax was.
func TestABodyThatIsNotJSONIsToldWhereAndWhy(t *testing.T) {
	env, err := Open("where", WithDir(t.TempDir()))
	require.NoError(t, err)
	defer env.Close()
	for body, want := range map[string]string{
		strings.Repeat("[", 10001) + strings.Repeat("]", 10001): "is not valid JSON (byte 10000 of 20002): invalid character '[' exceeded max depth",
		`{"a": tru}`: "is not valid JSON (byte 9 of 10): invalid character '}' in literal true",
		"{}\x00{}":   "is not valid JSON (byte 2 of 5): invalid character '\\x00' after top-level value",
		`{"a": 1`:    "is not valid JSON (byte 6 of 7): unexpected end of JSON input",
	} {
		_, err := env.PutJSON(context.Background(), "k", "l", []byte(body))
		require.ErrorIs(t, err, ErrInvalidRecord)
		require.ErrorContains(t, err, want)
		require.ErrorContains(t, CheckBody([]byte(body)), want)
	}
}
