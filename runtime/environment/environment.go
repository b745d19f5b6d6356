package environment

import (
	"context"
	"database/sql"
	"errors"
	"fmt"
	"io"
	"io/fs"
	"math"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"sync"
	"sync/atomic"
	"syscall"
	"time"

	"modernc.org/sqlite" // also registers the "sqlite" database/sql driver
	sqlite3 "modernc.org/sqlite/lib"
)

// DefaultName is the environment used when none is named.
const DefaultName = "default"

// DirEnvVar names the environment variable that moves the data directory.
const DirEnvVar = "VKRT_ENV_DIR"

// fileExt is the extension of an environment's file in the data directory.
const fileExt = ".sqlite"

// maxNameLen keeps names well inside every file system's limit.
const maxNameLen = 128

// config is what the options set; Open starts from defaults and applies each
// option to its own copy, so an option value can be reused freely.
type config struct {
	dir         string
	dirSet      bool // WithDir was given, with dir even if empty
	busyTimeout time.Duration
	create      bool
	readOnly    bool
	now         func() time.Time
}

// Option configures Open.
type Option func(config) config

// WithDir stores environments in dir instead of the default data directory.
// An empty dir is refused (an error matching ErrInvalidOption and
// fs.ErrInvalid) by Open, Path and List: it stood for the default data directory, so a caller's unset
// directory put its records where it did not look.
func WithDir(dir string) Option {
	return func(c config) config { c.dir, c.dirSet = dir, true; return c }
}

// WithBusyTimeout sets how long a write waits for another writer (another
// goroutine or process) before failing with ErrBusy. The default is 10
// seconds; SQLite waits at most about 24 days, in whole milliseconds. A
// negative d fails Open with ErrInvalidOption.
func WithBusyTimeout(d time.Duration) Option {
	return func(c config) config { c.busyTimeout = d; return c }
}

// WithoutCreate makes Open fail, with an error matching fs.ErrNotExist,
// instead of creating an environment that does not exist yet: what a reader
// wants.
func WithoutCreate() Option {
	return func(c config) config { c.create = false; return c }
}

// ReadOnly opens an existing environment for reading only (and implies
// WithoutCreate): nothing is ever written to its directory, so it works in
// a directory the reader cannot write, never leaves a log or shared-memory
// file owned by the reader (which would make the owner's next write fail),
// and never blocks a writer. An empty file reads as an environment with no
// records and stays empty (one beside a log holding frames is ErrCorrupt). A write-ahead log left without its shared-memory
// index (a writer stopped without checkpointing and the index was lost, or
// only the file and its log were copied) is read, with every record
// committed in it, from a private copy in the temporary directory that
// Close removes; Open fails with ErrLogNotCopied when that copy cannot be
// made. Put fails with ErrReadOnly.
func ReadOnly() Option {
	return func(c config) config { c.readOnly, c.create = true, false; return c }
}

// WithClock sets the clock that stamps records. The default is time.Now,
// which a nil clock stands for (it made every Put panic).
func WithClock(now func() time.Time) Option {
	if now == nil {
		now = time.Now
	}
	return func(c config) config { c.now = now; return c }
}

// newConfig applies opts to the defaults. A nil option, which panicked
// when called, is ErrInvalidOption.
func newConfig(opts []Option) (config, error) {
	c := config{busyTimeout: 10 * time.Second, create: true, now: time.Now}
	for i, o := range opts {
		if o == nil {
			return c, fmt.Errorf("%w: option %d of the %d given is nil", ErrInvalidOption, i+1, len(opts))
		}
		c = o(c)
	}
	return c, nil
}

// DefaultDir is the data directory environments live in when no option
// names one: $VKRT_ENV_DIR, else $XDG_DATA_HOME/vkrt/env, else
// ~/.local/share/vkrt/env. A relative XDG_DATA_HOME is ignored, as the XDG
// Base Directory specification says: taken from the working directory, the
// records of a run were not where a command run elsewhere looked.
func DefaultDir() (string, error) {
	if d := os.Getenv(DirEnvVar); d != "" {
		return d, nil
	}
	if d := os.Getenv("XDG_DATA_HOME"); filepath.IsAbs(d) {
		return filepath.Join(d, "vkrt", "env"), nil
	}
	home, err := os.UserHomeDir()
	if err != nil {
		if d := os.Getenv("XDG_DATA_HOME"); d != "" {
			err = fmt.Errorf("XDG_DATA_HOME %q is ignored, not being absolute, and %w", d, err)
		}
		return "", fmt.Errorf("environment: no data directory: set %s or an absolute XDG_DATA_HOME: %w", DirEnvVar, err)
	}
	return filepath.Join(home, ".local", "share", "vkrt", "env"), nil
}

// namedError is err of the environment name: its message says
// "environment" once, where the package's own prefix stacked up under the
// name ("environment \"x\": environment: closed").
type namedError struct {
	name  string
	doing string // what failed ("reading records"), or ""
	err   error
}

// named is err of the environment name. An err that already names it (a
// read meeting an Env closed, a file replaced, or a reader's file gone as
// it opened it again) is kept as it is: named again, it read
// 'environment "x": reading records: environment "x": closed'.
func named(name string, err error) error {
	if namesItself(name, err) {
		return err
	}
	return &namedError{name: name, err: err}
}

// namedf is named with what failed, told by format and args, before what
// an err that already names the environment says failed.
func namedf(name string, err error, format string, args ...any) error {
	doing := fmt.Sprintf(format, args...)
	if ne, ok := err.(*namedError); ok && ne.name == name {
		if ne.doing != "" {
			doing += ": " + ne.doing
		}
		return &namedError{name: name, doing: doing, err: ne.err}
	}
	if namesItself(name, err) {
		return err
	}
	return &namedError{name: name, doing: doing, err: err}
}

// namesItself: err's message starts by naming the environment name.
func namesItself(name string, err error) bool {
	return err != nil && strings.HasPrefix(err.Error(), fmt.Sprintf("environment %q", name))
}

func (e *namedError) Error() string {
	doing := ""
	if e.doing != "" {
		doing = e.doing + ": "
	}
	return fmt.Sprintf("environment %q: %s%s", e.name, doing, strings.TrimPrefix(e.err.Error(), "environment: "))
}

func (e *namedError) Unwrap() error { return e.err }

// notDirError is err, of a path in the data directory dir, where dir is a
// file or a path through one: it names the directory and where it was set,
// as an error matching fs.ErrInvalid, where the system said only "stat
// …/default.sqlite: not a directory". It is nil for any other err.
func (c config) notDirError(dir string, err error) error {
	if !errors.Is(err, syscall.ENOTDIR) {
		return nil
	}
	what := "a path through a file"
	if info, serr := os.Stat(dir); serr == nil && !info.IsDir() {
		what = "a file"
		if !info.Mode().IsRegular() {
			what = "a " + fileType(info.Mode())
		}
	}
	if c.dir == "" && os.Getenv(DirEnvVar) != "" {
		return fmt.Errorf("environment: %s names %s, %s, not a directory: %w", DirEnvVar, dir, what, fs.ErrInvalid)
	}
	return fmt.Errorf("environment: the data directory %s is %s, not a directory: %w", dir, what, fs.ErrInvalid)
}

func (c config) resolveDir() (string, error) {
	if c.dir != "" {
		return c.dir, nil
	}
	if c.dirSet {
		return "", fmt.Errorf("%w: WithDir was given an empty directory; leave the option out for the default data directory: %w", ErrInvalidOption, fs.ErrInvalid)
	}
	return DefaultDir()
}

// ValidateName reports whether name can name an environment: 1 to 128
// letters, digits, '.', '_' and '-', not starting with '.' (so it can be
// neither hidden nor a path).
func ValidateName(name string) error {
	switch {
	case name == "":
		return fmt.Errorf("%w: the name is empty", ErrInvalidName)
	case len(name) > maxNameLen:
		return fmt.Errorf("%w: %q is %d bytes long, at most %d allowed", ErrInvalidName, name, len(name), maxNameLen)
	case strings.ContainsAny(name, `/\`):
		// The command line has no WithDir: its users are told of the
		// variable first.
		return fmt.Errorf("%w: %q contains a path separator; an environment is named, not located (to keep environments in another directory, set %s, or pass WithDir in Go)",
			ErrInvalidName, name, DirEnvVar)
	case name[0] == '.':
		return fmt.Errorf("%w: %q starts with '.'", ErrInvalidName, name)
	}
	for _, r := range name {
		ok := r >= 'a' && r <= 'z' || r >= 'A' && r <= 'Z' || r >= '0' && r <= '9' || r == '.' || r == '_' || r == '-'
		if !ok {
			return fmt.Errorf("%w: %q contains %q; names use letters, digits, '.', '_' and '-'", ErrInvalidName, name, r)
		}
	}
	return nil
}

// Path is the file that holds the environment name under the options' data
// directory.
func Path(name string, opts ...Option) (string, error) {
	if err := ValidateName(name); err != nil {
		return "", err
	}
	c, err := newConfig(opts)
	if err != nil {
		return "", err
	}
	dir, err := c.resolveDir()
	if err != nil {
		return "", err
	}
	return filepath.Join(dir, name+fileExt), nil
}

// List names the environments in the options' data directory, sorted. A
// directory that does not exist holds none.
func List(opts ...Option) ([]string, error) {
	c, err := newConfig(opts)
	if err != nil {
		return nil, err
	}
	dir, err := c.resolveDir()
	if err != nil {
		return nil, err
	}
	entries, err := os.ReadDir(dir)
	if errors.Is(err, fs.ErrNotExist) {
		return nil, nil
	}
	if nd := c.notDirError(dir, err); nd != nil {
		return nil, nd
	}
	if err != nil {
		return nil, fmt.Errorf("environment: listing %s: %w", dir, err)
	}
	var names []string
	for _, e := range entries {
		name, ok := strings.CutSuffix(e.Name(), fileExt)
		if !ok || ValidateName(name) != nil {
			continue
		}
		regular := e.Type().IsRegular()
		if e.Type()&fs.ModeSymlink != 0 {
			// Open follows a link to an environment's file; so does List.
			info, err := os.Stat(filepath.Join(dir, e.Name()))
			regular = err == nil && info.Mode().IsRegular()
		}
		if regular {
			names = append(names, name)
		}
	}
	slices.Sort(names)
	return names, nil
}

// Env is one open environment. It is safe for concurrent use.
type Env struct {
	name string
	path string
	// file is path with its symbolic links resolved: SQLite keeps the log
	// and its index next to the file a link points to, so that is where a
	// reader looks for them.
	file string
	// db is nil for a read-only environment whose file is empty or was
	// never migrated: it holds no records.
	db       *sql.DB
	readOnly bool
	// opened is a writer's file as it opened it (see sameFile).
	opened os.FileInfo
	// pinned is a writer's connection held open with the write-ahead log
	// open, so SQLite never deletes the log while the Env is open: a log
	// missing at the path then went from outside (see sameFile).
	pinned *sql.Conn
	// snapshot: read-only, and db reads a fixed picture of the files (the
	// main file opened as immutable, or a private copy of the file and its
	// log), taken when they were in state openedAs.
	snapshot bool
	openedAs filesState
	busy     time.Duration
	// retired are the pools a read-only Env replaced while reads still
	// used them, each with the private directories it reads: the last of
	// those reads closes it and removes them, or Close does.
	retired map[*sql.DB][]string
	// readers counts the reads in flight on each pool of a read-only Env.
	readers map[*sql.DB]int
	copies  []string   // private directories the current pool reads
	mu      sync.Mutex // guards db, snapshot, openedAs, retired, readers and copies of a read-only Env
	// checkMu serializes a read-only Env's quick check; checked says it
	// passed (see checkOnce).
	checkMu sync.Mutex
	checked bool
	now     func() time.Time
	closed  atomic.Bool
}

// Open opens the environment name, creating it (and its directory) unless
// WithoutCreate is given. A file that is not a vkrt environment is refused
// with ErrNotEnvironment and left untouched; one written by a newer schema
// with a *SchemaError.
func Open(name string, opts ...Option) (*Env, error) {
	return OpenContext(context.Background(), name, opts...)
}

// OpenContext is Open bounded by ctx.
func OpenContext(ctx context.Context, name string, opts ...Option) (*Env, error) {
	return openContext(ctx, name, opts, 0)
}

// openAttempts bounds how often a writer opens the environment again
// because its file was removed or replaced while it was being opened.
const openAttempts = 3

// afterPrepare, where a test sets it, runs once SQLite has opened a
// writer's file and checked its schema.
var afterPrepare func(path string)

func openContext(ctx context.Context, name string, opts []Option, attempt int) (*Env, error) {
	if err := ValidateName(name); err != nil {
		return nil, err
	}
	if ctx == nil {
		return nil, namedf(name, ErrNilContext, "opening")
	}
	c, err := newConfig(opts)
	if err != nil {
		return nil, namedf(name, err, "opening")
	}
	if err := ctx.Err(); err != nil {
		// Before the file is made: SQLite refused to open it, and the
		// empty file stayed, an environment List named that no one made.
		return nil, namedf(name, err, "opening")
	}
	dir, err := c.resolveDir()
	if err != nil {
		return nil, err
	}
	path := filepath.Join(dir, name+fileExt)
	if c.busyTimeout < 0 {
		return nil, fmt.Errorf("%w: WithBusyTimeout was given %v, a negative timeout", ErrInvalidOption, c.busyTimeout)
	}
	file := path
	info, err := os.Stat(path)
	if errors.Is(err, fs.ErrNotExist) {
		if err := checkLog(path, path); err != nil {
			return nil, named(name, err)
		}
		if !c.create {
			return nil, fmt.Errorf("environment %q does not exist (no file %s): %w", name, path, fs.ErrNotExist)
		}
		if err := os.MkdirAll(dir, 0o755); err != nil {
			return nil, fmt.Errorf("environment: creating data directory: %w", err)
		}
	} else if err != nil {
		if nd := c.notDirError(dir, err); nd != nil {
			return nil, nd
		}
		return nil, named(name, err)
	} else if !info.Mode().IsRegular() {
		// Opening a FIFO blocks until a writer appears; a device or a
		// directory is no environment either.
		return nil, fmt.Errorf("%w: %s is a %s, not a regular file", ErrNotEnvironment, path, fileType(info.Mode()))
	} else if real, err := filepath.EvalSymlinks(path); err == nil {
		file = real
	}
	if err := checkSideFiles(path, file); err != nil {
		return nil, err
	}
	if err := checkHeader(path); err != nil {
		return nil, err
	}
	if err := checkLog(path, file); err != nil {
		return nil, named(name, err)
	}
	if c.readOnly {
		return openReadOnly(ctx, name, path, file, c)
	}
	// A writer that cannot write the file is refused before SQLite opens
	// it: SQLite would fall back to reading it and leave a log and an index
	// of this user's next to it, which the owner's writers cannot use.
	f, err := os.OpenFile(path, os.O_RDWR|os.O_CREATE, 0o644)
	if err != nil {
		if dest, lerr := os.Readlink(path); lerr == nil && errors.Is(err, fs.ErrNotExist) {
			// Nothing to read: the link names a file in no directory.
			return nil, fmt.Errorf("environment %q: %s is a link to %s, which cannot be made: %w", name, path, dest, err)
		}
		if info == nil {
			// Nothing to read either: the file was to be made here.
			return nil, fmt.Errorf("environment %q does not exist, and %s cannot be made in %s: %w", name, path, dir, err)
		}
		return nil, fmt.Errorf("environment %q: %s cannot be opened for writing (it can still be read, read-only): %w", name, path, err)
	}
	made, err := f.Stat()
	f.Close()
	if err != nil {
		return nil, named(name, err)
	}
	if n := linkCount(made); n > 1 {
		// SQLite only logs "multiple links to file"; a writer through the
		// second name while one through the first had records in its log
		// was refused the file as damaged.
		return nil, fmt.Errorf("%w: %s has %d names; a writer through each keeps a log of its own beside it, and the two damage the file: remove the other names, or copy the file under a name of its own",
			ErrHardLinked, path, n)
	}
	// The file may go while SQLite opens it (another process removing an
	// environment it made and found empty): Open then failed with a bare
	// "disk I/O error" or "no such file". It is opened again.
	again := func(err error) (*Env, error) {
		now, serr := os.Stat(path)
		if serr == nil && os.SameFile(made, now) {
			return nil, err
		}
		if attempt+1 < openAttempts {
			return openContext(ctx, name, opts, attempt+1)
		}
		return nil, named(name, fmt.Errorf("%w: %s was removed or replaced while it was being opened, %d times", ErrReplaced, path, openAttempts))
	}
	if file == path {
		// A link to a file not made yet names one now: SQLite keeps the
		// log next to it, which is where sameFile looks.
		if real, err := filepath.EvalSymlinks(path); err == nil && real != path {
			file = real
			if err := checkSideFiles(path, file); err != nil {
				return nil, err
			}
		}
	}
	// mode=rw: the file is made above, and a connection the pool opens
	// later never makes one. Where the file was removed meanwhile, SQLite
	// made an empty one at its path, with its log and index, an
	// environment List named that no one made.
	db, err := sql.Open("sqlite", dsn(path, c.busyTimeout, "mode=rw"))
	if err != nil {
		return nil, named(name, err)
	}
	if err := prepare(ctx, db, path, c.busyTimeout); err != nil {
		db.Close()
		if named := sideAccessError(name, path, file, os.O_RDWR, err); named != nil {
			return nil, named
		}
		return again(err)
	}
	if afterPrepare != nil {
		afterPrepare(path)
	}
	pinned, err := db.Conn(ctx)
	if err == nil {
		// A read opens the log on this connection.
		_, err = pinned.ExecContext(ctx, "SELECT count(*) FROM sqlite_schema")
		if err != nil {
			pinned.Close()
		}
	}
	if err != nil {
		db.Close()
		return again(named(name, dbError(path, c.busyTimeout, err)))
	}
	opened, err := os.Stat(path)
	if err != nil || !os.SameFile(made, opened) {
		pinned.Close()
		db.Close()
		if err == nil {
			err = fmt.Errorf("%s is another file than the one opened", path)
		}
		return again(named(name, err))
	}
	return &Env{name: name, path: path, file: file, db: db, opened: opened, pinned: pinned, busy: c.busyTimeout, now: c.now}, nil
}

// checkSideFiles refuses a log or index next to file (path with its links
// resolved) that is not a regular file.
func checkSideFiles(path, file string) error {
	for _, side := range []string{file + "-wal", file + "-shm"} {
		if info, err := os.Lstat(side); err == nil && !info.Mode().IsRegular() {
			return fmt.Errorf("%w: %s is a %s where the environment's %s keeps its write-ahead log or its index",
				ErrNotEnvironment, side, fileType(info.Mode()), path)
		}
	}
	return nil
}

// sideAccessError looks into err, SQLite's failure to open the environment
// at path (file, with its links resolved): where SQLite could not open a
// file (SQLITE_CANTOPEN) and a log or index beside it is one this user may
// not open with flag (another user's, made under a umask of 077), it is an
// error that names it and matches fs.ErrPermission, where SQLite said only
// "unable to open database file (14)"; else nil. The side files are opened only
// then: closing a descriptor of a file drops every lock this process holds
// on it, SQLite's included.
func sideAccessError(name, path, file string, flag int, err error) error {
	var se *sqlite.Error
	if !errors.As(err, &se) || se.Code()&0xff != sqlite3.SQLITE_CANTOPEN {
		return nil
	}
	for _, side := range [...]struct{ suffix, what string }{{"-wal", "write-ahead log"}, {"-shm", "log's index"}} {
		f, oerr := os.OpenFile(file+side.suffix, flag, 0)
		if oerr == nil {
			f.Close()
			continue
		}
		if errors.Is(oerr, fs.ErrPermission) {
			verb, done := "read", "read"
			if flag&(os.O_WRONLY|os.O_RDWR) != 0 {
				verb, done = "write", "written"
			}
			return fmt.Errorf("environment %q: %s cannot be %s: this user may not %s its %s %s (%w): %w",
				name, path, done, verb, side.what, file+side.suffix, oerr, se)
		}
	}
	return nil
}

// openReadOnly opens an existing file without writing anything next to it.
// In WAL mode a reader needs the log's shared-memory index: while a writer
// has the environment open both files exist and the reader maps them as
// they are; when there is no log every committed record is in the main
// file, which is then read as immutable, with no lock and no index to
// create. A log without its index (a writer stopped without checkpointing
// and the index was lost, or only the file and its log were copied) may
// hold committed records the main file lacks, and SQLite reads a log only
// through an index it builds next to it: the file and its log are copied
// into a private directory, where it may, and that copy is read.
func openReadOnly(ctx context.Context, name, path, real string, c config) (*Env, error) {
	env := &Env{name: name, path: path, file: real, readOnly: true, busy: c.busyTimeout, now: c.now}
	env.openedAs = stateOf(real)
	if env.openedAs.file.size == 0 {
		return env, nil
	}
	file, extra := real, "mode=ro"
	if needsCopy(env.openedAs) {
		dir, state, err := copyWithLog(name, real)
		if err != nil {
			return nil, err
		}
		env.openedAs = state
		if dir != "" {
			env.copies = []string{dir}
			file = filepath.Join(dir, filepath.Base(real))
			env.snapshot = true
		}
	}
	if !env.snapshot && (!env.openedAs.log.exists || !env.openedAs.index.exists) {
		extra += "&immutable=1"
		env.snapshot = true
	}
	db, err := sql.Open("sqlite", dsn(file, c.busyTimeout, extra))
	if err != nil {
		env.removeCopies()
		return nil, named(name, err)
	}
	version, fresh, err := classifyConsistently(ctx, db, path)
	if err != nil {
		db.Close()
		env.removeCopies()
		if named := sideAccessError(name, path, real, os.O_RDONLY, err); named != nil {
			return nil, named
		}
		return nil, readerError(name, real, err)
	}
	if fresh || version == 0 {
		db.Close() // marked but never migrated: no records table yet
		env.removeCopies()
		return env, nil
	}
	env.db = db
	return env, nil
}

// readerError is err, from a reader's open of the file real: where SQLite
// wanted to write (dbError's permission error, which tells a writer to
// open the file ReadOnly, as the reader did), it says what beside the
// file made it want to: a rollback journal it would roll back, or a log or
// index it cannot use.
func readerError(name, real string, err error) error {
	var se *sqlite.Error
	if !errors.Is(err, fs.ErrPermission) || !errors.As(err, &se) {
		return err
	}
	return fmt.Errorf("environment %q: reading %s: SQLite would write beside it, which a reader does not: a rollback journal (%s), log or index there is damaged or another program's (%w): %w",
		name, real, filepath.Base(real)+"-journal", fs.ErrPermission, se)
}

// fileStamp is what a reader sees of one file without reading it.
type fileStamp struct {
	exists bool
	mode   fs.FileMode
	size   int64
	modNs  int64
}

// filesState stamps the files a writer changes: the environment's file,
// its log and the log's shared-memory index.
type filesState struct{ file, log, index fileStamp }

func stampOf(path string) fileStamp {
	info, err := os.Lstat(path)
	if err != nil {
		return fileStamp{}
	}
	return fileStamp{exists: true, mode: info.Mode(), size: info.Size(), modNs: info.ModTime().UnixNano()}
}

func stateOf(path string) filesState {
	return filesState{file: stampOf(path), log: stampOf(path + "-wal"), index: stampOf(path + "-shm")}
}

// copyAttempts bounds how often copyWithLog starts again because a writer
// changed the files while they were copied.
const copyAttempts = 3

// needsCopy: a log without its index, which a reader that writes nothing
// next to the file can read only from a copy. An empty log holds nothing:
// the main file alone is read.
func needsCopy(s filesState) bool { return s.log.exists && s.log.size > 0 && !s.index.exists }

// copyWithLog copies path and its log into a new private directory and
// returns it with the state the files were copied in, or no directory and
// the state they are now in when they no longer need a copy. The two are
// copied one after the other, so a copy during which either changed (a
// writer committed or checkpointed) may pair a file with a log it does not
// belong to: it is made again.
func copyWithLog(name, path string) (dir string, state filesState, err error) {
	log := path + "-wal"
	for range copyAttempts {
		state = stateOf(path)
		if !needsCopy(state) {
			return "", state, nil // a writer checkpointed or opened the files meanwhile
		}
		if !state.log.mode.IsRegular() {
			return "", state, fmt.Errorf("%w: %s is a %s, not a regular file", ErrNotEnvironment, log, fileType(state.log.mode))
		}
		dir, err = os.MkdirTemp("", "vkrt-env-read-")
		if err == nil {
			err = copyFile(path, filepath.Join(dir, filepath.Base(path)))
		}
		if err == nil {
			err = copyLog(log, filepath.Join(dir, filepath.Base(log)))
		}
		if err != nil {
			if dir != "" {
				os.RemoveAll(dir)
			}
			if pe := (*fs.PathError)(nil); errors.As(err, &pe) && (pe.Path == path || pe.Path == log) && errors.Is(err, fs.ErrPermission) {
				// Not for want of room or of TMPDIR: the reader may not
				// read what it copies (another user's log, made under a
				// umask of 077).
				return "", state, fmt.Errorf("environment %q: %s cannot be read: this user may not read %s (%w)", name, path, pe.Path, err)
			}
			return "", state, fmt.Errorf("%w: %s has a write-ahead log %s but no shared-memory index %s, so a read-only "+
				"reader reads the two from a private copy, and copying them failed: %v; make room in %s (or set TMPDIR "+
				"to a writable directory), or open the environment once for writing, which moves the log into the file",
				ErrLogNotCopied, path, log, path+"-shm", err, os.TempDir())
		}
		if stateOf(path) == state {
			return dir, state, nil
		}
		os.RemoveAll(dir)
	}
	return "", state, fmt.Errorf("environment %q: %s and %s kept changing while a read-only reader copied them", name, path, log)
}

func copyFile(from, to string) error {
	return copyInto(from, to, func(src io.Reader, dst *os.File) error {
		_, err := io.Copy(dst, src)
		return err
	})
}

// copyInto has copy write what it takes of the file at from into a new
// file at to.
func copyInto(from, to string, copy func(src io.Reader, dst *os.File) error) error {
	src, err := os.Open(from)
	if err != nil {
		return err
	}
	defer src.Close()
	dst, err := os.OpenFile(to, os.O_WRONLY|os.O_CREATE|os.O_EXCL, 0o600)
	if err != nil {
		return err
	}
	if err := copy(src, dst); err != nil {
		dst.Close()
		return err
	}
	return dst.Close()
}

// removeCopies removes the private copies the environment's pools read.
func (e *Env) removeCopies() error {
	err := removeAll(e.copies)
	e.copies = nil
	return err
}

func removeAll(dirs []string) error {
	var errs []error
	for _, dir := range dirs {
		if err := os.RemoveAll(dir); err != nil {
			errs = append(errs, err)
		}
	}
	return errors.Join(errs...)
}

func fileType(m fs.FileMode) string {
	switch {
	case m&fs.ModeNamedPipe != 0:
		return "named pipe"
	case m&fs.ModeSocket != 0:
		return "socket"
	case m&fs.ModeDevice != 0:
		return "device"
	case m.IsDir():
		return "directory"
	case m&fs.ModeSymlink != 0:
		return "symbolic link"
	}
	return m.Type().String()
}

// dsn configures every connection of the pool the same way.
//
// The path is a URI path with every byte outside the unreserved set escaped,
// so '%', '?' and '#' in a directory name reach the file system as they are:
// SQLite decodes %xx in a URI, and the driver splits its options at the
// first '?'.
//
// synchronous=FULL: in WAL mode NORMAL already survives a killed process, but
// a power cut may roll back the last commits; FULL syncs the log at every
// commit so a Put that returned nil survives that too. Records are snapshots
// taken a few times per workload, so one sync each costs nothing that matters.
//
// _txlock=immediate: a write transaction takes the write lock at BEGIN, so
// concurrent writers queue on the busy timeout instead of failing when a read
// lock cannot be upgraded.
func dsn(path string, busy time.Duration, extra string) string {
	q := fmt.Sprintf("_pragma=busy_timeout(%d)&_pragma=synchronous(FULL)&_pragma=foreign_keys(1)&_txlock=immediate",
		busyMillis(busy))
	if extra != "" {
		q += "&" + extra
	}
	return "file:" + escapeURIPath(path) + "?" + q
}

// busyMillis is the busy timeout as SQLite takes it: whole milliseconds in
// a 32-bit int. A longer timeout is cut to the longest SQLite waits (24
// days), not passed on to read as 0 (no wait at all); a shorter one that
// is not zero waits a millisecond.
func busyMillis(busy time.Duration) int64 {
	ms := busy.Milliseconds()
	switch {
	case busy > 0 && ms == 0:
		return 1
	case ms > math.MaxInt32:
		return math.MaxInt32
	}
	return ms
}

// escapeURIPath percent-encodes every byte of path but the unreserved ones
// and '/'.
func escapeURIPath(path string) string {
	const hex = "0123456789ABCDEF"
	var b strings.Builder
	for i := 0; i < len(path); i++ {
		ch := path[i]
		if ch >= 'a' && ch <= 'z' || ch >= 'A' && ch <= 'Z' || ch >= '0' && ch <= '9' || strings.IndexByte("-._~/", ch) >= 0 {
			b.WriteByte(ch)
			continue
		}
		b.WriteByte('%')
		b.WriteByte(hex[ch>>4])
		b.WriteByte(hex[ch&15])
	}
	return b.String()
}

// isNil says whether e is no environment: nil, or zero (Open names it).
func (e *Env) isNil() bool { return e == nil || e.name == "" }

// Name is the environment's name; "" for a nil or zero Env.
func (e *Env) Name() string {
	if e == nil {
		return ""
	}
	return e.name
}

// Path is the environment's file; "" for a nil or zero Env.
func (e *Env) Path() string {
	if e == nil {
		return ""
	}
	return e.path
}

// ReadOnly says whether the environment was opened with ReadOnly, so that
// every Put of it fails with ErrReadOnly: a caller handed an Env to write
// to can refuse it at once. A nil or zero Env says false.
func (e *Env) ReadOnly() bool {
	return e != nil && e.readOnly
}

// Closed says whether Close was called, after which every call of the
// environment fails with ErrClosed: a caller handed an Env can refuse a
// closed one at once. A nil or zero Env, which is no environment (its
// calls fail with ErrNil), says false.
func (e *Env) Closed() bool {
	return !e.isNil() && e.closed.Load()
}

// Close releases the environment. Using it afterwards fails with ErrClosed;
// closing twice is harmless. A nil or zero Env is ErrNil.
func (e *Env) Close() error {
	if e.isNil() {
		return ErrNil
	}
	if e.closed.Swap(true) {
		return nil
	}
	// A reopen that finishes after this sees the Env closed and releases
	// its own pool and copy.
	e.mu.Lock()
	db, retired, copies := e.db, e.retired, e.copies
	e.copies, e.retired = nil, nil
	e.mu.Unlock()
	for r, dirs := range retired {
		r.Close()
		copies = append(copies, dirs...)
	}
	var closeErr error
	if e.pinned != nil {
		closeErr = e.pinned.Close()
	}
	if db != nil {
		closeErr = errors.Join(closeErr, db.Close())
	}
	// The copies go after every pool reading them is closed.
	if err := errors.Join(closeErr, removeAll(copies)); err != nil {
		return fmt.Errorf("environment %q: closing: %w", e.name, err)
	}
	return nil
}

func (e *Env) usable() error {
	if e.isNil() {
		return ErrNil
	}
	if e.closed.Load() {
		return named(e.name, ErrClosed)
	}
	return nil
}

// callable is usable, for a call given ctx, which must be a context.
func (e *Env) callable(ctx context.Context) error {
	if err := e.usable(); err != nil {
		return err
	}
	if ctx == nil {
		return named(e.name, ErrNilContext)
	}
	return nil
}

func (e *Env) writable() error {
	if err := e.usable(); err != nil {
		return err
	}
	if e.readOnly {
		return named(e.name, ErrReadOnly)
	}
	return e.sameFile()
}

// sameFile fails with ErrReplaced unless a writer's path still names the
// file it opened. One stat a call: writes and reads through a writer are
// whole transactions, far costlier.
func (e *Env) sameFile() error {
	if err := e.replaced(); err != nil {
		return named(e.name, err)
	}
	return nil
}

// replaced is sameFile's error, not yet named.
func (e *Env) replaced() error {
	now, err := os.Stat(e.path)
	switch {
	case errors.Is(err, fs.ErrNotExist):
		return fmt.Errorf("%w: %s is gone; open the environment again", ErrReplaced, e.path)
	case err != nil:
		return err
	case !os.SameFile(e.opened, now):
		return fmt.Errorf("%w: %s is another file than the one opened; open the environment again", ErrReplaced, e.path)
	}
	// The pinned connection keeps the log: one missing was removed, and
	// what is written now would reach no reader. Close removes it too,
	// once it has moved every record committed into the file, and marks
	// the Env closed first: a Put that committed as Close ran was told
	// its record went into a file that went, which it had not.
	if _, err := os.Lstat(e.file + "-wal"); errors.Is(err, fs.ErrNotExist) && !e.closed.Load() {
		return fmt.Errorf("%w: its write-ahead log %s-wal is gone; open the environment again", ErrReplaced, e.file)
	}
	return nil
}

// errNoTable: a read-only environment whose file holds no records table yet.
var errNoTable = errors.New("environment: no records yet")

// read runs one read against the environment. A read-only environment
// reading a snapshot (no writer had the file open, or its log was copied)
// checks afterwards that no writer changed the files meanwhile; if one
// did, the read may have raced its checkpoint or missed its commits, so
// the environment is opened again and the read repeated.
func (e *Env) read(fn func(db *sql.DB) error) error {
	for attempt := 0; ; attempt++ {
		// A listing reads page after page: one closed meanwhile is
		// ErrClosed, where its next page met a closed pool ("sql:
		// database is closed") or, for a writer, the log Close removed
		// (ErrReplaced).
		if err := e.usable(); err != nil {
			return err
		}
		e.mu.Lock()
		db, snapshot, opened := e.db, e.snapshot, e.openedAs
		if e.readOnly && db != nil {
			if e.readers == nil {
				e.readers = map[*sql.DB]int{}
			}
			e.readers[db]++
		}
		e.mu.Unlock()
		if !e.readOnly {
			if err := e.sameFile(); err != nil {
				return err
			}
		}
		if db == nil {
			if !e.readOnly || !e.changedSince(opened) {
				return errNoTable
			}
		} else {
			err := fn(db)
			if e.readOnly {
				e.doneReading(db)
			}
			if err != nil && e.closed.Load() {
				return e.usable()
			}
			if !snapshot || !e.changedSince(opened) {
				return err
			}
		}
		if attempt == 2 {
			return named(e.name, errors.New("the file kept changing under a read-only reader"))
		}
		if err := e.reopenReadOnly(); err != nil {
			return err
		}
	}
}

// doneReading ends a read on db; the last read of a pool that was
// replaced meanwhile closes it and removes the copy it read.
func (e *Env) doneReading(db *sql.DB) {
	e.mu.Lock()
	e.readers[db]--
	if e.readers[db] > 0 {
		e.mu.Unlock()
		return
	}
	delete(e.readers, db)
	dirs, retired := e.retired[db]
	delete(e.retired, db)
	e.mu.Unlock()
	if retired {
		db.Close()
		removeAll(dirs)
	}
}

// changedSince reports whether a writer has touched the files since they
// were in state opened: the file, its log or its index appeared, went, or
// has another size or modification time.
func (e *Env) changedSince(opened filesState) bool {
	return stateOf(e.file) != opened
}

func (e *Env) reopenReadOnly() error {
	fresh, err := OpenContext(context.Background(), e.name, WithDir(filepath.Dir(e.path)), ReadOnly(), WithBusyTimeout(e.busy))
	if err != nil {
		return err
	}
	e.mu.Lock()
	defer e.mu.Unlock()
	if e.closed.Load() {
		fresh.Close() // Close has run and will not see it
		return named(e.name, ErrClosed)
	}
	// The old pool may be in use by a concurrent read: the last such read
	// closes it, or Close does; one unused goes now. Kept open, every pool
	// replaced held its file open until Close, one more for each time a
	// writer changed the files.
	old, oldCopies := e.db, e.copies
	if old != nil && e.readers[old] > 0 {
		if e.retired == nil {
			e.retired = map[*sql.DB][]string{}
		}
		e.retired[old] = oldCopies
		old, oldCopies = nil, nil
	}
	e.db, e.snapshot, e.openedAs = fresh.db, fresh.snapshot, fresh.openedAs
	e.copies = fresh.copies
	if old != nil {
		old.Close()
	}
	removeAll(oldCopies)
	return nil
}
