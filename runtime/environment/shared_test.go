package environment

import (
	"bytes"
	"context"
	"database/sql"
	"errors"
	"fmt"
	"io/fs"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	"github.com/stretchr/testify/require"
)

// The first-open test re-executes the test binary as several processes
// opening one new environment at once.
const (
	firstOpenDirVar   = "VKRT_ENV_TEST_FIRST_OPEN_DIR"
	firstOpenAtVar    = "VKRT_ENV_TEST_FIRST_OPEN_AT"
	firstOpenLabelVar = "VKRT_ENV_TEST_FIRST_OPEN_LABEL"
)

func runFirstOpenChild(dir, label string, at int64) {
	for time.Now().UnixNano() < at {
		// spin so the processes reach Open within microseconds of each other
	}
	env, err := Open("fresh", WithDir(dir))
	if err != nil {
		fmt.Fprintln(os.Stderr, "open:", err)
		os.Exit(2)
	}
	if _, err := env.Put(context.Background(), label, sampleRecord{Seq: 1, Note: label}); err != nil {
		fmt.Fprintln(os.Stderr, "put:", err)
		os.Exit(3)
	}
	if err := env.Close(); err != nil {
		fmt.Fprintln(os.Stderr, "close:", err)
		os.Exit(4)
	}
	os.Exit(0)
}

func TestConcurrentFirstOpenByProcessesNeverFailsNorLosesRecords(t *testing.T) {
	if dir := os.Getenv(firstOpenDirVar); dir != "" {
		at, err := strconv.ParseInt(os.Getenv(firstOpenAtVar), 10, 64)
		require.NoError(t, err)
		runFirstOpenChild(dir, os.Getenv(firstOpenLabelVar), at)
		return
	}
	trials, procs := 40, 4
	if testing.Short() {
		trials = 16
	}
	for trial := range trials {
		dir := filepath.Join(t.TempDir(), "env")
		at := time.Now().Add(300 * time.Millisecond).UnixNano()
		cmds := make([]*exec.Cmd, procs)
		outs := make([][]byte, procs)
		var wg sync.WaitGroup
		for p := range cmds {
			cmd := exec.Command(os.Args[0], "-test.run=^TestConcurrentFirstOpenByProcessesNeverFailsNorLosesRecords$")
			cmd.Env = append(os.Environ(), firstOpenDirVar+"="+dir, firstOpenAtVar+"="+strconv.FormatInt(at, 10),
				firstOpenLabelVar+"="+fmt.Sprintf("process %d", p))
			cmds[p] = cmd
			wg.Go(func() { outs[p], _ = cmd.CombinedOutput() })
		}
		wg.Wait()
		for p, cmd := range cmds {
			require.True(t, cmd.ProcessState.Success(), "trial %d: process %d failed: %s", trial, p, outs[p])
		}
		env, err := Open("fresh", WithDir(dir), ReadOnly())
		require.NoError(t, err)
		recs, err := QueryAs[sampleRecord](context.Background(), env, Query{})
		require.NoError(t, err)
		require.Len(t, recs, procs, "trial %d: every process's record is kept", trial)
		require.NoError(t, env.Close())
	}
}

func TestDataDirectoryIsNeverURIDecoded(t *testing.T) {
	ctx := context.Background()
	for _, name := range []string{"p%41q", "q?mode=memory", "h#frag", "sp ace", "pct%", "amp&x=1"} {
		root := t.TempDir()
		dir := filepath.Join(root, name)
		env, err := Open("records", WithDir(dir))
		require.NoError(t, err, name)
		_, err = env.Put(ctx, "here", sampleRecord{Seq: 1})
		require.NoError(t, err, name)
		require.NoError(t, env.Close())

		entries, err := os.ReadDir(root)
		require.NoError(t, err)
		require.Len(t, entries, 1, "%s: nothing is written outside the named directory", name)
		require.Equal(t, name, entries[0].Name())
		info, err := os.Stat(filepath.Join(dir, "records.sqlite"))
		require.NoError(t, err, name)
		require.Positive(t, info.Size(), name)

		for _, opts := range [][]Option{{WithDir(dir)}, {WithDir(dir), ReadOnly()}} {
			again, err := Open("records", opts...)
			require.NoError(t, err, name)
			recs, err := again.Query(ctx, Query{})
			require.NoError(t, err, name)
			require.Len(t, recs, 1, "%s: the record is read back from the same file", name)
			require.NoError(t, again.Close())
		}
	}
}

func TestDataDirectoryFromEnvironmentVariableIsNeverURIDecoded(t *testing.T) {
	root := t.TempDir()
	dir := filepath.Join(root, "p%41q")
	t.Setenv(DirEnvVar, dir)
	env, err := Open("records")
	require.NoError(t, err)
	_, err = env.Put(context.Background(), "here", sampleRecord{Seq: 1})
	require.NoError(t, err)
	require.NoError(t, env.Close())
	_, err = os.Stat(filepath.Join(dir, "records.sqlite"))
	require.NoError(t, err)
	_, err = os.Stat(filepath.Join(root, "pAq"))
	require.ErrorIs(t, err, fs.ErrNotExist)
}

// sideFiles lists what sits next to an environment's file.
func sideFiles(t *testing.T, path string) []string {
	t.Helper()
	var out []string
	for _, suffix := range []string{"-wal", "-shm", "-journal"} {
		if _, err := os.Lstat(path + suffix); err == nil {
			out = append(out, suffix)
		}
	}
	return out
}

func TestReadOnlyReaderCreatesNothingAndNeverBlocksTheOwner(t *testing.T) {
	ctx := context.Background()
	dir := t.TempDir()
	owner, err := Open("shared", WithDir(dir))
	require.NoError(t, err)
	_, err = owner.Put(ctx, "first", sampleRecord{Seq: 1})
	require.NoError(t, err)
	require.NoError(t, owner.Close())
	path := filepath.Join(dir, "shared.sqlite")
	require.Empty(t, sideFiles(t, path), "a clean close leaves no log")
	before, err := os.ReadFile(path)
	require.NoError(t, err)

	// No writer: the reader reads the main file and creates nothing.
	reader, err := Open("shared", WithDir(dir), ReadOnly())
	require.NoError(t, err)
	recs, err := reader.Query(ctx, Query{})
	require.NoError(t, err)
	require.Len(t, recs, 1)
	require.Empty(t, sideFiles(t, path), "a reader creates no -wal or -shm of its own")
	_, err = reader.Put(ctx, "nope", sampleRecord{})
	require.ErrorIs(t, err, ErrReadOnly)
	require.EqualError(t, err, `environment "shared": opened read-only`)

	// A writer appears while the reader is open: it writes, and the reader
	// sees its records.
	owner, err = Open("shared", WithDir(dir))
	require.NoError(t, err)
	_, err = owner.Put(ctx, "second", sampleRecord{Seq: 2})
	require.NoError(t, err, "an open reader never blocks the owner")
	recs, err = reader.Query(ctx, Query{})
	require.NoError(t, err)
	require.Len(t, recs, 2, "the reader sees the record the writer committed since")

	// A reader opened while the writer is active reads through the log.
	second, err := Open("shared", WithDir(dir), ReadOnly())
	require.NoError(t, err)
	_, err = owner.Put(ctx, "third", sampleRecord{Seq: 3})
	require.NoError(t, err, "a reader with the log open never blocks the owner")
	recs, err = second.Query(ctx, Query{})
	require.NoError(t, err)
	require.Len(t, recs, 3)
	require.NoError(t, second.Close())
	require.NoError(t, reader.Close())
	_, err = owner.Put(ctx, "fourth", sampleRecord{Seq: 4})
	require.NoError(t, err)
	require.NoError(t, owner.Close())
	require.Empty(t, sideFiles(t, path), "the owner's last close removes its log: no reader kept one")

	after, err := os.ReadFile(path)
	require.NoError(t, err)
	require.NotEqual(t, before, after)
}

func TestReadOnlyOpenWorksInADirectoryTheReaderCannotWrite(t *testing.T) {
	ctx := context.Background()
	dir := filepath.Join(t.TempDir(), "ro")
	owner, err := Open("locked", WithDir(dir))
	require.NoError(t, err)
	_, err = owner.Put(ctx, "kept", sampleRecord{Seq: 1})
	require.NoError(t, err)
	require.NoError(t, owner.Close())
	require.NoError(t, os.Chmod(filepath.Join(dir, "locked.sqlite"), 0o444))
	require.NoError(t, os.Chmod(dir, 0o555))
	t.Cleanup(func() { os.Chmod(dir, 0o755) })

	reader, err := Open("locked", WithDir(dir), ReadOnly())
	require.NoError(t, err)
	recs, err := reader.Query(ctx, Query{})
	require.NoError(t, err)
	require.Len(t, recs, 1)
	require.NoError(t, reader.Close())
	require.Empty(t, sideFiles(t, filepath.Join(dir, "locked.sqlite")))
}

func TestReadOnlyOpenOfAnEmptyFileWritesNothing(t *testing.T) {
	dir := t.TempDir()
	path := filepath.Join(dir, "empty.sqlite")
	require.NoError(t, os.WriteFile(path, nil, 0o644))
	env, err := Open("empty", WithDir(dir), ReadOnly())
	require.NoError(t, err)
	recs, err := env.Query(context.Background(), Query{})
	require.NoError(t, err)
	require.Empty(t, recs)
	_, err = env.Get(context.Background(), 1)
	require.ErrorIs(t, err, ErrNoRecord)
	require.NoError(t, env.Close())
	info, err := os.Stat(path)
	require.NoError(t, err)
	require.Zero(t, info.Size(), "no schema is written into an empty file by a reader")
	require.Empty(t, sideFiles(t, path))
}

func TestOpenRefusesAFIFOWithoutBlocking(t *testing.T) {
	dir := t.TempDir()
	path := filepath.Join(dir, "pipe.sqlite")
	require.NoError(t, syscall.Mkfifo(path, 0o644))
	for _, opts := range [][]Option{{WithDir(dir)}, {WithDir(dir), ReadOnly()}, {WithDir(dir), WithoutCreate()}} {
		done := make(chan error, 1)
		go func() {
			_, err := Open("pipe", opts...)
			done <- err
		}()
		select {
		case err := <-done:
			require.ErrorIs(t, err, ErrNotEnvironment)
			require.ErrorContains(t, err, "named pipe")
		case <-time.After(10 * time.Second):
			t.Fatal("opening a FIFO as an environment hangs")
		}
	}
}

// The other-user test re-executes a copy of the test binary as an
// unprivileged user that can read the environment but not write its
// directory.
const otherUserDirVar = "VKRT_ENV_TEST_OTHER_USER_DIR"

func runOtherUserReader(dir string) {
	env, err := Open("shared", WithDir(dir), ReadOnly())
	if err != nil {
		fmt.Fprintln(os.Stderr, "open:", err)
		os.Exit(2)
	}
	recs, err := env.Query(context.Background(), Query{})
	if err != nil {
		fmt.Fprintln(os.Stderr, "query:", err)
		os.Exit(3)
	}
	fmt.Printf("records %d\n", len(recs))
	os.Exit(0)
}

// TestReaderOfAnotherUserNeverBreaksTheOwner is the shared-directory case
// for real: the owner writes records in its directory, another user (who
// cannot write there) reads them while the owner has the environment open
// and while it has not, and the owner's next writes succeed with no file
// in the directory belonging to the reader.
func TestReaderOfAnotherUserNeverBreaksTheOwner(t *testing.T) {
	if dir := os.Getenv(otherUserDirVar); dir != "" {
		runOtherUserReader(dir)
		return
	}
	if os.Geteuid() != 0 {
		t.Skip("running a reader as another user needs root; TestReadOnlyOpenWorksInADirectoryTheReaderCannotWrite covers this user")
	}
	ctx := context.Background()
	root, err := os.MkdirTemp("", "vkrt-shared-env-")
	require.NoError(t, err)
	t.Cleanup(func() { os.RemoveAll(root) })
	require.NoError(t, os.Chmod(root, 0o755))
	dir := filepath.Join(root, "env")
	read := func() string {
		out, err := runAsNobody(t, root, "TestReaderOfAnotherUserNeverBreaksTheOwner", otherUserDirVar+"="+dir)
		require.NoError(t, err, "the other user's reader: %s", out)
		return out
	}
	owner, err := Open("shared", WithDir(dir))
	require.NoError(t, err)
	_, err = owner.Put(ctx, "first", sampleRecord{Seq: 1})
	require.NoError(t, err)
	require.Contains(t, read(), "records 1", "read while the owner has it open")
	_, err = owner.Put(ctx, "second", sampleRecord{Seq: 2})
	require.NoError(t, err, "the owner writes after the other user read")
	require.NoError(t, owner.Close())

	require.Contains(t, read(), "records 2", "read with no writer")
	owner, err = Open("shared", WithDir(dir))
	require.NoError(t, err)
	_, err = owner.Put(ctx, "third", sampleRecord{Seq: 3})
	require.NoError(t, err, "the owner writes after the other user read")
	require.NoError(t, owner.Close())

	entries, err := os.ReadDir(dir)
	require.NoError(t, err)
	for _, e := range entries {
		info, err := e.Info()
		require.NoError(t, err)
		st, ok := info.Sys().(*syscall.Stat_t)
		require.True(t, ok)
		require.NotEqual(t, uint32(nobody), st.Uid, "%s belongs to the reader", e.Name())
	}
}

func TestReadOnlyEnvironmentIsSafeForConcurrentReadsWhileTheOwnerWrites(t *testing.T) {
	ctx := context.Background()
	dir := t.TempDir()
	owner, err := Open("busy", WithDir(dir))
	require.NoError(t, err)
	_, err = owner.Put(ctx, "seed", sampleRecord{Seq: 0})
	require.NoError(t, err)
	require.NoError(t, owner.Close())

	reader, err := Open("busy", WithDir(dir), ReadOnly())
	require.NoError(t, err)
	defer reader.Close()
	owner, err = Open("busy", WithDir(dir))
	require.NoError(t, err)
	defer owner.Close()
	const writes = 40
	var wg sync.WaitGroup
	errs := make(chan error, 4*writes)
	wg.Go(func() {
		for i := 1; i <= writes; i++ {
			if _, err := owner.Put(ctx, "w", sampleRecord{Seq: i}); err != nil {
				errs <- err
			}
		}
	})
	for range 3 {
		wg.Go(func() {
			last := 0
			for range writes {
				recs, err := reader.Query(ctx, Query{})
				if err != nil {
					errs <- err
					return
				}
				if len(recs) < last {
					errs <- fmt.Errorf("a later read saw %d records, an earlier one %d", len(recs), last)
				}
				last = len(recs)
			}
		})
	}
	wg.Wait()
	close(errs)
	for err := range errs {
		require.NoError(t, err)
	}
	recs, err := reader.Query(ctx, Query{})
	require.NoError(t, err)
	require.Len(t, recs, writes+1)
}

// dirContents maps each file in dir to its bytes.
func dirContents(t *testing.T, dir string) map[string][]byte {
	t.Helper()
	entries, err := os.ReadDir(dir)
	require.NoError(t, err)
	out := make(map[string][]byte, len(entries))
	for _, e := range entries {
		data, err := os.ReadFile(filepath.Join(dir, e.Name()))
		require.NoError(t, err)
		out[e.Name()] = data
	}
	return out
}

// logWithoutIndex leaves in a new directory an environment "copied" whose
// records (n of them) are committed only in its write-ahead log, with no
// shared-memory index next to it: what copying the file and its log while
// a writer has them open gives. It returns the directory.
func logWithoutIndex(t *testing.T, n int) string {
	t.Helper()
	ctx := context.Background()
	src, dst := t.TempDir(), t.TempDir()
	writer, err := Open("copied", WithDir(src))
	require.NoError(t, err)
	for i := range n {
		_, err := writer.Put(ctx, fmt.Sprintf("seq %d", i), sampleRecord{Seq: i})
		require.NoError(t, err)
	}
	from, to := filepath.Join(src, "copied.sqlite"), filepath.Join(dst, "copied.sqlite")
	require.NoError(t, copyFile(from, to))
	require.NoError(t, copyFile(from+"-wal", to+"-wal"))
	require.NoError(t, writer.Close())
	require.Equal(t, []string{"-wal"}, sideFiles(t, to))

	// The main file alone holds the schema and none of the records.
	db, err := sql.Open("sqlite", "file:"+to+"?mode=ro&immutable=1")
	require.NoError(t, err)
	var inMain int
	require.NoError(t, db.QueryRow("SELECT count(*) FROM records").Scan(&inMain))
	require.NoError(t, db.Close())
	require.Zero(t, inMain, "the records must be in the log only")
	return dst
}

func TestReadOnlyReaderReadsRecordsCommittedOnlyInALogWithoutItsIndex(t *testing.T) {
	ctx := context.Background()
	const n = 5
	dir := logWithoutIndex(t, n)
	before := dirContents(t, dir)
	tmp := t.TempDir()
	t.Setenv("TMPDIR", tmp)

	reader, err := Open("copied", WithDir(dir), ReadOnly())
	require.NoError(t, err)
	recs, err := QueryAs[sampleRecord](ctx, reader, Query{})
	require.NoError(t, err)
	require.Len(t, recs, n, "every record committed in the log is read")
	for i, r := range recs {
		require.Equal(t, i, r.Value.Seq)
	}
	got, err := reader.Get(ctx, recs[n-1].ID)
	require.NoError(t, err)
	require.Equal(t, "seq 4", got.Label)
	require.Equal(t, before, dirContents(t, dir), "reading creates, changes and checkpoints nothing in the directory")
	copies, err := os.ReadDir(tmp)
	require.NoError(t, err)
	require.Len(t, copies, 1, "the log is read from a private copy")
	require.NoError(t, reader.Close())
	require.Equal(t, before, dirContents(t, dir), "closing leaves the directory as it was")
	copies, err = os.ReadDir(tmp)
	require.NoError(t, err)
	require.Empty(t, copies, "closing removes the private copy")
}

func TestReadOnlyReaderOfALogWithoutItsIndexNeverSaysTheFileKeptChanging(t *testing.T) {
	ctx := context.Background()
	const n = 3
	emptyLog := t.TempDir()
	writer, err := Open("copied", WithDir(emptyLog))
	require.NoError(t, err)
	for i := range n {
		_, err := writer.Put(ctx, "checkpointed", sampleRecord{Seq: i})
		require.NoError(t, err)
	}
	require.NoError(t, writer.Close())
	// An empty log with no index: what a copy made just after a writer
	// reset its log leaves. Every record is in the file.
	require.NoError(t, os.WriteFile(filepath.Join(emptyLog, "copied.sqlite-wal"), nil, 0o644))

	for _, dir := range []string{logWithoutIndex(t, n), emptyLog} {
		reader, err := Open("copied", WithDir(dir), ReadOnly())
		require.NoError(t, err, dir)
		for range 3 {
			recs, err := reader.Query(ctx, Query{})
			require.NoError(t, err, dir)
			require.Len(t, recs, n, dir)
		}
		_, err = reader.Get(ctx, 99)
		require.ErrorIs(t, err, ErrNoRecord, dir)
		require.NotContains(t, err.Error(), "kept changing")
		require.NoError(t, reader.Close())
		require.Equal(t, []string{"-wal"}, sideFiles(t, filepath.Join(dir, "copied.sqlite")), dir)
	}
}

func TestReadOnlyReaderOfALogWithoutItsIndexSeesAWriterThatAppearsLater(t *testing.T) {
	ctx := context.Background()
	const n = 4
	dir := logWithoutIndex(t, n)
	reader, err := Open("copied", WithDir(dir), ReadOnly())
	require.NoError(t, err)
	defer reader.Close()
	recs, err := reader.Query(ctx, Query{})
	require.NoError(t, err)
	require.Len(t, recs, n)

	writer, err := Open("copied", WithDir(dir))
	require.NoError(t, err)
	_, err = writer.Put(ctx, "later", sampleRecord{Seq: n})
	require.NoError(t, err)
	recs, err = reader.Query(ctx, Query{})
	require.NoError(t, err)
	require.Len(t, recs, n+1, "the reader sees what the writer committed since")
	require.NoError(t, writer.Close())
	recs, err = reader.Query(ctx, Query{})
	require.NoError(t, err)
	require.Len(t, recs, n+1)
}

func TestReadOnlyReaderFollowsAWriterWhoseIndexWasRemoved(t *testing.T) {
	ctx := context.Background()
	dir := t.TempDir()
	path := filepath.Join(dir, "live.sqlite")
	writer, err := Open("live", WithDir(dir))
	require.NoError(t, err)
	defer writer.Close()
	_, err = writer.Put(ctx, "first", sampleRecord{Seq: 1})
	require.NoError(t, err)
	require.NoError(t, os.Remove(path+"-shm"))

	reader, err := Open("live", WithDir(dir), ReadOnly())
	require.NoError(t, err)
	defer reader.Close()
	recs, err := reader.Query(ctx, Query{})
	require.NoError(t, err)
	require.Len(t, recs, 1)
	_, err = writer.Put(ctx, "second", sampleRecord{Seq: 2})
	require.NoError(t, err)
	recs, err = reader.Query(ctx, Query{})
	require.NoError(t, err)
	require.Len(t, recs, 2, "the reader sees a commit made after it opened")
	require.Equal(t, []string{"-wal"}, sideFiles(t, path), "the reader put no index back")
}

func TestReadOnlyOpenOfALogWithoutItsIndexThatCannotBeCopiedFailsClearly(t *testing.T) {
	dir := logWithoutIndex(t, 2)
	before := dirContents(t, dir)
	t.Setenv("TMPDIR", filepath.Join(t.TempDir(), "missing"))
	_, err := Open("copied", WithDir(dir), ReadOnly())
	require.ErrorIs(t, err, ErrLogNotCopied)
	path := filepath.Join(dir, "copied.sqlite")
	require.ErrorContains(t, err, path+"-wal")
	require.ErrorContains(t, err, path+"-shm")
	require.ErrorContains(t, err, "TMPDIR")
	require.NotErrorIs(t, err, fs.ErrNotExist, "the environment exists; only the copy could not be made")
	require.Equal(t, before, dirContents(t, dir), "a failed open changes nothing")
}

// openFiles counts the process's open file descriptors.
func openFiles(t *testing.T) int {
	t.Helper()
	fds, err := os.ReadDir("/proc/self/fd")
	if err != nil {
		t.Skipf("no /proc/self/fd to count open files: %v", err)
	}
	return len(fds)
}

// A long-lived reader opens the environment again each time a writer has
// changed it; the pool it replaces is closed once no read uses it. Every
// pool was kept open until Close: 100 writers, each opening, writing a
// record and closing, left the reader holding 100 more open files.
func TestReadOnlyReaderClosesThePoolsItReplaces(t *testing.T) {
	ctx := context.Background()
	dir := t.TempDir()
	put := func(seq int) {
		w, err := Open("e", WithDir(dir))
		require.NoError(t, err)
		_, err = w.Put(ctx, "x", sampleRecord{Seq: seq})
		require.NoError(t, err)
		require.NoError(t, w.Close())
	}
	put(0)
	r, err := Open("e", WithDir(dir), ReadOnly())
	require.NoError(t, err)
	defer r.Close()
	_, err = r.Query(ctx, Query{})
	require.NoError(t, err)
	before := openFiles(t)
	const writers = 100
	for i := 1; i <= writers; i++ {
		put(i)
		recs, err := r.Query(ctx, Query{})
		require.NoError(t, err)
		require.Len(t, recs, i+1)
	}
	require.LessOrEqual(t, openFiles(t), before+2, "open files after %d writers came and went", writers)
}

// A log without its index is copied only as far as SQLite reads it: a log
// of four records followed by a gigabyte of zeros (truncate -s 1G) was
// copied whole into the temporary directory.
func TestReadOnlyReaderCopiesOnlyTheLogsCommittedFrames(t *testing.T) {
	ctx := context.Background()
	const n = 4
	dir := logWithoutIndex(t, n)
	log := filepath.Join(dir, "copied.sqlite-wal")
	info, err := os.Stat(log)
	require.NoError(t, err)
	valid := info.Size()
	require.NoError(t, os.Truncate(log, 1<<30))
	tmp := t.TempDir()
	t.Setenv("TMPDIR", tmp)

	reader, err := Open("copied", WithDir(dir), ReadOnly())
	require.NoError(t, err)
	defer reader.Close()
	recs, err := reader.Query(ctx, Query{})
	require.NoError(t, err)
	require.Len(t, recs, n, "every committed record is read")
	require.Len(t, reader.copies, 1)
	copied, err := os.Stat(filepath.Join(reader.copies[0], "copied.sqlite-wal"))
	require.NoError(t, err)
	require.LessOrEqual(t, copied.Size(), valid, "the copy of a %d B log padded to 1 GiB", valid)
	require.Positive(t, copied.Size())
}

// A log whose header is not a log's holds frames SQLite reads as none, and
// a writer starts it again over them: a reader listed no records and said
// nothing. Reader and writer are refused it with ErrCorrupt, and it stays.
func TestALogOfGarbageIsRefusedAsDamaged(t *testing.T) {
	dir := logWithoutIndex(t, 2)
	log := filepath.Join(dir, "copied.sqlite-wal")
	garbage := bytes.Repeat([]byte{0x5a}, 1<<20)
	require.NoError(t, os.WriteFile(log, garbage, 0o644))
	t.Setenv("TMPDIR", t.TempDir())
	for _, opts := range [][]Option{{WithDir(dir), ReadOnly()}, {WithDir(dir)}} {
		_, err := Open("copied", opts...)
		require.ErrorIs(t, err, ErrCorrupt)
		require.EqualError(t, err, `environment "copied": file is damaged: the write-ahead log `+log+` of `+
			filepath.Join(dir, "copied.sqlite")+` has a damaged header: SQLite would read its 1048576 bytes as no records, `+
			`and a writer would start it again over them; both are left as they are (remove the log to open the file `+
			`without the records it held)`)
		after, err := os.ReadFile(log)
		require.NoError(t, err)
		require.Equal(t, garbage, after)
	}
	// A file that is no SQLite file is told as such, whatever lies beside it.
	path := filepath.Join(dir, "copied.sqlite")
	main, err := os.ReadFile(path)
	require.NoError(t, err)
	require.NoError(t, os.WriteFile(path, []byte("not an environment at all"), 0o644))
	_, err = Open("copied", WithDir(dir), ReadOnly())
	require.ErrorIs(t, err, ErrNotEnvironment)
	require.NoError(t, os.WriteFile(path, main, 0o644))

	require.NoError(t, os.Remove(log))
	reader, err := Open("copied", WithDir(dir), ReadOnly())
	require.NoError(t, err)
	defer reader.Close()
	recs, err := reader.Query(context.Background(), Query{})
	require.NoError(t, err)
	require.Empty(t, recs, "the records were in the log")
}

// A log whose header's checksum was damaged, beside the file it belongs
// to, is refused as well: SQLite read the file without the log's records.
func TestALogWithADamagedHeaderIsRefused(t *testing.T) {
	dir := logWithoutIndex(t, 3)
	log := filepath.Join(dir, "copied.sqlite-wal")
	data, err := os.ReadFile(log)
	require.NoError(t, err)
	data[25] ^= 0xff
	require.NoError(t, os.WriteFile(log, data, 0o644))
	for _, opts := range [][]Option{{WithDir(dir), ReadOnly()}, {WithDir(dir)}} {
		_, err := Open("copied", opts...)
		require.ErrorIs(t, err, ErrCorrupt)
		require.ErrorContains(t, err, "has a damaged header")
		after, err := os.ReadFile(log)
		require.NoError(t, err)
		require.Equal(t, data, after, "the log is left as it was")
	}
}

// A log holding records beside a file that is empty (truncated, or
// replaced by an empty one) or missing: SQLite reads the file as a new
// database and deletes the log, so a reader listed no records and a writer
// erased them. Both are refused with ErrCorrupt, and the log stays.
func TestALogBesideAnEmptyOrMissingFileIsRefused(t *testing.T) {
	for _, missing := range []bool{false, true} {
		dir := logWithoutIndex(t, 3)
		path := filepath.Join(dir, "copied.sqlite")
		log := path + "-wal"
		data, err := os.ReadFile(log)
		require.NoError(t, err)
		if missing {
			require.NoError(t, os.Remove(path))
		} else {
			require.NoError(t, os.Truncate(path, 0))
		}
		for _, opts := range [][]Option{{WithDir(dir), ReadOnly()}, {WithDir(dir)}} {
			_, err := Open("copied", opts...)
			require.ErrorIs(t, err, ErrCorrupt, "missing %v", missing)
			want := path + " is empty, but its write-ahead log " + log
			if missing {
				want = path + " does not exist (file does not exist), but its write-ahead log " + log
				require.ErrorIs(t, err, fs.ErrNotExist)
			}
			require.ErrorContains(t, err, want)
			require.ErrorContains(t, err, fmt.Sprintf("holds %d bytes", len(data)))
			after, err := os.ReadFile(log)
			require.NoError(t, err)
			require.Equal(t, data, after, "the log is left as it was")
			_, err = os.Stat(path)
			require.Equal(t, missing, errors.Is(err, fs.ErrNotExist), "no file is made")
		}
	}
}

// The side-access test re-executes a copy of the test binary as nobody,
// which opens the environment in the directory this names, after a tab,
// for reading or for writing as the part before the tab says.
const sideAccessVar = "VKRT_ENV_TEST_SIDE_ACCESS"

// A log or index beside the file that the user may not open (another
// user's, made under a umask of 077) is named, as a permission error, to
// a reader and to a writer: SQLite said only "unable to open database
// file (14)".
func TestALogOrIndexTheUserMayNotOpenIsNamed(t *testing.T) {
	if v := os.Getenv(sideAccessVar); v != "" {
		how, dir, _ := strings.Cut(v, "\t")
		opts := []Option{WithDir(dir)}
		if how == "read" {
			opts = append(opts, ReadOnly())
		}
		env, err := Open("side", opts...)
		if err == nil {
			_, err = env.Query(context.Background(), Query{})
			env.Close()
		}
		fmt.Printf("permission %t: %v\n", errors.Is(err, fs.ErrPermission), err)
		os.Exit(0)
	}
	if os.Geteuid() != 0 {
		t.Skip("a log of another user's needs root to make")
	}
	root, err := os.MkdirTemp("", "vkrt-side-access-")
	require.NoError(t, err)
	t.Cleanup(func() { os.RemoveAll(root) })
	require.NoError(t, os.Chmod(root, 0o755))
	dir := filepath.Join(root, "env")
	owner, err := Open("side", WithDir(dir))
	require.NoError(t, err)
	defer owner.Close()
	_, err = owner.Put(context.Background(), "first", sampleRecord{Seq: 1})
	require.NoError(t, err)
	// The writer may write the file and the directory: only a side file
	// stops it.
	require.NoError(t, os.Chmod(dir, 0o777))
	require.NoError(t, os.Chmod(filepath.Join(dir, "side.sqlite"), 0o666))
	for _, side := range []string{"-wal", "-shm"} {
		for _, how := range []string{"read", "write"} {
			path := filepath.Join(dir, "side.sqlite"+side)
			for _, s := range []string{"-wal", "-shm"} {
				mode := fs.FileMode(0o666)
				if s == side {
					mode = 0o600
				}
				require.NoError(t, os.Chmod(filepath.Join(dir, "side.sqlite"+s), mode))
			}
			out, err := runAsNobody(t, root, "TestALogOrIndexTheUserMayNotOpenIsNamed", sideAccessVar+"="+how+"\t"+dir)
			require.NoError(t, err, "%s", out)
			require.Contains(t, out, "permission true", "%s %s", how, side)
			require.Contains(t, out, path, "%s %s", how, side)
		}
	}
	// A log left without its index is read from a private copy: one the
	// user may not read is named too, where the reader was told to make
	// room in the temporary directory.
	left := filepath.Join(root, "left")
	require.NoError(t, os.Mkdir(left, 0o755))
	for _, s := range []string{"", "-wal"} {
		data, err := os.ReadFile(filepath.Join(dir, "side.sqlite"+s))
		require.NoError(t, err)
		require.NoError(t, os.WriteFile(filepath.Join(left, "side.sqlite"+s), data, 0o644))
	}
	require.NoError(t, os.Chmod(filepath.Join(left, "side.sqlite-wal"), 0o600))
	out, err := runAsNobody(t, root, "TestALogOrIndexTheUserMayNotOpenIsNamed", sideAccessVar+"=read\t"+left)
	require.NoError(t, err, "%s", out)
	require.Contains(t, out, "permission true", "a log without its index")
	require.Contains(t, out, filepath.Join(left, "side.sqlite-wal"))
	require.NotContains(t, out, "make room")

	_, err = owner.Put(context.Background(), "second", sampleRecord{Seq: 2})
	require.NoError(t, err, "the owner writes on")
}

// nobody is the user the tests that need another user than root run as.
const nobody = 65534

// runAsNobody runs test, a test of this binary, in a copy of the binary
// in root (which nobody may read) as nobody, with env added to the
// environment, and returns its output.
func runAsNobody(t *testing.T, root, test string, env ...string) (string, error) {
	t.Helper()
	bin := filepath.Join(root, "as-nobody.test")
	if _, err := os.Stat(bin); err != nil {
		self, err := os.ReadFile(os.Args[0])
		require.NoError(t, err)
		require.NoError(t, os.WriteFile(bin, self, 0o755))
	}
	cmd := exec.Command(bin, "-test.run=^"+test+"$")
	cmd.Env = append(os.Environ(), env...)
	cmd.Dir = root
	cmd.SysProcAttr = &syscall.SysProcAttr{Credential: &syscall.Credential{Uid: nobody, Gid: nobody}}
	out, err := cmd.CombinedOutput()
	return string(out), err
}

// ReadOnly says which environments refuse every Put: those opened with
// ReadOnly, an empty file's too; not a writer, a closed one or a nil Env.
func TestReadOnlySaysWhetherPutIsRefused(t *testing.T) {
	dir := t.TempDir()
	ctx := context.Background()
	w, err := Open("ro", WithDir(dir))
	require.NoError(t, err)
	require.False(t, w.ReadOnly())
	r, err := Open("ro", WithDir(dir), ReadOnly())
	require.NoError(t, err)
	require.True(t, r.ReadOnly())
	_, err = r.Put(ctx, "x", sampleRecord{Seq: 1})
	require.ErrorIs(t, err, ErrReadOnly, "what ReadOnly says")
	require.NoError(t, r.Close())
	require.True(t, r.ReadOnly(), "closed, it was still opened read-only")
	require.NoError(t, w.Close())
	require.False(t, w.ReadOnly())

	require.NoError(t, os.WriteFile(filepath.Join(dir, "empty.sqlite"), nil, 0o644))
	e, err := Open("empty", WithDir(dir), ReadOnly())
	require.NoError(t, err)
	require.True(t, e.ReadOnly(), "an empty file opened read-only")
	require.NoError(t, e.Close())

	var nilEnv *Env
	require.False(t, nilEnv.ReadOnly())
	require.False(t, (&Env{}).ReadOnly())
}

// Closed says whether Close was called, as the calls' ErrClosed does.
func TestClosedSaysWhetherCloseWasCalled(t *testing.T) {
	dir := t.TempDir()
	for _, opts := range [][]Option{{WithDir(dir)}, {WithDir(dir), ReadOnly()}} {
		env, err := Open("c", opts...)
		require.NoError(t, err)
		require.False(t, env.Closed())
		require.NoError(t, env.Close())
		require.True(t, env.Closed())
		_, err = env.Kinds(context.Background())
		require.ErrorIs(t, err, ErrClosed, "what Closed says")
	}
	var nilEnv *Env
	require.False(t, nilEnv.Closed())
	require.False(t, (&Env{}).Closed())
}
