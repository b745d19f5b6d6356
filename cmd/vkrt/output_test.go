package main

import (
	"bytes"
	"errors"
	"fmt"
	"io"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/stretchr/testify/require"
	"golang.org/x/sys/unix"
)

// noTemporaryFiles fails when dir holds a file the command left behind.
func noTemporaryFiles(t *testing.T, dir string) {
	t.Helper()
	entries, err := os.ReadDir(dir)
	require.NoError(t, err)
	for _, e := range entries {
		require.False(t, strings.HasPrefix(e.Name(), "."), "no temporary file is left: %s", e.Name())
	}
}

// A write that fails half way (here past the file size limit, as a full
// disk would) leaves the old plan as it was, not the first bytes of the new.
func TestPlanOutThatFailsHalfWayKeepsTheOldFile(t *testing.T) {
	first := writeTrace(t, "first.trace", shortRun)
	dir := t.TempDir()
	out := filepath.Join(dir, "workload.plan")
	require.NoError(t, os.WriteFile(out, []byte("old plan\n"), 0o644))

	var err error
	if !underFileSizeLimit(t, 64, func() { // the plan is a few hundred bytes
		_, _, err = execute(t, "plan", first, "--out", out)
	}) {
		return
	}

	require.ErrorIs(t, err, syscall.EFBIG)
	data, rerr := os.ReadFile(out)
	require.NoError(t, rerr)
	require.Equal(t, "old plan\n", string(data), "the old file is intact")
	require.ErrorContains(t, err, "--out "+out)
	noTemporaryFiles(t, dir)
}

func TestOutputPathsThatCannotBeWrittenSayWhich(t *testing.T) {
	dir := t.TempDir()
	first := writeTrace(t, "first.trace", shortRun)
	missing := filepath.Join(dir, "no-dir", "r.html")
	_, _, err := execute(t, "report", "--html", missing, first)
	require.ErrorIs(t, err, os.ErrNotExist)
	require.ErrorContains(t, err, "--html "+missing+": ")
	require.NotContains(t, err.Error(), ".r.html.", "the temporary file is not what the user named")

	_, _, err = execute(t, "plan", first, "--out", dir)
	require.ErrorContains(t, err, "--out "+dir+": is a directory")
	_, _, err = execute(t, "report", "--html", dir, first)
	require.ErrorContains(t, err, "--html "+dir+": is a directory")
	_, _, err = execute(t, "report", "--html", "", first)
	require.EqualError(t, err, "--html is empty: give it a value or leave it out")
	noTemporaryFiles(t, dir)
}

// An output named through a symbolic link replaces the file the link
// points to, and the link stays.
func TestOutputThroughASymlinkKeepsTheLink(t *testing.T) {
	dir := t.TempDir()
	first := writeTrace(t, "first.trace", shortRun)
	target, link := filepath.Join(dir, "target.html"), filepath.Join(dir, "link.html")
	require.NoError(t, os.WriteFile(target, []byte("old"), 0o644))
	require.NoError(t, os.Symlink(target, link))
	_, _, err := execute(t, "report", "--html", link, first)
	require.NoError(t, err)
	fi, err := os.Lstat(link)
	require.NoError(t, err)
	require.Equal(t, os.ModeSymlink, fi.Mode().Type(), "the link is still a link")
	page, err := os.ReadFile(target)
	require.NoError(t, err)
	require.Contains(t, string(page), "<html")
	noTemporaryFiles(t, dir)
}

// A FIFO (or /dev/stdout) is written into, not replaced by a regular file.
func TestOutputIntoAFIFOIsWrittenNotReplaced(t *testing.T) {
	dir := t.TempDir()
	first := writeTrace(t, "first.trace", shortRun)
	fifo := filepath.Join(dir, "page.fifo")
	require.NoError(t, syscall.Mkfifo(fifo, 0o644))
	read := make(chan string, 1)
	go func() {
		f, err := os.Open(fifo)
		if err != nil {
			read <- err.Error()
			return
		}
		defer f.Close()
		b, _ := io.ReadAll(f)
		read <- string(b)
	}()
	_, _, err := execute(t, "report", "--html", fifo, first)
	require.NoError(t, err)
	fi, err := os.Lstat(fifo)
	require.NoError(t, err)
	require.Equal(t, os.ModeNamedPipe, fi.Mode().Type(), "the FIFO is still a FIFO")
	select {
	case page := <-read:
		require.Contains(t, page, "<html")
	case <-time.After(10 * time.Second):
		t.Fatal("nothing was written into the FIFO")
	}
}

// fileSizeLimitChildEnv marks the child process underFileSizeLimit starts.
const fileSizeLimitChildEnv = "VKRT_FSIZE_LIMITED_CHILD"

// underFileSizeLimit runs fn with the process's file size limit at limit
// bytes, so writes fail half way as on a full disk, and reports whether fn
// ran here. The limit is the whole process's: the log of opened files that
// go test keeps to cache results would fail past it too, so the test runs
// again in a child process of the test binary, which keeps no such log,
// and fails if the child does; the caller returns when fn did not run here.
func underFileSizeLimit(t *testing.T, limit uint64, fn func()) bool {
	t.Helper()
	if os.Getenv(fileSizeLimitChildEnv) == "" {
		cmd := exec.Command(os.Args[0], "-test.run=^"+t.Name()+"$", "-test.count=1", "-test.v")
		cmd.Env = append(os.Environ(), fileSizeLimitChildEnv+"=1")
		out, err := cmd.CombinedOutput()
		require.NoError(t, err, "the child process failed:\n%s", out)
		require.Contains(t, string(out), "--- PASS: "+t.Name(), "the child ran the test")
		return false
	}
	var old syscall.Rlimit
	require.NoError(t, syscall.Getrlimit(syscall.RLIMIT_FSIZE, &old))
	lowered := old
	lowered.Cur = limit
	require.NoError(t, syscall.Setrlimit(syscall.RLIMIT_FSIZE, &lowered))
	defer func() { require.NoError(t, syscall.Setrlimit(syscall.RLIMIT_FSIZE, &old)) }()
	fn()
	return true
}

// A file plan --out or report --html cannot write is refused before the
// work it would hold (a guest's runs, planning, replays): here the inputs
// are not even there, and the error is the output's.
func TestOutputThatCannotBeWrittenIsRefusedFirst(t *testing.T) {
	unwritable := filepath.Join(t.TempDir(), "no-such-dir", "out")
	missing := filepath.Join(t.TempDir(), "missing")
	for _, c := range []struct {
		name string
		args []string
		flag string
	}{
		{"plan", guestArgs(t, missing+".wasm", "--out", unwritable), "--out"},
		{"plan", []string{missing + ".trace.gz", "--out", unwritable}, "--out"},
		{"report", []string{"--html", unwritable, missing + ".trace.gz"}, "--html"},
	} {
		_, _, err := execute(t, c.name, c.args...)
		require.ErrorContains(t, err, c.flag+" "+unwritable+": cannot create a file in", "%s %v", c.name, c.args)
	}
}

// A file written over keeps its permissions, and a new one gets what the
// umask leaves of 0666: every output was made 0644, so a private plan
// became world-readable and a umask of 077 was ignored.
func TestOutputKeepsTheFilesModeAndTheUmask(t *testing.T) {
	tr := writeTrace(t, "run.trace", shortRun)
	dir := t.TempDir()
	private := filepath.Join(dir, "private.plan")
	require.NoError(t, os.WriteFile(private, []byte("old"), 0o600))
	require.NoError(t, os.Chmod(private, 0o600))
	_, _, err := execute(t, "plan", tr, "--out", private)
	require.NoError(t, err)
	fi, err := os.Stat(private)
	require.NoError(t, err)
	require.Equal(t, os.FileMode(0o600), fi.Mode().Perm(), "a private file stays private")

	for umask, want := range map[int]os.FileMode{0o077: 0o600, 0o022: 0o644, 0o002: 0o664} {
		old := syscall.Umask(umask)
		fresh := filepath.Join(dir, "fresh.plan")
		_, _, err = execute(t, "plan", tr, "--out", fresh)
		syscall.Umask(old)
		require.NoError(t, err)
		fi, err = os.Stat(fresh)
		require.NoError(t, err)
		require.Equal(t, want, fi.Mode().Perm(), "a new file under umask %03o", umask)
		require.NoError(t, os.Remove(fresh))
	}
	noTemporaryFiles(t, dir)
}

// An output named by a symbolic link whose file does not exist yet makes
// that file and keeps the link, as for a link to a file that exists: the
// link was replaced by a regular file and its target never written.
func TestOutputThroughALinkToAFileNotYetMade(t *testing.T) {
	tr := writeTrace(t, "run.trace", shortRun)
	dir := t.TempDir()
	require.NoError(t, os.Mkdir(filepath.Join(dir, "results"), 0o755))
	target := filepath.Join(dir, "results", "workload.plan")
	link := filepath.Join(dir, "workload.plan")
	require.NoError(t, os.Symlink(filepath.Join("results", "workload.plan"), link)) // relative, as ln -s makes it
	_, _, err := execute(t, "plan", tr, "--out", link)
	require.NoError(t, err)
	fi, err := os.Lstat(link)
	require.NoError(t, err)
	require.NotZero(t, fi.Mode()&os.ModeSymlink, "the link is kept")
	data, err := os.ReadFile(target)
	require.NoError(t, err, "the file the link names is written")
	require.Contains(t, string(data), "vkrt_plan")
	noTemporaryFiles(t, dir)
	noTemporaryFiles(t, filepath.Dir(target))
}

// An output named by a loop of symbolic links is refused, as the shell's
// > refuses it, before anything runs: the loop's link was replaced by the
// plan and the command exited 0.
func TestOutputThroughALoopOfLinksIsRefused(t *testing.T) {
	tr := writeTrace(t, "run.trace", shortRun)
	dir := t.TempDir()
	a, b := filepath.Join(dir, "a.plan"), filepath.Join(dir, "b.plan")
	require.NoError(t, os.Symlink("b.plan", a))
	require.NoError(t, os.Symlink("a.plan", b))
	_, _, err := execute(t, "plan", tr, "--out", a)
	require.ErrorIs(t, err, syscall.ELOOP)
	require.ErrorContains(t, err, "--out "+a)
	for _, link := range []string{a, b} {
		fi, err := os.Lstat(link)
		require.NoError(t, err)
		require.NotZero(t, fi.Mode()&os.ModeSymlink, "%s is still a link", link)
	}
	noTemporaryFiles(t, dir)
}

// A file that may be written in a directory where no file may be made is
// written over in place, as the shell's > writes it: the temporary file
// beside it could not be made, and the command refused before the work.
// The check before the work leaves the file as it was. (An immutable
// directory stands for one the user may not write, since root may write
// any.)
func TestOutputInADirectoryWhereNoFileMayBeMade(t *testing.T) {
	tr := writeTrace(t, "run.trace", shortRun)
	dir := t.TempDir()
	out := filepath.Join(dir, "workload.plan")
	old := strings.Repeat("an old plan, longer than the new one\n", 100)
	require.NoError(t, os.WriteFile(out, []byte(old), 0o644))
	if err := exec.Command("chattr", "+i", dir).Run(); err != nil {
		t.Skipf("chattr +i: %v (the file system or the user cannot make a directory immutable)", err)
	}
	defer exec.Command("chattr", "-i", dir).Run()
	if f, err := os.CreateTemp(dir, "probe"); err == nil {
		f.Close()
		os.Remove(f.Name())
		t.Skip("the immutable directory still takes new files")
	}

	_, _, err := execute(t, "plan", "--out", out, filepath.Join(dir, "missing.trace"))
	require.ErrorIs(t, err, os.ErrNotExist, "the check before the work passed, then the trace was missing")
	require.ErrorContains(t, err, "missing.trace")
	data, err := os.ReadFile(out)
	require.NoError(t, err)
	require.Equal(t, old, string(data), "the check before the work changed nothing")

	_, _, err = execute(t, "plan", tr, "--out", out)
	require.NoError(t, err)
	data, err = os.ReadFile(out)
	require.NoError(t, err)
	require.Contains(t, string(data), "vkrt_plan")
	require.NotContains(t, string(data), "an old plan", "the file is cut where the plan ends")
}

// An output named by an open descriptor of the command (/dev/stdout,
// /dev/fd/N, /proc/self/fd/N) is written through it: a file the shell
// opened to append keeps what it held, and a pipe gets the bytes, where
// opening the name anew wrote over the file and failed on the pipe.
func TestOutputToAnOpenDescriptorIsWrittenThroughIt(t *testing.T) {
	first := writeTrace(t, "first.trace", shortRun)
	log := filepath.Join(t.TempDir(), "log.txt")
	require.NoError(t, os.WriteFile(log, []byte("an earlier line\n"), 0o644))
	appended, err := os.OpenFile(log, os.O_WRONLY|os.O_APPEND, 0)
	require.NoError(t, err)
	defer appended.Close()
	_, _, err = execute(t, "plan", first, "--out", "/dev/fd/"+strconv.Itoa(int(appended.Fd())))
	require.NoError(t, err)
	got, err := os.ReadFile(log)
	require.NoError(t, err)
	require.True(t, strings.HasPrefix(string(got), "an earlier line\n{\"vkrt_plan\""), "the plan is appended to the file: %q", got)

	w, read := pipe(t)
	_, _, err = execute(t, "report", "--html", "/proc/self/fd/"+strconv.Itoa(int(w.Fd())), first)
	w.Close()
	require.NoError(t, err)
	require.Contains(t, read(), "<html")
}

// pipe is a pipe's write end, and a function that returns what came
// through it once that end is closed.
func pipe(t *testing.T) (*os.File, func() string) {
	t.Helper()
	r, w, err := os.Pipe()
	require.NoError(t, err)
	t.Cleanup(func() { r.Close(); w.Close() })
	got := make(chan string, 1)
	go func() {
		b, _ := io.ReadAll(r)
		got <- string(b)
	}()
	return w, func() string {
		select {
		case s := <-got:
			return s
		case <-time.After(10 * time.Second):
			t.Fatal("nothing came through the pipe")
			return ""
		}
	}
}

// A run a signal stopped ends the command with the signal, and with the
// run's own error under it where there was one; with no signal, the run's
// error alone.
func TestInterruptedErrorAroundTheRunsError(t *testing.T) {
	var none *interruptedError
	require.NoError(t, none.around(nil))
	guest := errors.New("guest: trapped")
	require.Same(t, guest, none.around(guest))

	stopped := &interruptedError{signal: syscall.SIGTERM}
	require.Same(t, stopped, stopped.around(nil))
	err := stopped.around(guest)
	require.ErrorIs(t, err, guest)
	var got *interruptedError
	require.ErrorAs(t, err, &got)
	require.Equal(t, "interrupted by SIGTERM: guest: trapped", err.Error())
	require.Equal(t, 128+int(syscall.SIGTERM), exitStatus(err))
}

// A file the user may not write is refused as the shell's > refuses it,
// and left as it was: renaming a new file over it replaced it. Root may
// write any file, so as root the check runs in a copy of the test binary
// as the unprivileged user 65534.
func TestOutputWriteProtectedIsRefused(t *testing.T) {
	const dirEnv = "VKRT_TEST_WRITE_PROTECTED_DIR"
	if dir := os.Getenv(dirEnv); dir != "" {
		out := filepath.Join(dir, "workload.plan")
		_, _, err := execute(t, "plan", filepath.Join(dir, "run.trace"), "--out", out)
		require.ErrorIs(t, err, os.ErrPermission)
		require.ErrorContains(t, err, "--out "+out+": permission denied: the file is write-protected")
		data, err := os.ReadFile(out)
		require.NoError(t, err)
		require.Equal(t, "an old plan", string(data))
		noTemporaryFiles(t, dir)
		return
	}
	dir, err := os.MkdirTemp("", "write-protected")
	require.NoError(t, err)
	t.Cleanup(func() { os.RemoveAll(dir) })
	require.NoError(t, os.Chmod(dir, 0o777)) // the user may make files here
	require.NoError(t, os.WriteFile(filepath.Join(dir, "run.trace"), []byte(shortRun), 0o644))
	require.NoError(t, os.WriteFile(filepath.Join(dir, "workload.plan"), []byte("an old plan"), 0o444))
	if os.Geteuid() != 0 {
		t.Setenv(dirEnv, dir)
		TestOutputWriteProtectedIsRefused(t)
		return
	}
	runAsNobody(t, dir, dirEnv)
}

// runAsNobody runs the test t again as user 65534, from a copy of the test
// binary in dir (the build directory it runs from is root's alone), with
// dirEnv naming dir, and requires it to pass.
func runAsNobody(t *testing.T, dir, dirEnv string) {
	t.Helper()
	self, err := os.ReadFile(os.Args[0])
	require.NoError(t, err)
	bin := filepath.Join(dir, "vkrt.test")
	require.NoError(t, os.WriteFile(bin, self, 0o755))
	cmd := exec.Command(bin, "-test.run=^"+t.Name()+"$", "-test.count=1", "-test.v")
	cmd.Env = append(os.Environ(), dirEnv+"="+dir, "HOME="+dir, "XDG_CACHE_HOME="+dir)
	cmd.SysProcAttr = &syscall.SysProcAttr{Credential: &syscall.Credential{Uid: 65534, Gid: 65534}}
	out, err := cmd.CombinedOutput()
	if errors.Is(err, os.ErrPermission) {
		t.Skipf("cannot run the test binary as user 65534: %v", err)
	}
	require.NoError(t, err, "%s", out)
	require.Contains(t, string(out), "--- PASS: "+t.Name())
}

// A file of two names (a hard link) is written in place, so both names
// read the new plan: renamed over, the other name kept the old file.
func TestOutputOverAHardLinkWritesBothNames(t *testing.T) {
	tr := writeTrace(t, "run.trace", shortRun)
	dir := t.TempDir()
	out, other := filepath.Join(dir, "workload.plan"), filepath.Join(dir, "other.plan")
	require.NoError(t, os.WriteFile(out, []byte(strings.Repeat("an old plan\n", 1000)), 0o644))
	require.NoError(t, os.Link(out, other))
	_, _, err := execute(t, "plan", tr, "--out", out)
	require.NoError(t, err)
	a, err := os.ReadFile(out)
	require.NoError(t, err)
	b, err := os.ReadFile(other)
	require.NoError(t, err)
	require.Contains(t, string(a), "vkrt_plan")
	require.Equal(t, string(a), string(b), "both names are one file still")
	noTemporaryFiles(t, dir)
}

// Another user's file written over keeps its owner and group, as with the
// shell's >: sudo vkrt plan --out in a user's home gave the file to root,
// and its owner could no longer read it. And one in a sticky directory,
// which only its owner may rename over, is written in place where the
// plan was made and then refused ("rename ...: operation not permitted").
func TestOutputKeepsAnotherUsersFile(t *testing.T) {
	const dirEnv = "VKRT_TEST_STICKY_DIR"
	if dir := os.Getenv(dirEnv); dir != "" {
		// As user 65534, over root's file in a sticky directory.
		out := filepath.Join(dir, "sticky", "workload.plan")
		_, _, err := execute(t, "plan", filepath.Join(dir, "run.trace"), "--out", out)
		require.NoError(t, err)
		data, err := os.ReadFile(out)
		require.NoError(t, err)
		require.Contains(t, string(data), "vkrt_plan")
		noTemporaryFiles(t, filepath.Join(dir, "sticky"))
		return
	}
	if os.Geteuid() != 0 {
		t.Skip("making another user's file needs root")
	}
	tr := writeTrace(t, "run.trace", shortRun)
	dir := t.TempDir()
	out := filepath.Join(dir, "theirs.plan")
	require.NoError(t, os.WriteFile(out, []byte("an old plan"), 0o640))
	require.NoError(t, os.Chown(out, 65534, 65534))
	_, _, err := execute(t, "plan", tr, "--out", out)
	require.NoError(t, err)
	fi, err := os.Stat(out)
	require.NoError(t, err)
	st := fi.Sys().(*syscall.Stat_t)
	require.Equal(t, [2]uint32{65534, 65534}, [2]uint32{st.Uid, st.Gid}, "owner and group kept")
	require.Equal(t, os.FileMode(0o640), fi.Mode().Perm())

	shared, err := os.MkdirTemp("", "sticky-output")
	require.NoError(t, err)
	t.Cleanup(func() { os.RemoveAll(shared) })
	require.NoError(t, os.Chmod(shared, 0o755))
	sticky := filepath.Join(shared, "sticky")
	require.NoError(t, os.Mkdir(sticky, 0o777))
	require.NoError(t, os.Chmod(sticky, 0o777|os.ModeSticky))
	require.NoError(t, os.WriteFile(filepath.Join(shared, "run.trace"), []byte(shortRun), 0o644))
	require.NoError(t, os.WriteFile(filepath.Join(sticky, "workload.plan"), []byte("root's old plan"), 0o666))
	require.NoError(t, os.Chmod(filepath.Join(sticky, "workload.plan"), 0o666))
	runAsNobody(t, shared, dirEnv)
	fi, err = os.Stat(filepath.Join(sticky, "workload.plan"))
	require.NoError(t, err)
	require.Equal(t, uint32(0), fi.Sys().(*syscall.Stat_t).Uid, "still root's file, written in place")
}

// A file written over in place that fails part way is cut where the new
// bytes end, as the shell's > leaves it: the old file's bytes after them
// read as part of the new output.
func TestOutputWrittenOverInPlaceIsCutWhereAFailedWriteEnds(t *testing.T) {
	path := filepath.Join(t.TempDir(), "out.plan")
	require.NoError(t, os.WriteFile(path, bytes.Repeat([]byte("o"), 100000), 0o644))
	failed := errors.New("the disk filled")
	err := writeOver(path, func(w io.Writer) error {
		if _, err := w.Write(bytes.Repeat([]byte("n"), 10000)); err != nil {
			return err
		}
		return failed
	})
	require.ErrorIs(t, err, failed)
	data, err := os.ReadFile(path)
	require.NoError(t, err)
	require.NotEmpty(t, data)
	require.Equal(t, strings.Repeat("n", len(data)), string(data), "only new bytes, %d of them", len(data))

	// A write that fails before its first byte leaves the file as it was.
	require.NoError(t, os.WriteFile(path, []byte("old"), 0o644))
	require.ErrorIs(t, writeOver(path, func(io.Writer) error { return failed }), failed)
	data, err = os.ReadFile(path)
	require.NoError(t, err)
	require.Equal(t, "old", string(data))
}

// An output named by a descriptor that is not open, or open for reading
// only, is refused before the work, saying so: the write failed once the
// plan was made, with "invalid argument".
func TestOutputToADescriptorThatCannotBeWrittenIsRefusedFirst(t *testing.T) {
	first := writeTrace(t, "first.trace", shortRun)
	closed := 900
	for ; closed < 1000; closed++ {
		if _, err := unix.FcntlInt(uintptr(closed), unix.F_GETFL, 0); err != nil {
			break
		}
	}
	stdout, _, err := execute(t, "plan", first, "--out", "/dev/fd/"+strconv.Itoa(closed))
	require.ErrorContains(t, err, fmt.Sprintf("descriptor %d is not open", closed))
	require.Empty(t, stdout, "refused before the plan was made")

	readOnly, err := os.Open(first)
	require.NoError(t, err)
	defer readOnly.Close()
	stdout, _, err = execute(t, "plan", writeTrace(t, "second.trace", shortRun), "--out", "/proc/self/fd/"+strconv.Itoa(int(readOnly.Fd())))
	require.ErrorContains(t, err, "open for reading only")
	require.Empty(t, stdout, "refused before the plan was made")
}

// A descriptor open for reading only is refused before the work where it
// is a pipe too, not a regular file: it was refused only once the plan
// was made.
func TestOutputToAPipeOpenForReadingIsRefusedFirst(t *testing.T) {
	r, w, err := os.Pipe()
	require.NoError(t, err)
	defer r.Close()
	defer w.Close()
	bad := filepath.Join(t.TempDir(), "bad.trace")
	require.NoError(t, os.WriteFile(bad, []byte("bogus\n"), 0o644))
	_, _, err = execute(t, "plan", bad, "--out", "/proc/self/fd/"+strconv.Itoa(int(r.Fd())))
	require.ErrorContains(t, err, "open for reading only", "the output is checked before the trace is read")
}

// A file named as long as the file system takes (255 bytes) is written,
// and written over: its temporary file's name, longer by the dot and the
// suffix, was refused, "file name too long", where the shell's > writes
// it. A name of three-byte runes is cut between them.
func TestOutputOfTheLongestNameIsWritten(t *testing.T) {
	dir := t.TempDir()
	for _, name := range []string{strings.Repeat("y", 255), strings.Repeat("€", 85)} {
		out := filepath.Join(dir, name)
		for _, content := range []string{"first\n", "second\n"} {
			require.NoError(t, writeOutput("--out", out, func(w io.Writer) error {
				_, err := io.WriteString(w, content)
				return err
			}))
			data, err := os.ReadFile(out)
			require.NoError(t, err)
			require.Equal(t, content, string(data))
		}
		require.NoError(t, checkOutput("--out", out))
		noTemporaryFiles(t, dir)
	}
	require.Equal(t, "ab", cutName("ab€", 4), "cut before the rune it would split")
	require.Equal(t, "ab€", cutName("ab€", 5))
	require.Equal(t, "", cutName("ab€", -3))
}

// A file in a directory whose file system makes no new files (/proc)
// says so: it read "cannot create a file in /proc: no such file or
// directory", though /proc is there.
func TestOutputInADirectoryThatMakesNoFilesSaysSo(t *testing.T) {
	const target = "/proc/version"
	if _, err := os.Stat(target); err != nil || unix.Access(target, unix.W_OK) != nil {
		t.Skip("needs a /proc/version this user may write")
	}
	err := writeOutput("--json", target, func(io.Writer) error { return nil })
	require.ErrorContains(t, err, "--json /proc/version: cannot create a file in /proc: the directory is there, but its file system makes no new files (no such file or directory)")
	require.ErrorIs(t, err, os.ErrNotExist)
	_, _, err = execute(t, "conformance", "--json", target)
	require.ErrorContains(t, err, "the directory is there, but its file system makes no new files")
}
