package main

import (
	"bufio"
	"context"
	"errors"
	"fmt"
	"io"
	"math/rand/v2"
	"os"
	"os/signal"
	"path/filepath"
	"strconv"
	"sync"
	"sync/atomic"
	"syscall"
	"unicode/utf8"

	"golang.org/x/sys/unix"

	"github.com/vkrt/vkrt/runtime/environment"
)

// writeOutput writes a file the command was told to write (flag names the
// flag, for errors). A regular file is written to a temporary file beside it
// and renamed into place, so a failed write leaves no half-written file
// and an old one intact, and keeps its mode, owner and group; a symbolic
// link is followed, so the file it points to is replaced and the link
// kept. A file of more than one name (a hard link), or one whose owner and
// group a new file cannot take (another user's, in a sticky directory), is
// written over in place, as the shell's > writes it. A FIFO, a terminal or another
// device is written in place, never replaced by a file, and so is a file
// in a directory where no file may be made. A file the user may not write
// is refused, as the shell's > refuses it. A name of one of the
// command's open descriptors (/dev/stdout, /dev/fd/N) is written through
// that descriptor.
func writeOutput(flag, path string, write func(io.Writer) error) (err error) {
	if path == "" {
		return fmt.Errorf("%s: no file named", flag)
	}
	defer func() {
		if err != nil {
			err = fmt.Errorf("%s %s: %w", flag, path, err)
		}
	}()
	if fd, ok := outputDescriptor(path, false); ok {
		// The command's own standard output, error or another open
		// descriptor (/dev/stdout, /dev/fd/N): written through it, so that
		// the shell's >> appends and a pipe gets the bytes, where opening
		// the name anew would write over the file behind it, or fail.
		if err := writableDescriptor(fd); err != nil {
			return err
		}
		return writeThrough(descriptorFile(fd, path), write)
	}
	target, err := linkTarget(path)
	if err != nil {
		return err
	}
	// A file written over keeps its permissions, owner and group; a new
	// one gets what the umask leaves of 0666, as a file the shell's >
	// makes.
	perm := os.FileMode(0)
	var owner *syscall.Stat_t
	if fi, err := os.Stat(target); err == nil {
		switch {
		case fi.IsDir():
			return syscall.EISDIR // "is a directory"
		case !fi.Mode().IsRegular():
			return writeInPlace(target, write)
		}
		perm = fi.Mode().Perm()
		// Renamed over, a write-protected file would be replaced: the
		// shell's > refuses it, and so does this.
		if err := unix.Access(target, unix.W_OK); err != nil {
			return fmt.Errorf("%w: the file is write-protected", os.ErrPermission)
		}
		if st, ok := fi.Sys().(*syscall.Stat_t); ok {
			owner = st
			if st.Nlink > 1 {
				// Its other names would keep the old file, renamed over:
				// written in place, as > writes it.
				return writeOver(target, write)
			}
		}
	}
	tmp, err := createTemp(target)
	if perm != 0 && (errors.Is(err, os.ErrPermission) || errors.Is(err, syscall.EROFS)) {
		// A file that may be written in a directory where no file may be
		// made (the shell's > writes it): written over in place, so a
		// failed write leaves it cut short, as > does.
		return writeOver(target, write)
	}
	if err != nil {
		var pe *os.PathError
		if errors.As(err, &pe) {
			// The temporary name means nothing to the user: say what failed.
			dir := filepath.Dir(target)
			if fi, statErr := os.Stat(dir); statErr == nil && fi.IsDir() && errors.Is(pe.Err, os.ErrNotExist) {
				// A file system that makes no files (/proc, /sys) says
				// "no such file or directory" of the directory it holds.
				return fmt.Errorf("cannot create a file in %s: the directory is there, but its file system makes no new files (%w); the output is written to a new file there, renamed over %s once complete",
					dir, pe.Err, target)
			}
			return fmt.Errorf("cannot create a file in %s: %w", dir, pe.Err)
		}
		return err
	}
	// Forgotten once it is renamed into place or removed, below.
	defer tempFiles.Delete(tmp.Name())
	if owner != nil && tmp.Chown(int(owner.Uid), int(owner.Gid)) != nil {
		// Another user's file (sudo vkrt ... --out in their home, or one
		// in a sticky directory, which only its owner may rename over)
		// keeps its owner and group, or is written in place where the
		// temporary file cannot take them, as > writes it.
		tmp.Close()
		os.Remove(tmp.Name())
		return writeOver(target, write)
	}
	defer func() {
		if err != nil {
			tmp.Close()
			os.Remove(tmp.Name())
		}
	}()
	w := bufio.NewWriter(tmp)
	if err = write(w); err == nil {
		err = w.Flush()
	}
	if err == nil && perm != 0 {
		err = tmp.Chmod(perm)
	}
	if err == nil {
		err = tmp.Close()
	}
	if err == nil {
		err = os.Rename(tmp.Name(), target)
	}
	var pe *os.PathError
	if errors.As(err, &pe) && pe.Path == tmp.Name() {
		// The temporary name means nothing to the user: say what failed.
		return fmt.Errorf("%s: %w", pe.Op, pe.Err)
	}
	return err
}

// stickyWriter keeps the first error of the writes to w, for output
// written in many Fprintf calls whose errors are checked once at the end.
type stickyWriter struct {
	w   io.Writer
	err error
}

func (s *stickyWriter) Write(p []byte) (int, error) {
	if s.err != nil {
		return 0, s.err
	}
	n, err := s.w.Write(p)
	s.err = err
	return n, err
}

// linkTarget is the file path names, through symbolic links, whether it
// exists or not: a link to a file not yet made names that file. Links that
// lead to no file (a loop) are ELOOP, as the kernel says of them.
func linkTarget(path string) (string, error) {
	if resolved, err := filepath.EvalSymlinks(path); err == nil {
		return resolved, nil
	}
	return followLinks(path, func(string) bool { return false })
}

// followLinks follows path's symbolic links one at a time, asking stop of
// each name on the way (path first), and returns the name stop took or the
// first that is no link. Past as many links as the kernel follows it is
// ELOOP.
func followLinks(path string, stop func(string) bool) (string, error) {
	for range 40 {
		if stop(path) {
			return path, nil
		}
		dest, err := os.Readlink(path)
		if err != nil {
			return path, nil
		}
		if !filepath.IsAbs(dest) {
			dest = filepath.Join(filepath.Dir(path), dest)
		}
		path = dest
	}
	return "", syscall.ELOOP
}

// descriptors are the open descriptors outputs were written through, kept
// so that none is closed when its file is collected: the same descriptor
// may be written again (checkOutput's probe, then the output).
var descriptors = map[int]*os.File{0: os.Stdin, 1: os.Stdout, 2: os.Stderr}

// descriptorFile is the process's open descriptor fd, which path names
// through symbolic links, as /dev/stdout, /dev/fd/N or /proc/self/fd/N do.
func descriptorFile(fd int, path string) *os.File {
	f, open := descriptors[fd]
	if !open {
		f = os.NewFile(uintptr(fd), path)
		descriptors[fd] = f
	}
	return f
}

// writableDescriptor says why descriptor fd cannot be written, if it
// cannot: it is not open, or open for reading only. checkOutput's probe
// writes nothing, so the write failed only once the work was done, with
// "invalid argument" or "bad file descriptor".
func writableDescriptor(fd int) error {
	flags, err := unix.FcntlInt(uintptr(fd), unix.F_GETFL, 0)
	if err != nil {
		return fmt.Errorf("descriptor %d is not open: %w", fd, err)
	}
	if flags&unix.O_ACCMODE == unix.O_RDONLY {
		return fmt.Errorf("descriptor %d is open for reading only", fd)
	}
	return nil
}

// outputDescriptor is the descriptor an output flag's path writes
// through: 1 for "-" (flag) or a name of the command's standard output
// (/dev/stdout, /dev/fd/1), N for another open descriptor's name; ok is
// false for a file.
func outputDescriptor(path string, dashIsStdout bool) (fd int, ok bool) {
	if path == "-" && dashIsStdout {
		return 1, true
	}
	if _, err := followLinks(path, func(name string) bool {
		fd, ok = descriptorNumber(filepath.Clean(name))
		return ok
	}); err != nil {
		return 0, false
	}
	return fd, ok
}

// namesStdout says whether an output flag's path writes to the command's
// standard output.
func namesStdout(path string, dashIsStdout bool) bool {
	fd, ok := outputDescriptor(path, dashIsStdout)
	return ok && fd == 1
}

// sameOutput says whether outputs a and b would write one file: through
// one descriptor, or, their links followed, at one path, whether the file
// exists yet or not. The null device is no one file: what goes there is
// dropped, so two outputs there keep nothing from each other.
func sameOutput(a, b string, dashIsStdout bool) bool {
	fa, da := outputDescriptor(a, dashIsStdout)
	fb, db := outputDescriptor(b, dashIsStdout)
	if da || db {
		return da && db && fa == fb
	}
	ta, err := linkTarget(a)
	if err != nil || isNullDevice(ta) {
		return false
	}
	tb, err := linkTarget(b)
	return err == nil && (samePath(ta, tb) || sameFile(ta, tb))
}

// descriptorNumber is N where path is /dev/fd/N, /proc/self/fd/N or
// /proc/PID/fd/N of this process.
func descriptorNumber(path string) (int, bool) {
	dir, name := filepath.Split(path)
	switch dir {
	case "/dev/fd/", "/proc/self/fd/", "/proc/" + strconv.Itoa(os.Getpid()) + "/fd/":
	default:
		return 0, false
	}
	fd, err := strconv.Atoi(name)
	return fd, err == nil && fd >= 0 && strconv.Itoa(fd) == name
}

// writeThrough writes to an open descriptor, leaving it open.
func writeThrough(f *os.File, write func(io.Writer) error) error {
	w := bufio.NewWriter(f)
	if err := write(w); err != nil {
		return err
	}
	return w.Flush()
}

// createTemp makes a new file beside target for writeOutput, with the
// permissions the umask leaves of 0666 (os.CreateTemp makes 0600). Its
// name is "." and target's name and a random suffix, target's name cut
// short where the whole would be longer than the file system's longest
// name: a target named as long as it takes was refused, "file name too
// long", for its temporary file's name.
func createTemp(target string) (*os.File, error) {
	removeOnSignal.Do(removeTempFilesOnSignal)
	dir, base := filepath.Dir(target), filepath.Base(target)
	maxName := longestName(dir)
	for {
		suffix := "." + strconv.FormatUint(rand.Uint64(), 36)
		name := filepath.Join(dir, "."+cutName(base, maxName-1-len(suffix))+suffix)
		f, err := os.OpenFile(name, os.O_RDWR|os.O_CREATE|os.O_EXCL, 0o666)
		if err == nil {
			tempFiles.Store(name, struct{}{})
		}
		if !errors.Is(err, os.ErrExist) {
			return f, err
		}
	}
}

// longestName is the length in bytes of the longest file name the file
// system of dir takes: NAME_MAX, 255 where statfs does not say.
func longestName(dir string) int {
	var st unix.Statfs_t
	if unix.Statfs(dir, &st) == nil && st.Namelen > 0 {
		return int(st.Namelen)
	}
	return 255
}

// cutName is name cut to at most n bytes, at the start of a UTF-8
// sequence.
func cutName(name string, n int) string {
	if n >= len(name) {
		return name
	}
	n = max(n, 0)
	for n > 0 && !utf8.RuneStart(name[n]) {
		n--
	}
	return name[:n]
}

// tempFiles are the temporary files createTemp made that are neither
// renamed into place nor removed yet: a signal that ends the command
// removes them, so an interrupted write leaves the old file alone and no
// half-written file beside it.
var (
	tempFiles      sync.Map // name → struct{}
	removeOnSignal sync.Once
	// interruptRun, while set, is what the next signal does in place of
	// ending the command: a run that can stop early and still report
	// (vkrt conformance, vkrt run) sets it for as long as it runs. It is
	// taken once: a second signal ends the command.
	interruptRun atomic.Pointer[func(os.Signal)]
)

// removeTempFilesOnSignal makes SIGINT, SIGTERM and SIGHUP remove
// tempFiles, then end the process by the same signal, as it ended without
// the handler (a shell sees 128+N); while interruptRun is set, a signal
// calls it instead. A signal the process was started with ignored (SIGINT
// in a shell script's background job) stays ignored.
func removeTempFilesOnSignal() {
	var sigs []os.Signal
	for _, s := range []os.Signal{syscall.SIGINT, syscall.SIGTERM, syscall.SIGHUP} {
		if !signal.Ignored(s) {
			sigs = append(sigs, s)
		}
	}
	if len(sigs) == 0 {
		return
	}
	c := make(chan os.Signal, 1)
	signal.Notify(c, sigs...)
	go func() {
		for s := range c {
			if interrupt := interruptRun.Swap(nil); interrupt != nil {
				(*interrupt)(s)
				continue
			}
			tempFiles.Range(func(name, _ any) bool {
				os.Remove(name.(string))
				return true
			})
			signal.Reset(s)
			syscall.Kill(syscall.Getpid(), s.(syscall.Signal))
		}
	}()
}

// whileInterruptible runs run with a context that SIGINT, SIGTERM or
// SIGHUP cancels, with an interruptedError as its cause, rather than
// ending the command; a second signal ends it, as does one that comes
// once run has returned. It returns the signal that cancelled the
// context, if one did.
func whileInterruptible(ctx context.Context, run func(context.Context)) *interruptedError {
	ctx, cancel := context.WithCancelCause(ctx)
	defer cancel(nil)
	interrupt := func(s os.Signal) { cancel(&interruptedError{signal: s.(syscall.Signal)}) }
	interruptRun.Store(&interrupt)
	removeOnSignal.Do(removeTempFilesOnSignal)
	run(ctx)
	interruptRun.CompareAndSwap(&interrupt, nil)
	var stopped *interruptedError
	errors.As(context.Cause(ctx), &stopped)
	return stopped
}

// interruptedError is a run a signal stopped early: the command reports
// what it has, then ends with the status a shell gives a command the
// signal ended, 128+N.
type interruptedError struct{ signal syscall.Signal }

// around is the error a run that ended with err ends the command with: err
// where no signal came (e nil), the signal where the run ended well as it
// came, and otherwise err under the signal, which names why the run ended.
func (e *interruptedError) around(err error) error {
	switch {
	case e == nil:
		return err
	case err == nil:
		return e
	}
	return fmt.Errorf("%w: %w", e, err)
}

func (e *interruptedError) Error() string { return "interrupted by " + signalName(e.signal) }

func signalName(s syscall.Signal) string {
	switch s {
	case syscall.SIGINT:
		return "SIGINT"
	case syscall.SIGTERM:
		return "SIGTERM"
	case syscall.SIGHUP:
		return "SIGHUP"
	}
	return s.String()
}

// writeInPlace writes to a file that is not a regular one (a FIFO, a
// device) as it is.
func writeInPlace(path string, write func(io.Writer) error) error {
	f, err := os.OpenFile(path, os.O_WRONLY, 0)
	if err != nil {
		return err
	}
	return errors.Join(writeThrough(f, write), f.Close())
}

// writeOver writes a regular file over from its start and cuts it at the
// end of what reached it, a failed write too, as the shell's > leaves a
// file cut short: the old file's bytes after the new ones would read as
// part of them. A write that fails before its first byte (as
// checkOutput's probe does) leaves the file as it was.
func writeOver(path string, write func(io.Writer) error) error {
	f, err := os.OpenFile(path, os.O_WRONLY, 0)
	if err != nil {
		return err
	}
	var n int64
	w := bufio.NewWriter(countingWriter{f, &n})
	if err = write(w); err == nil {
		err = w.Flush()
	}
	if err == nil || n > 0 {
		err = errors.Join(err, f.Truncate(n))
	}
	return errors.Join(err, f.Close())
}

// countingWriter counts into n the bytes written to w.
type countingWriter struct {
	w io.Writer
	n *int64
}

func (c countingWriter) Write(p []byte) (int, error) {
	k, err := c.w.Write(p)
	*c.n += int64(k)
	return k, err
}

// checkNotAnInput refuses an output path that names one of the command's
// input files (the same file, through a link or another name): writing it
// would replace what the command reads, and the run would exit 0 with the
// input gone.
func checkNotAnInput(flag, out string, inputs ...string) error {
	for _, in := range inputs {
		if in != "" && (sameFile(out, in) || samePath(out, in)) {
			return fmt.Errorf("%s %s is the input file %s: name another file for the output", flag, out, in)
		}
	}
	return nil
}

// envFiles are the files of the environment name, inputs of the commands
// that read or write its records: its file, and the write-ahead log and
// index SQLite keeps beside the file it names through links, which may
// hold records the file does not yet (nil where the name is none or
// invalid: the command says so itself).
func envFiles(name string) []string {
	if name == "" {
		return nil
	}
	path, err := environment.Path(name)
	if err != nil {
		return nil
	}
	real := path
	if resolved, err := filepath.EvalSymlinks(path); err == nil {
		real = resolved
	}
	return []string{path, real + "-wal", real + "-shm", real + "-journal"}
}

// samePath says whether a and b name one path, whether or not a file is
// there: an environment's log is an input before SQLite makes it, as a
// file found there is what the environment's next writer opens as its log
// (a page was written to ENVFILE-wal while there was none, exit 0).
func samePath(a, b string) bool {
	ra, rb := resolvedPath(a), resolvedPath(b)
	return ra != "" && ra == rb
}

// resolvedPath is p made absolute, its directory's links followed; "" if
// it cannot be.
func resolvedPath(p string) string {
	abs, err := filepath.Abs(p)
	if err != nil {
		return ""
	}
	dir, base := filepath.Split(abs)
	if real, err := filepath.EvalSymlinks(dir); err == nil {
		dir = real
	}
	return filepath.Join(dir, base)
}

// isNullDevice says whether path is the null device, by any name.
func isNullDevice(path string) bool {
	fi, err := os.Stat(path)
	if err != nil || fi.Mode()&os.ModeCharDevice == 0 {
		return false
	}
	null, err := os.Stat(os.DevNull)
	return err == nil && os.SameFile(fi, null)
}

// sameFile says whether a and b name one regular file that exists.
func sameFile(a, b string) bool {
	fa, err := os.Stat(a)
	if err != nil || !fa.Mode().IsRegular() {
		return false
	}
	fb, err := os.Stat(b)
	return err == nil && os.SameFile(fa, fb)
}
