package environment

import (
	"bytes"
	"context"
	"database/sql"
	"encoding/json"
	"errors"
	"fmt"
	"io/fs"
	"math"
	"net/netip"
	"os"
	"path/filepath"
	"reflect"
	"strings"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/vkrt/vkrt/internal/strictjson"
)

// filledEnvironment writes n records whose notes carry "marker-<seq>;" and
// closes the environment, so every record is in its main file.
func filledEnvironment(t *testing.T, dir, name string, n int) string {
	t.Helper()
	env, err := Open(name, WithDir(dir))
	require.NoError(t, err)
	for i := range n {
		_, err := env.Put(context.Background(), fmt.Sprintf("record %d", i),
			sampleRecord{Seq: i, Note: fmt.Sprintf("marker-%d;", i) + strings.Repeat("n", 500)})
		require.NoError(t, err)
	}
	require.NoError(t, env.Close())
	require.Empty(t, sideFiles(t, env.Path()))
	return env.Path()
}

func TestNegativeSchemaVersionIsRefusedNotMigrated(t *testing.T) {
	dir := t.TempDir()
	path := filledEnvironment(t, dir, "negative", 2)
	db, err := sql.Open("sqlite", path)
	require.NoError(t, err)
	_, err = db.Exec("PRAGMA user_version = -1")
	require.NoError(t, err)
	require.NoError(t, db.Close())
	before, err := os.ReadFile(path)
	require.NoError(t, err)

	for _, opts := range [][]Option{{WithDir(dir)}, {WithDir(dir), ReadOnly()}} {
		env, err := Open("negative", opts...)
		require.ErrorIs(t, err, ErrNotEnvironment)
		require.ErrorContains(t, err, path)
		require.ErrorContains(t, err, "schema version -1")
		require.Nil(t, env)
	}
	after, err := os.ReadFile(path)
	require.NoError(t, err)
	require.Equal(t, before, after, "a refused file is left as it was")
}

func TestDamagedFileIsRefusedBeforeAWrite(t *testing.T) {
	ctx := context.Background()
	dir := t.TempDir()
	path := filledEnvironment(t, dir, "damaged", 200)
	data, err := os.ReadFile(path)
	require.NoError(t, err)
	// Overwrite the page holding the first records: a writer appending a
	// record never reads it, only a check or a reader does.
	at := bytes.Index(data, []byte("marker-0;"))
	require.Positive(t, at)
	const page = 4096
	start := at / page * page
	copy(data[start:start+page], bytes.Repeat([]byte{0x5a}, page))
	require.NoError(t, os.WriteFile(path, data, 0o644))

	_, err = Open("damaged", WithDir(dir))
	require.ErrorIs(t, err, ErrCorrupt)
	require.ErrorContains(t, err, path)
	// SQLite's findings are a line each, indented under the error's first
	// line, without its heading: the error held them as SQLite wrote them,
	// a heading line and findings run together with "; ".
	lines := strings.Split(err.Error(), "\n")
	require.Equal(t, "environment: file is damaged: "+path+" fails SQLite's quick_check; it is left as it was "+
		"(sqlite3's .recover can salvage its records into a new file):", lines[0])
	require.Len(t, lines, 1+maxCheckProblems, "%q", err)
	for _, l := range lines[1:] {
		require.Regexp(t, `^  [A-Z][^\n]*\S$`, l)
		require.NotContains(t, l, "*** in database")
		require.NotContains(t, l, ";")
	}
	require.Contains(t, lines[1:], "  Page 5: never used", "%q", err)
	after, err := os.ReadFile(path)
	require.NoError(t, err)
	require.Equal(t, data, after, "nothing is written into a damaged file")

	reader, err := Open("damaged", WithDir(dir), ReadOnly())
	require.NoError(t, err, "a reader opens it: the damage is in the records")
	defer reader.Close()
	_, err = reader.Query(ctx, Query{})
	require.ErrorIs(t, err, ErrCorrupt)
	require.ErrorContains(t, err, path)
}

// A file whose first page of records has broken cell pointers reads,
// through SQLite, as one that holds no records at all: a reader's listing
// was empty and said nothing where a writer refused the file. The reader is
// refused with the writer's error, word for word.
func TestAReaderOfADamagedFileIsToldAsTheWriterIs(t *testing.T) {
	ctx := context.Background()
	dir := t.TempDir()
	path := filledEnvironment(t, dir, "broken", 10)
	data, err := os.ReadFile(path)
	require.NoError(t, err)
	// The leaf page (type 0x0d) of the first records, not the last: its
	// cell pointers start at its byte 8.
	const page = 4096
	leaf := -1
	for start := 0; start < len(data); start += page {
		if data[start] == 0x0d && bytes.Contains(data[start:start+page], []byte("marker-0;")) {
			leaf = start
		}
	}
	require.Positive(t, leaf)
	require.NotContains(t, string(data[leaf:leaf+page]), "marker-9;")
	copy(data[leaf+9:], "\xde\xad\xbe\xef\x7f\x00\x01\x80")
	require.NoError(t, os.WriteFile(path, data, 0o644))

	_, writerErr := Open("broken", WithDir(dir))
	require.ErrorIs(t, writerErr, ErrCorrupt)

	reader, err := Open("broken", WithDir(dir), ReadOnly())
	require.NoError(t, err)
	defer reader.Close()
	for range 2 {
		entries, err := reader.Query(ctx, Query{})
		require.ErrorIs(t, err, ErrCorrupt)
		require.Equal(t, writerErr.Error(), err.Error())
		require.Nil(t, entries)
	}
	err = EachAs(ctx, reader, Query{}, func(Typed[sampleRecord]) error { return nil })
	require.ErrorIs(t, err, ErrCorrupt)
	// Get and Kinds, first or after a listing, are refused the same way:
	// they read the broken page as holding no record (ErrNoRecord) and
	// no kind.
	for _, first := range []string{"Get", "Kinds"} {
		r, err := Open("broken", WithDir(dir), ReadOnly())
		require.NoError(t, err)
		for _, call := range []string{first, "Get", "Kinds"} {
			switch call {
			case "Get":
				_, err = r.Get(ctx, 1)
				require.NotErrorIs(t, err, ErrNoRecord, "%s after %s", call, first)
			case "Kinds":
				var kinds []string
				kinds, err = r.Kinds(ctx)
				require.Nil(t, kinds, "%s after %s", call, first)
			}
			require.ErrorIs(t, err, ErrCorrupt, "%s after %s", call, first)
			require.Equal(t, writerErr.Error(), err.Error())
		}
		require.NoError(t, r.Close())
	}
	after, err := os.ReadFile(path)
	require.NoError(t, err)
	require.Equal(t, data, after, "the file is left as it was")
}

func TestTruncatedFileIsErrCorrupt(t *testing.T) {
	dir := t.TempDir()
	path := filledEnvironment(t, dir, "cut", 200)
	info, err := os.Stat(path)
	require.NoError(t, err)
	require.NoError(t, os.Truncate(path, info.Size()/2))
	before, err := os.ReadFile(path)
	require.NoError(t, err)
	for _, opts := range [][]Option{{WithDir(dir)}, {WithDir(dir), ReadOnly()}} {
		_, err := Open("cut", opts...)
		require.ErrorIs(t, err, ErrCorrupt)
		// The kind and the file once: it read "environment: PATH: opening:
		// environment: file is damaged: PATH: …".
		require.EqualError(t, err, "environment: file is damaged: "+path+": database disk image is malformed (11)")
	}
	after, err := os.ReadFile(path)
	require.NoError(t, err)
	require.Equal(t, before, after)
}

// holdWriteLock takes the environment's write lock from a connection of
// its own, as another process would, until the returned func is called.
func holdWriteLock(t *testing.T, path string) (release func()) {
	t.Helper()
	db, err := sql.Open("sqlite", path)
	require.NoError(t, err)
	conn, err := db.Conn(context.Background())
	require.NoError(t, err)
	_, err = conn.ExecContext(context.Background(), "BEGIN IMMEDIATE")
	require.NoError(t, err)
	return func() {
		_, err := conn.ExecContext(context.Background(), "ROLLBACK")
		require.NoError(t, err)
		require.NoError(t, conn.Close())
		require.NoError(t, db.Close())
	}
}

func TestWriteLockHeldPastTheBusyTimeoutIsErrBusy(t *testing.T) {
	ctx := context.Background()
	dir := t.TempDir()
	env, err := Open("held", WithDir(dir), WithBusyTimeout(50*time.Millisecond))
	require.NoError(t, err)
	defer env.Close()
	_, err = env.Put(ctx, "before", sampleRecord{Seq: 1})
	require.NoError(t, err)

	release := holdWriteLock(t, env.Path())
	_, err = env.Put(ctx, "while held", sampleRecord{Seq: 2})
	require.ErrorIs(t, err, ErrBusy)
	require.ErrorContains(t, err, env.Path())
	require.ErrorContains(t, err, "50ms")
	// The name and "environment" once: it read 'environment "held":
	// writing … record "while held": environment: locked by …'.
	require.Equal(t, `environment "held": writing "sample" record "while held": locked by another writer past the busy timeout: `+
		env.Path()+`, still locked after 50ms (the busy timeout): database is locked (5) (SQLITE_BUSY)`, err.Error())
	_, err = Open("held", WithDir(dir), WithBusyTimeout(50*time.Millisecond))
	require.ErrorIs(t, err, ErrBusy)
	require.ErrorContains(t, err, env.Path())
	release()

	_, err = env.Put(ctx, "after", sampleRecord{Seq: 3})
	require.NoError(t, err)
	recs, err := env.Query(ctx, Query{})
	require.NoError(t, err)
	require.Len(t, recs, 2)
}

// SQLite takes its busy timeout as milliseconds in a 32-bit int; a longer
// one must still wait, not read as no wait at all.
func TestABusyTimeoutPastSQLitesRangeStillWaits(t *testing.T) {
	ctx := context.Background()
	env, err := Open("patient", WithDir(t.TempDir()), WithBusyTimeout(1000*time.Hour))
	require.NoError(t, err)
	defer env.Close()
	release := holdWriteLock(t, env.Path())
	released := make(chan struct{})
	go func() {
		time.Sleep(200 * time.Millisecond)
		release()
		close(released)
	}()
	_, err = env.Put(ctx, "waited", sampleRecord{Seq: 1})
	<-released
	require.NoError(t, err, "the write waits for the lock")
}

func TestPutRefusesABodySQLiteRefusesAsAnInvalidRecord(t *testing.T) {
	env := openTemp(t, "deep")
	deep := strings.Repeat("[", 1500) + strings.Repeat("]", 1500) // past SQLite's JSON depth of 1000
	_, err := env.PutJSON(context.Background(), "sample", "deep", []byte(deep))
	require.ErrorIs(t, err, ErrInvalidRecord)
	require.ErrorContains(t, err, env.Path())
}

func TestRecordTimesOutsideTheStorableRangeAreRefused(t *testing.T) {
	ctx := context.Background()
	dir := t.TempDir()
	for _, at := range []time.Time{
		time.Date(3000, 1, 1, 0, 0, 0, 0, time.UTC),
		time.Date(1600, 1, 1, 0, 0, 0, 0, time.UTC),
		time.Unix(0, math.MaxInt64).Add(time.Nanosecond),
	} {
		env, err := Open("clock", WithDir(dir), WithClock(func() time.Time { return at }))
		require.NoError(t, err)
		_, err = env.Put(ctx, "odd clock", sampleRecord{Seq: 1})
		require.ErrorIs(t, err, ErrInvalidRecord, "%v", at)
		require.ErrorContains(t, err, "the clock reads")
		require.NoError(t, env.Close())
	}
	at := time.Date(2026, 5, 1, 0, 0, 0, 0, time.UTC)
	env := openTemp(t, "clock", WithClock(func() time.Time { return at }))
	_, err := env.Put(ctx, "now", sampleRecord{Seq: 2})
	require.NoError(t, err)
	recs, err := env.Query(ctx, Query{})
	require.NoError(t, err)
	require.Len(t, recs, 1, "the refused records stored nothing")
	require.True(t, recs[0].Time.Equal(at))

	recs, err = env.Query(ctx, Query{Since: time.Date(2500, 1, 1, 0, 0, 0, 0, time.UTC)})
	require.NoError(t, err)
	require.Empty(t, recs, "no record is written after 2500")
	recs, err = env.Query(ctx, Query{Since: time.Date(1000, 1, 1, 0, 0, 0, 0, time.UTC)})
	require.NoError(t, err)
	require.Len(t, recs, 1, "every record is written after the year 1000")
}

func TestLogOrIndexThatIsNotAFileIsRefused(t *testing.T) {
	for _, side := range []string{"-wal", "-shm"} {
		dir := t.TempDir()
		path := filledEnvironment(t, dir, "sides", 1)
		require.NoError(t, os.Mkdir(path+side, 0o755))
		for _, opts := range [][]Option{{WithDir(dir)}, {WithDir(dir), ReadOnly()}} {
			_, err := Open("sides", opts...)
			require.ErrorIs(t, err, ErrNotEnvironment, side)
			require.ErrorContains(t, err, path+side+" is a directory")
		}
		// A link is named as one (it was "a L---------").
		require.NoError(t, os.Remove(path+side))
		require.NoError(t, os.Symlink(filepath.Join(t.TempDir(), "elsewhere"), path+side))
		_, err := Open("sides", WithDir(dir))
		require.ErrorIs(t, err, ErrNotEnvironment, side)
		require.ErrorContains(t, err, path+side+" is a symbolic link")
	}
}

// A reader opening an environment through a symbolic link finds the log
// where SQLite keeps it, next to the file the link points to, so it reads
// the records a writer has committed but not yet moved into the file.
func TestReadOnlyReaderThroughALinkReadsTheLog(t *testing.T) {
	ctx := context.Background()
	dir := t.TempDir()
	owner, err := Open("target", WithDir(dir))
	require.NoError(t, err)
	defer owner.Close()
	_, err = owner.Put(ctx, "in the log", sampleRecord{Seq: 1})
	require.NoError(t, err)
	linkDir := t.TempDir()
	require.NoError(t, os.Symlink(owner.Path(), filepath.Join(linkDir, "link.sqlite")))

	reader, err := Open("link", WithDir(linkDir), ReadOnly())
	require.NoError(t, err)
	defer reader.Close()
	recs, err := reader.Query(ctx, Query{})
	require.NoError(t, err)
	require.Len(t, recs, 1)
	_, err = owner.Put(ctx, "after the reader opened", sampleRecord{Seq: 2})
	require.NoError(t, err)
	recs, err = reader.Query(ctx, Query{})
	require.NoError(t, err)
	require.Len(t, recs, 2)
	require.Empty(t, sideFiles(t, filepath.Join(linkDir, "link.sqlite")), "no log next to the link")

	names, err := List(WithDir(linkDir))
	require.NoError(t, err)
	require.Equal(t, []string{"link"}, names, "List names what Open opens")
}

// A writer whose path is a link to a file not made yet makes the file and
// writes into it: the link was resolved only where the file already
// existed, so the writer looked for SQLite's log next to the link, found
// none there, and refused every Put with ErrReplaced ("its write-ahead log
// ... is gone"), losing the record.
func TestWriterThroughALinkToAFileNotYetMadeWrites(t *testing.T) {
	ctx := context.Background()
	targetDir, linkDir := t.TempDir(), t.TempDir()
	target := filepath.Join(targetDir, "target.sqlite")
	require.NoError(t, os.Symlink(target, filepath.Join(linkDir, "link.sqlite")))

	env, err := Open("link", WithDir(linkDir))
	require.NoError(t, err)
	_, err = env.Put(ctx, "first", sampleRecord{Seq: 1})
	require.NoError(t, err)
	_, err = env.Put(ctx, "second", sampleRecord{Seq: 2})
	require.NoError(t, err)
	recs, err := env.Query(ctx, Query{})
	require.NoError(t, err)
	require.Len(t, recs, 2)
	require.NoError(t, env.Close())

	info, err := os.Lstat(filepath.Join(linkDir, "link.sqlite"))
	require.NoError(t, err)
	require.NotZero(t, info.Mode()&fs.ModeSymlink, "the link stays a link")
	reader, err := Open("target", WithDir(targetDir), ReadOnly())
	require.NoError(t, err)
	defer reader.Close()
	recs, err = reader.Query(ctx, Query{})
	require.NoError(t, err)
	require.Len(t, recs, 2, "the records are in the file the link names")
}

// A link to a file in a directory that does not exist is refused naming
// the link's target; the refusal said it could still be read read-only,
// where there is nothing to read.
func TestWriterThroughALinkIntoNoDirectorySaysSo(t *testing.T) {
	dir := t.TempDir()
	target := filepath.Join(t.TempDir(), "no-such-dir", "target.sqlite")
	require.NoError(t, os.Symlink(target, filepath.Join(dir, "link.sqlite")))
	_, err := Open("link", WithDir(dir))
	require.ErrorIs(t, err, fs.ErrNotExist)
	require.ErrorContains(t, err, target)
	require.NotContains(t, err.Error(), "can still be read")
	require.NoDirExists(t, filepath.Dir(target), "nothing is made for the link")
}

// The unwritable test runs its checks as a user that owns neither the
// environments nor their directories: re-executed as nobody when the
// tests run as root (who may write anything), in process otherwise.
const unwritableDirVar = "VKRT_ENV_TEST_UNWRITABLE_DIR"

// checkUnwritable opens for writing an environment whose file the user
// cannot write ("file", in a directory anyone may write) and one whose
// directory it cannot write ("dir"), and reports what it found.
func checkUnwritable(dir string) error {
	for _, name := range []string{"file", "dir"} {
		path := filepath.Join(dir, name, name+".sqlite")
		env, err := Open(name, WithDir(filepath.Dir(path)))
		if err == nil {
			env.Close()
			return fmt.Errorf("%s: a writer opened an environment it cannot write", name)
		}
		if !errors.Is(err, fs.ErrPermission) || !strings.Contains(err.Error(), path) || !strings.Contains(err.Error(), "it can still be read, read-only") {
			return fmt.Errorf("%s: want fs.ErrPermission naming %s and that it can still be read, got %v", name, path, err)
		}
		// A writable file in a directory that is not: the directory is
		// named, where the file alone was blamed.
		if dirOf := "its directory " + filepath.Dir(path) + " is not writable"; name == "dir" && !strings.Contains(err.Error(), dirOf) {
			return fmt.Errorf("%s: want %q, got %v", name, dirOf, err)
		}
		for _, side := range []string{"-wal", "-shm", "-journal"} {
			if _, err := os.Lstat(path + side); err == nil {
				return fmt.Errorf("%s: the refused writer left %s", name, path+side)
			}
		}
	}
	// A new environment in a directory the user cannot write: there is
	// nothing to read, which the refusal said there was.
	path := filepath.Join(dir, "new", "new.sqlite")
	env, err := Open("new", WithDir(filepath.Dir(path)))
	if err == nil {
		env.Close()
		return fmt.Errorf("new: a writer made an environment in a directory it cannot write")
	}
	if !errors.Is(err, fs.ErrPermission) || !strings.Contains(err.Error(), path) || !strings.Contains(err.Error(), "does not exist") ||
		strings.Contains(err.Error(), "can still be read") {
		return fmt.Errorf("new: want fs.ErrPermission naming %s, saying it does not exist and not that it can be read, got %v", path, err)
	}
	if _, err := os.Lstat(path); err == nil {
		return fmt.Errorf("new: the refused writer made %s", path)
	}
	return nil
}

func TestWriterThatCannotWriteIsRefusedAndLeavesNothing(t *testing.T) {
	if dir := os.Getenv(unwritableDirVar); dir != "" {
		if err := checkUnwritable(dir); err != nil {
			fmt.Println("unwritable:", err)
			os.Exit(1)
		}
		os.Exit(0)
	}
	root, err := os.MkdirTemp("", "vkrt-unwritable-env-")
	require.NoError(t, err)
	t.Cleanup(func() { os.RemoveAll(root) })
	require.NoError(t, os.Chmod(root, 0o755))
	for _, name := range []string{"file", "dir"} {
		path := filledEnvironment(t, filepath.Join(root, name), name, 1)
		if name == "file" {
			require.NoError(t, os.Chmod(filepath.Dir(path), 0o777))
			require.NoError(t, os.Chmod(path, 0o444))
		} else {
			require.NoError(t, os.Chmod(path, 0o666))
			require.NoError(t, os.Chmod(filepath.Dir(path), 0o555))
		}
	}
	require.NoError(t, os.Mkdir(filepath.Join(root, "new"), 0o555))
	if os.Geteuid() != 0 {
		require.NoError(t, checkUnwritable(root))
		return
	}
	out, err := runAsNobody(t, root, "TestWriterThatCannotWriteIsRefusedAndLeavesNothing", unwritableDirVar+"="+root)
	require.NoError(t, err, "%s", out)
}

// A writer whose file is removed, or replaced by another file at its path,
// while it is open stops with ErrReplaced: before, its writes reported
// success and went into the file that went, or, through connections opened
// later, into the new one. Nothing is written into either, and opening the
// environment again writes into the file now at the path.
func TestAWriterWhoseFileIsReplacedStops(t *testing.T) {
	ctx := context.Background()
	dir := t.TempDir()
	other := filledEnvironment(t, t.TempDir(), "other", 3)
	for _, how := range []string{"removed", "replaced", "log-removed"} {
		t.Run(how, func(t *testing.T) {
			env, err := Open(how, WithDir(dir))
			require.NoError(t, err)
			defer env.Close()
			_, err = env.Put(ctx, "before", sampleRecord{Seq: 1})
			require.NoError(t, err)
			sides := []string{"", "-wal", "-shm"}
			if how == "log-removed" {
				// Writes would go into the unlinked log, which no reader
				// opening the path sees.
				sides = sides[1:]
			}
			for _, side := range sides {
				require.NoError(t, os.Remove(env.Path()+side))
			}
			if how == "replaced" {
				body, err := os.ReadFile(other)
				require.NoError(t, err)
				require.NoError(t, os.WriteFile(env.Path()+".new", body, 0o644))
				require.NoError(t, os.Rename(env.Path()+".new", env.Path()))
			}
			for range 3 {
				_, err = env.Put(ctx, "after", sampleRecord{Seq: 2})
				require.ErrorIs(t, err, ErrReplaced)
				require.ErrorContains(t, err, env.Path())
				// The name and "environment" once: it read
				// 'environment "removed": environment: file removed …'.
				require.True(t, strings.HasPrefix(err.Error(), fmt.Sprintf("environment %q: file removed or replaced while open: ", how)), "%v", err)
			}
			_, err = env.Query(ctx, Query{})
			require.ErrorIs(t, err, ErrReplaced, "a writer's reads stop too")
			require.NoError(t, env.Close())

			switch how {
			case "removed":
				_, err := os.Stat(env.Path())
				require.ErrorIs(t, err, fs.ErrNotExist, "no file is made again at the path")
				return
			case "log-removed":
				again, err := Open(how, WithDir(dir), ReadOnly())
				require.NoError(t, err)
				defer again.Close()
				got, err := again.Query(ctx, Query{})
				require.NoError(t, err)
				require.Len(t, got, 1, "the record before reaches the file at Close's checkpoint; none after was taken for written")
				require.Equal(t, "before", got[0].Label)
				return
			}
			again, err := Open(how, WithDir(dir))
			require.NoError(t, err)
			defer again.Close()
			got, err := again.Query(ctx, Query{})
			require.NoError(t, err)
			require.Len(t, got, 3, "the new file holds its own records, none of the stopped writer's")
			_, err = again.Put(ctx, "after", sampleRecord{Seq: 2})
			require.NoError(t, err)
		})
	}
}

// SQLite's own finding that a file went from under a connection (a write
// after the file was removed: SQLITE_READONLY_DBMOVED) is ErrReplaced, not
// a permission error telling the caller to open the file read-only.
func TestAFileMovedUnderSQLiteIsReplacedNotReadOnly(t *testing.T) {
	path := filepath.Join(t.TempDir(), "moved.sqlite")
	db, err := sql.Open("sqlite", path)
	require.NoError(t, err)
	defer db.Close()
	db.SetMaxOpenConns(1)
	_, err = db.Exec("CREATE TABLE t (x INTEGER)")
	require.NoError(t, err)
	require.NoError(t, os.Remove(path))
	_, err = db.Exec("INSERT INTO t VALUES (1)")
	require.Error(t, err)
	err = dbError(path, 0, err)
	require.ErrorIs(t, err, ErrReplaced)
	require.NotErrorIs(t, err, fs.ErrPermission)
}

// A row another program wrote with a time that is not an integer (SQLite
// keeps what a column is given) reads with the zero Time, and the rows
// around it as they are: scanned as an integer, it failed every query and
// Get of it.
func TestARowWhoseTimeIsNotANumberReadsWithNoTime(t *testing.T) {
	ctx := context.Background()
	dir := t.TempDir()
	path := filledEnvironment(t, dir, "foreign", 2)
	db, err := sql.Open("sqlite", path)
	require.NoError(t, err)
	_, err = db.Exec(`INSERT INTO records (kind, label, time_ns, body) VALUES ('sample', 'foreign', 'abc', '{}'), ('sample', 'real', 1.5, '{}')`)
	require.NoError(t, err)
	require.NoError(t, db.Close())

	env, err := Open("foreign", WithDir(dir), ReadOnly())
	require.NoError(t, err)
	defer env.Close()
	entries, err := env.Query(ctx, Query{})
	require.NoError(t, err)
	require.Len(t, entries, 4)
	for _, e := range entries[:2] {
		require.False(t, e.Time.IsZero(), "record %d", e.ID)
	}
	for _, e := range entries[2:] {
		require.True(t, e.Time.IsZero(), "record %d (%s) has a time it was not given: %v", e.ID, e.Label, e.Time)
	}
	got, err := env.Get(ctx, entries[2].ID)
	require.NoError(t, err)
	require.Equal(t, "foreign", got.Label)
	require.True(t, got.Time.IsZero())
	last, err := env.Query(ctx, Query{Last: 1})
	require.NoError(t, err)
	require.Len(t, last, 1)
	require.Equal(t, "real", last[0].Label)
}

// Records another program wrote with ids down to the least an integer key
// takes (-2^63) are listed, with Last too: the first was left out, and a
// Last reaching it listed nothing.
func TestRecordsOfNegativeIdsAreListed(t *testing.T) {
	ctx := context.Background()
	dir := t.TempDir()
	path := filledEnvironment(t, dir, "negative-ids", 3)
	db, err := sql.Open("sqlite", path)
	require.NoError(t, err)
	_, err = db.Exec(`INSERT INTO records (id, kind, label, time_ns, body) VALUES (-9223372036854775808, 'sample', 'least', 1, '{}'), (-5, 'sample', 'minus five', 1, '{}')`)
	require.NoError(t, err)
	require.NoError(t, db.Close())

	env, err := Open("negative-ids", WithDir(dir), ReadOnly())
	require.NoError(t, err)
	defer env.Close()
	labels := func(q Query) []string {
		entries, err := env.Query(ctx, q)
		require.NoError(t, err)
		var out []string
		for _, e := range entries {
			out = append(out, e.Label)
		}
		return out
	}
	all := []string{"least", "minus five", "record 0", "record 1", "record 2"}
	require.Equal(t, all, labels(Query{}))
	require.Equal(t, all, labels(Query{Last: 10}))
	require.Equal(t, all, labels(Query{Last: 5}))
	require.Equal(t, all[1:], labels(Query{Last: 4}))
	require.Equal(t, []string{"least"}, labels(Query{LabelGlob: "least"}))
}

// A row whose kind, label or body is NULL (another program loosened the
// schema) reads as empty, and the listing goes on past it: it failed the
// whole listing, every record with it.
func TestARowWithNullColumnsReadsAsEmpty(t *testing.T) {
	ctx := context.Background()
	dir := t.TempDir()
	path := filledEnvironment(t, dir, "nulls", 2)
	db, err := sql.Open("sqlite", path)
	require.NoError(t, err)
	db.SetMaxOpenConns(1)
	for _, stmt := range []string{
		"PRAGMA writable_schema = 1",
		`UPDATE sqlite_schema SET sql = replace(replace(replace(sql, 'kind    TEXT    NOT NULL', 'kind TEXT'), 'label   TEXT    NOT NULL', 'label TEXT'), 'body    TEXT    NOT NULL', 'body TEXT') WHERE name = 'records'`,
		"PRAGMA writable_schema = 0",
	} {
		_, err = db.Exec(stmt)
		require.NoError(t, err, stmt)
	}
	require.NoError(t, db.Close())
	db, err = sql.Open("sqlite", path)
	require.NoError(t, err)
	_, err = db.Exec(`INSERT INTO records (kind, label, time_ns, body) VALUES (NULL, 'no kind', 1, '{}'), ('sample', NULL, 1, '{}'), ('sample', 'no body', 1, NULL)`)
	require.NoError(t, err, "the schema takes NULLs now")
	require.NoError(t, db.Close())

	env, err := Open("nulls", WithDir(dir), ReadOnly())
	require.NoError(t, err)
	defer env.Close()
	entries, err := env.Query(ctx, Query{})
	require.NoError(t, err)
	require.Len(t, entries, 5)
	require.Equal(t, "", entries[2].Kind)
	require.Equal(t, "", entries[3].Label)
	require.Empty(t, entries[4].Body)
	var decoded int
	err = EachAs(ctx, env, Query{}, func(Typed[sampleRecord]) error { decoded++; return nil })
	require.Error(t, err, "the empty body is no record")
	require.Equal(t, 3, decoded, "the records before it decoded")
}

// A file marked as an environment of this schema whose records table
// another program dropped, renamed or changed is refused at a writer's
// Open (ErrNotEnvironment), and a reader's, and left as it is: the writer
// opened it and failed every write with SQLite's "no such table", and the
// reader every read.
func TestAnEnvironmentWhoseTableWasChangedIsRefused(t *testing.T) {
	for name, stmt := range map[string]string{
		"dropped": "DROP TABLE records",
		"renamed": "ALTER TABLE records RENAME TO r2",
		"no-body": "ALTER TABLE records DROP COLUMN body",
	} {
		t.Run(name, func(t *testing.T) {
			dir := t.TempDir()
			path := filledEnvironment(t, dir, name, 2)
			db, err := sql.Open("sqlite", path)
			require.NoError(t, err)
			_, err = db.Exec(stmt)
			require.NoError(t, err)
			require.NoError(t, db.Close())
			before, err := os.ReadFile(path)
			require.NoError(t, err)

			_, writerErr := Open(name, WithDir(dir))
			require.ErrorIs(t, writerErr, ErrNotEnvironment)
			require.ErrorContains(t, writerErr, "another program")
			// A reader is refused with the writer's words, where each
			// read failed with SQLite's "no such table".
			_, err = Open(name, WithDir(dir), ReadOnly())
			require.ErrorIs(t, err, ErrNotEnvironment)
			require.Equal(t, writerErr.Error(), err.Error())
			after, err := os.ReadFile(path)
			require.NoError(t, err)
			require.Equal(t, before, after, "the file is left as it was")
		})
	}
}

// A reader that finds beside the file a rollback journal, log and index
// SQLite cannot use (another program's) is told so, not told to open the
// file ReadOnly, as it did.
func TestAReaderBlockedByFilesBesideItSaysSo(t *testing.T) {
	dir := t.TempDir()
	path := filledEnvironment(t, dir, "beside", 2)
	for _, side := range []string{"-shm", "-journal"} {
		require.NoError(t, os.WriteFile(path+side, []byte(strings.Repeat("<!doctype html>", 500)), 0o644))
	}
	// A log of less than a header: one of more, whose header is no log's,
	// is ErrCorrupt.
	require.NoError(t, os.WriteFile(path+"-wal", []byte(strings.Repeat("<!doctype html>", 2)), 0o644))
	_, err := Open("beside", WithDir(dir), ReadOnly())
	require.ErrorIs(t, err, fs.ErrPermission)
	require.ErrorContains(t, err, "beside.sqlite-journal")
	require.NotContains(t, err.Error(), "it can still be read, read-only")
	require.NoError(t, os.Remove(path+"-journal"))
	env, err := Open("beside", WithDir(dir), ReadOnly())
	require.NoError(t, err, "without the journal the file reads")
	require.NoError(t, env.Close())
}

// A writer whose file is removed, or replaced by another environment's,
// while it is being opened (a refused vkrt run removing the environment
// it made, found empty) opens the file now at the path: Open of a removed
// one failed with "stat …: no such file or directory", or SQLite's "disk
// I/O error (1802)", matching no error kind.
func TestAWriterWhoseFileGoesWhileOpeningOpensItAgain(t *testing.T) {
	ctx := context.Background()
	other := filledEnvironment(t, t.TempDir(), "other", 2)
	for _, how := range []string{"removed", "replaced"} {
		t.Run(how, func(t *testing.T) {
			dir := t.TempDir()
			calls := 0
			afterPrepare = func(path string) {
				if calls++; calls > 1 {
					return
				}
				require.NoError(t, os.Remove(path))
				if how == "replaced" {
					data, err := os.ReadFile(other)
					require.NoError(t, err)
					require.NoError(t, os.WriteFile(path, data, 0o644))
				}
			}
			defer func() { afterPrepare = nil }()
			env, err := Open("going", WithDir(dir))
			require.NoError(t, err)
			defer env.Close()
			_, err = env.Put(ctx, "kept", sampleRecord{Seq: 1})
			require.NoError(t, err)
			reader, err := Open("going", WithDir(dir), ReadOnly())
			require.NoError(t, err)
			defer reader.Close()
			recs, err := reader.Query(ctx, Query{LabelGlob: "kept"})
			require.NoError(t, err)
			require.Len(t, recs, 1, "the record is in the file at the path")
		})
	}
}

// A writer is refused a file that has another name (a hard link): SQLite
// keeps the log beside the name a file was opened by, so a writer through
// the second name while one through the first had records in its log was
// refused the file as damaged ("fails SQLite's quick_check … .recover can
// salvage its records"), and two writers through the two damage it. The
// file is left as it was, and the first writer goes on.
func TestAWriterIsRefusedAFileOfSeveralNames(t *testing.T) {
	ctx := context.Background()
	dir := t.TempDir()
	a, err := Open("a", WithDir(dir))
	require.NoError(t, err)
	defer a.Close()
	_, err = a.Put(ctx, "first", sampleRecord{Seq: 1})
	require.NoError(t, err)
	require.NoError(t, os.Link(a.Path(), filepath.Join(dir, "b.sqlite")))
	before, err := os.ReadFile(a.Path())
	require.NoError(t, err)

	_, err = Open("b", WithDir(dir))
	require.ErrorIs(t, err, ErrHardLinked)
	require.NotErrorIs(t, err, ErrCorrupt)
	require.ErrorContains(t, err, filepath.Join(dir, "b.sqlite")+" has 2 names")
	after, err := os.ReadFile(a.Path())
	require.NoError(t, err)
	require.Equal(t, before, after, "the file is left as it was")
	_, err = os.Lstat(filepath.Join(dir, "b.sqlite-wal"))
	require.ErrorIs(t, err, fs.ErrNotExist, "no log beside the second name")

	_, err = a.Put(ctx, "second", sampleRecord{Seq: 2})
	require.NoError(t, err)
	require.NoError(t, a.Close())
	_, err = Open("a", WithDir(dir))
	require.ErrorIs(t, err, ErrHardLinked, "through the first name too")
	r, err := Open("b", WithDir(dir), ReadOnly())
	require.NoError(t, err, "a reader reads it")
	defer r.Close()
	got, err := r.Query(ctx, Query{})
	require.NoError(t, err)
	require.Len(t, got, 2)
}

// A file that starts as SQLite's do but is none (SQLite's 16-byte magic
// alone, or over zeros) is ErrNotEnvironment to a writer and to a reader,
// and left as it was: SQLite's "file is not a database", met as a
// connection opened, matched no error kind.
func TestAFileWithSQLitesMagicAloneIsNotAnEnvironment(t *testing.T) {
	dir := t.TempDir()
	for name, body := range map[string][]byte{
		"magic":       []byte("SQLite format 3\x00"),
		"magic-zeros": append([]byte("SQLite format 3\x00"), make([]byte, 84)...),
	} {
		path := filepath.Join(dir, name+".sqlite")
		require.NoError(t, os.WriteFile(path, body, 0o644))
		for _, opts := range [][]Option{{WithDir(dir)}, {WithDir(dir), ReadOnly()}} {
			env, err := Open(name, opts...)
			if err == nil {
				_, err = env.Query(context.Background(), Query{})
				env.Close()
			}
			require.ErrorIs(t, err, ErrNotEnvironment, "%s, %d options", name, len(opts))
			require.ErrorContains(t, err, path)
			got, rerr := os.ReadFile(path)
			require.NoError(t, rerr)
			require.Equal(t, body, got, "left as it was")
			require.Empty(t, sideFiles(t, path))
		}
	}
}

// A writer whose file is removed between Put's checks and its write (here:
// the clock removes it) stops with ErrReplaced saying the file is gone, and
// makes none at its path: a connection the pool opened then made an empty
// file there, an environment List named, and the error said the path held
// "another file than the one opened".
func TestAFileRemovedUnderAPutIsNotMadeAgain(t *testing.T) {
	dir := t.TempDir()
	var env *Env
	env, err := Open("removed", WithDir(dir), WithClock(func() time.Time {
		require.NoError(t, os.Remove(env.Path()))
		return time.Now()
	}))
	require.NoError(t, err)
	_, err = env.Put(context.Background(), "r", sampleRecord{Seq: 1})
	require.ErrorIs(t, err, ErrReplaced)
	require.ErrorContains(t, err, env.Path()+" is gone")
	require.NoError(t, env.Close())
	_, err = os.Stat(env.Path())
	require.ErrorIs(t, err, fs.ErrNotExist, "no file is made at the path")
	names, err := List(WithDir(dir))
	require.NoError(t, err)
	require.Empty(t, names)
}

// A nil context is refused with ErrNilContext by every call that takes
// one, of a writer and of a reader, where each panicked inside
// database/sql; nothing is written.
func TestNilContextIsRefused(t *testing.T) {
	dir := t.TempDir()
	filledEnvironment(t, dir, "nilctx", 1)
	var nilCtx context.Context
	_, err := OpenContext(nilCtx, "nilctx", WithDir(dir))
	require.ErrorIs(t, err, ErrNilContext)
	_, err = OpenContext(nilCtx, "fresh", WithDir(dir))
	require.ErrorIs(t, err, ErrNilContext)
	names, err := List(WithDir(dir))
	require.NoError(t, err)
	require.Equal(t, []string{"nilctx"}, names, "a refused open makes no file")

	for _, opts := range [][]Option{{WithDir(dir)}, {WithDir(dir), ReadOnly()}} {
		env, err := Open("nilctx", opts...)
		require.NoError(t, err)
		calls := map[string]func() error{
			"Put": func() error { _, err := env.Put(nilCtx, "l", sampleRecord{Seq: 1}); return err },
			"PutJSON": func() error {
				_, err := env.PutJSON(nilCtx, "sample", "l", []byte(`{}`))
				return err
			},
			"Get":   func() error { _, err := env.Get(nilCtx, 1); return err },
			"Kinds": func() error { _, err := env.Kinds(nilCtx); return err },
			"Each":  func() error { return env.Each(nilCtx, Query{}, func(Entry) error { return nil }) },
			"Query": func() error { _, err := env.Query(nilCtx, Query{}); return err },
			"QueryAs": func() error {
				_, err := QueryAs[sampleRecord](nilCtx, env, Query{})
				return err
			},
			"EachAs": func() error {
				return EachAs(nilCtx, env, Query{}, func(Typed[sampleRecord]) error { return nil })
			},
		}
		for name, call := range calls {
			if env.readOnly && strings.HasPrefix(name, "Put") {
				continue // ErrReadOnly first
			}
			require.NotPanics(t, func() { err = call() }, name)
			require.ErrorIs(t, err, ErrNilContext, name)
			require.ErrorContains(t, err, `environment "nilctx": nil context`, name)
		}
		require.NoError(t, env.Close())
	}
	env, err := Open("nilctx", WithDir(dir), ReadOnly())
	require.NoError(t, err)
	defer env.Close()
	n, err := env.Query(context.Background(), Query{})
	require.NoError(t, err)
	require.Len(t, n, 1, "nothing was written")
}

// nestedRecord has fields of every shape a body's value can be refused by.
type nestedRecord struct {
	Seq   int      `json:"seq"`
	Flag  bool     `json:"flag"`
	Small uint8    `json:"small"`
	Names []string `json:"names"`
	Inner struct {
		Level int16 `json:"level"`
	} `json:"inner"`
	Wrapped
	Addr netip.Addr `json:"addr"`
}

// Wrapped is embedded: its fields are nestedRecord's in the body.
type Wrapped struct {
	Count uint32 `json:"count"`
}

func (nestedRecord) Kind() string { return "nested" }

// A body whose values do not fit the record's fields is told in the
// body's terms: the field's JSON path, what it takes and what it holds;
// the errors named Go's types ("cannot unmarshal string into Go struct
// field sampleRecord.seq of type int", "*environment.sampleRecord"). The
// kinds still match.
func TestDecodeErrorsSpeakOfTheBodysFields(t *testing.T) {
	for body, want := range map[string]string{
		`{"seq":"x"}`:             `field "seq": want an integer from -9223372036854775808 to 9223372036854775807, got a string`,
		`{"flag":1}`:              `field "flag": want true or false, got a number`,
		`{"seq":true}`:            `field "seq": want an integer from -9223372036854775808 to 9223372036854775807, got true or false`,
		`{"small":300}`:           `field "small": the number 300 does not fit it: want an integer from 0 to 255`,
		`{"small":1.5}`:           `field "small": the number 1.5 does not fit it: want an integer from 0 to 255`,
		`{"names":[1]}`:           `field "names": want a string, got a number`,
		`{"names":{}}`:            `field "names": want an array, got an object`,
		`{"inner":{"level":"a"}}`: `field "inner.level": want an integer from -32768 to 32767, got a string`,
		`{"inner":{"level":4e4}}`: `field "inner.level": the number 4e4 does not fit it: want an integer from -32768 to 32767`,
		`{"inner":[]}`:            `field "inner": want an object, got an array`,
		`{"count":-1}`:            `field "count": the number -1 does not fit it: want an integer from 0 to 4294967295`,
		`{"addr":5}`:              `field "addr": want a string, got a number`,
		`[1]`:                     `the body: want an object, got an array`,
		`"text"`:                  `the body: want an object, got a string`,
	} {
		_, err := Decode[nestedRecord](Entry{ID: 7, Kind: "nested", Body: []byte(body)})
		require.EqualError(t, err, `environment: decoding record 7 (kind "nested"): `+want, body)
		for _, goWord := range []string{"Go ", "nestedRecord", "int16", "uint8", "struct"} {
			require.NotContains(t, err.Error(), goWord, body)
		}
		var typeErr *json.UnmarshalTypeError
		require.True(t, errors.As(err, &typeErr) || errors.Is(err, strictjson.ErrNumberDoesNotFit), "%s: the kind still matches", body)
	}
	_, err := Decode[nestedRecord](Entry{ID: 7, Kind: "nested", Body: []byte(`{"small":256}`)})
	require.ErrorIs(t, err, strictjson.ErrNumberDoesNotFit)
}

// Every exported method of a nil or zero *Env, and the functions that take
// one, return ErrNil where they return an error and their zero value
// otherwise, where each panicked with a nil dereference (Close too). The
// methods are listed by reflection, so one added later is held to it too.
func TestNilAndZeroEnvRefuseWithoutPanicking(t *testing.T) {
	errType := reflect.TypeFor[error]()
	ctxType := reflect.TypeFor[context.Context]()
	for _, env := range []*Env{nil, {}} {
		v := reflect.ValueOf(env)
		require.GreaterOrEqual(t, v.NumMethod(), 9)
		for i := range v.NumMethod() {
			m, name := v.Method(i), v.Type().Method(i).Name
			what := fmt.Sprintf("(nil: %v).%s", env == nil, name)
			args := make([]reflect.Value, m.Type().NumIn())
			for j := range args {
				switch in := m.Type().In(j); {
				case in == ctxType:
					args[j] = reflect.ValueOf(context.Background())
				case in == reflect.TypeFor[Record]():
					args[j] = reflect.ValueOf(sampleRecord{Seq: 1})
				default:
					args[j] = reflect.Zero(in)
				}
			}
			var out []reflect.Value
			require.NotPanics(t, func() { out = m.Call(args) }, what)
			for k, r := range out {
				if r.Type() == errType && k == len(out)-1 {
					err, _ := r.Interface().(error)
					require.ErrorIs(t, err, ErrNil, what)
				} else {
					require.True(t, r.IsZero(), "%s: result %d is %v, want the zero value", what, k, r)
				}
			}
		}
		ctx := context.Background()
		var err error
		require.NotPanics(t, func() { _, err = QueryAs[sampleRecord](ctx, env, Query{}) })
		require.ErrorIs(t, err, ErrNil)
		require.NotPanics(t, func() {
			err = EachAs(ctx, env, Query{}, func(Typed[sampleRecord]) error { return nil })
		})
		require.ErrorIs(t, err, ErrNil)
	}
}

// Each and EachAs given no function refuse the listing with
// ErrInvalidRecord, where each panicked at the first record; so does the
// client's EachMemoryRecord, which is EachAs.
func TestListingWithANilFunctionIsRefused(t *testing.T) {
	ctx := context.Background()
	dir := t.TempDir()
	filledEnvironment(t, dir, "nilfn", 2)
	for _, opts := range [][]Option{{WithDir(dir)}, {WithDir(dir), ReadOnly()}} {
		env, err := Open("nilfn", opts...)
		require.NoError(t, err)
		require.NotPanics(t, func() { err = env.Each(ctx, Query{}, nil) })
		require.ErrorIs(t, err, ErrInvalidRecord)
		require.ErrorContains(t, err, "no function (nil)")
		require.NotPanics(t, func() { err = EachAs[sampleRecord](ctx, env, Query{}, nil) })
		require.ErrorIs(t, err, ErrInvalidRecord)
		require.NoError(t, env.Close())
		require.ErrorIs(t, env.Each(ctx, Query{}, nil), ErrClosed, "a closed Env says so first")
	}
}

// WithDir("") is refused by Open, Path and List, where it stood for the
// default data directory: a caller whose directory was unset wrote its
// records where it never looked. It is an invalid option, as a negative
// WithBusyTimeout is, and both match ErrInvalidOption.
func TestWithAnEmptyDirIsRefused(t *testing.T) {
	dir := t.TempDir()
	t.Setenv(DirEnvVar, dir)
	_, err := Open("x", WithDir(""))
	require.ErrorIs(t, err, fs.ErrInvalid)
	require.ErrorIs(t, err, ErrInvalidOption)
	require.ErrorContains(t, err, "WithDir was given an empty directory")
	_, err = Open("x", WithDir(""), ReadOnly())
	require.ErrorIs(t, err, fs.ErrInvalid)
	_, err = Path("x", WithDir(""))
	require.ErrorIs(t, err, fs.ErrInvalid)
	_, err = List(WithDir(""))
	require.ErrorIs(t, err, fs.ErrInvalid)
	require.ErrorIs(t, err, ErrInvalidOption)
	_, err = Open("x", WithDir(dir), WithBusyTimeout(-time.Second))
	require.ErrorIs(t, err, ErrInvalidOption, "a negative busy timeout")
	require.ErrorContains(t, err, "WithBusyTimeout was given -1s, a negative timeout")
	entries, err := os.ReadDir(dir)
	require.NoError(t, err)
	require.Empty(t, entries, "nothing is made in the default directory")

	// A later WithDir replaces it, as any later option does.
	env, err := Open("x", WithDir(""), WithDir(dir))
	require.NoError(t, err)
	require.NoError(t, env.Close())
}

// Decode, QueryAs and EachAs asked to decode as an interface type (Record
// itself) refuse with ErrInvalidRecord, where asking the nil interface its
// kind panicked.
func TestDecodingAsAnInterfaceTypeIsRefused(t *testing.T) {
	ctx := context.Background()
	dir := t.TempDir()
	filledEnvironment(t, dir, "iface", 1)
	env, err := Open("iface", WithDir(dir), ReadOnly())
	require.NoError(t, err)
	defer env.Close()
	ents, err := env.Query(ctx, Query{})
	require.NoError(t, err)
	require.Len(t, ents, 1)
	require.NotPanics(t, func() { _, err = Decode[Record](ents[0]) })
	require.ErrorIs(t, err, ErrInvalidRecord)
	require.ErrorContains(t, err, "not as the interface type")
	require.NotPanics(t, func() { _, err = QueryAs[Record](ctx, env, Query{}) })
	require.ErrorIs(t, err, ErrInvalidRecord)
	require.NotPanics(t, func() { err = EachAs(ctx, env, Query{}, func(Typed[Record]) error { return nil }) })
	require.ErrorIs(t, err, ErrInvalidRecord)
}

// A nil Option given to Open, OpenContext, Path or List is refused with
// ErrInvalidOption, where calling it panicked, and nothing is made.
func TestANilOptionIsRefused(t *testing.T) {
	dir := t.TempDir()
	t.Setenv(DirEnvVar, dir)
	calls := map[string]func() error{
		"Open":        func() error { _, err := Open("x", WithDir(dir), nil); return err },
		"OpenContext": func() error { _, err := OpenContext(context.Background(), "x", nil, WithDir(dir)); return err },
		"ReadOnly":    func() error { _, err := Open("x", ReadOnly(), nil); return err },
		"Path":        func() error { _, err := Path("x", nil); return err },
		"List":        func() error { _, err := List(nil); return err },
	}
	for name, call := range calls {
		var err error
		require.NotPanics(t, func() { err = call() }, name)
		require.ErrorIs(t, err, ErrInvalidOption, name)
		require.ErrorContains(t, err, "is nil", name)
	}
	_, err := Open("x", WithDir(dir), nil)
	require.EqualError(t, err, `environment "x": opening: invalid option: option 2 of the 2 given is nil`)
	entries, err := os.ReadDir(dir)
	require.NoError(t, err)
	require.Empty(t, entries, "nothing is made")
}

// floatRecord holds a float, which JSON cannot encode when it is NaN.
type floatRecord struct {
	F float64 `json:"f"`
}

func (floatRecord) Kind() string { return "float" }

// A record JSON cannot encode is refused with ErrInvalidRecord, as other
// records that cannot be stored are, where its error was of no kind, and
// nothing is stored.
func TestPutRefusesARecordJSONCannotEncode(t *testing.T) {
	ctx := context.Background()
	env, err := Open("nan", WithDir(t.TempDir()))
	require.NoError(t, err)
	defer env.Close()
	_, err = env.Put(ctx, "nan", floatRecord{F: math.NaN()})
	require.ErrorIs(t, err, ErrInvalidRecord)
	require.EqualError(t, err, `environment: invalid record: encoding environment.floatRecord record "nan": json: unsupported value: NaN`)
	kinds, err := env.Kinds(ctx)
	require.NoError(t, err)
	require.Empty(t, kinds, "nothing is stored")
}
