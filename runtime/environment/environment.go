package environment

import (
	"context"
	"database/sql"
	"errors"
	"fmt"
	"io/fs"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	_ "modernc.org/sqlite" // registers the "sqlite" database/sql driver
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
	busyTimeout time.Duration
	create      bool
	readOnly    bool
	now         func() time.Time
}

// Option configures Open.
type Option func(config) config

// WithDir stores environments in dir instead of the default data directory.
func WithDir(dir string) Option {
	return func(c config) config { c.dir = dir; return c }
}

// WithBusyTimeout sets how long a write waits for another writer (another
// goroutine or process) before failing. The default is 10 seconds.
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
// records and stays empty. Put fails with ErrReadOnly.
func ReadOnly() Option {
	return func(c config) config { c.readOnly, c.create = true, false; return c }
}

// WithClock sets the clock that stamps records. The default is time.Now.
func WithClock(now func() time.Time) Option {
	return func(c config) config { c.now = now; return c }
}

func newConfig(opts []Option) config {
	c := config{busyTimeout: 10 * time.Second, create: true, now: time.Now}
	for _, o := range opts {
		c = o(c)
	}
	return c
}

// DefaultDir is the data directory environments live in when no option
// names one: $VKRT_ENV_DIR, else $XDG_DATA_HOME/vkrt/env, else
// ~/.local/share/vkrt/env.
func DefaultDir() (string, error) {
	if d := os.Getenv(DirEnvVar); d != "" {
		return d, nil
	}
	if d := os.Getenv("XDG_DATA_HOME"); d != "" {
		return filepath.Join(d, "vkrt", "env"), nil
	}
	home, err := os.UserHomeDir()
	if err != nil {
		return "", fmt.Errorf("environment: no data directory: set %s or XDG_DATA_HOME: %w", DirEnvVar, err)
	}
	return filepath.Join(home, ".local", "share", "vkrt", "env"), nil
}

func (c config) resolveDir() (string, error) {
	if c.dir != "" {
		return c.dir, nil
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
		return fmt.Errorf("%w: %q contains a path separator; an environment is named, not located (use WithDir or %s to move the directory)",
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
	dir, err := newConfig(opts).resolveDir()
	if err != nil {
		return "", err
	}
	return filepath.Join(dir, name+fileExt), nil
}

// List names the environments in the options' data directory, sorted. A
// directory that does not exist holds none.
func List(opts ...Option) ([]string, error) {
	dir, err := newConfig(opts).resolveDir()
	if err != nil {
		return nil, err
	}
	entries, err := os.ReadDir(dir)
	if errors.Is(err, fs.ErrNotExist) {
		return nil, nil
	}
	if err != nil {
		return nil, fmt.Errorf("environment: listing %s: %w", dir, err)
	}
	var names []string
	for _, e := range entries {
		name, ok := strings.CutSuffix(e.Name(), fileExt)
		if ok && e.Type().IsRegular() && ValidateName(name) == nil {
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
	// db is nil for a read-only environment whose file is empty or was
	// never migrated: it holds no records.
	db       *sql.DB
	readOnly bool
	// immutable: read-only, opened when no writer had the file open, so
	// the main file is read without locks; openedAs is its state then.
	immutable bool
	openedAs  fs.FileInfo
	busy      time.Duration
	retired   []*sql.DB  // pools a read-only Env replaced, closed by Close
	mu        sync.Mutex // guards db, immutable, openedAs and retired of a read-only Env
	now       func() time.Time
	closed    atomic.Bool
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
	c := newConfig(opts)
	if err := ValidateName(name); err != nil {
		return nil, err
	}
	dir, err := c.resolveDir()
	if err != nil {
		return nil, err
	}
	path := filepath.Join(dir, name+fileExt)
	if c.busyTimeout < 0 {
		return nil, fmt.Errorf("environment: busy timeout %v is negative", c.busyTimeout)
	}
	info, err := os.Stat(path)
	if errors.Is(err, fs.ErrNotExist) {
		if !c.create {
			return nil, fmt.Errorf("environment %q does not exist (no file %s): %w", name, path, fs.ErrNotExist)
		}
		if err := os.MkdirAll(dir, 0o755); err != nil {
			return nil, fmt.Errorf("environment: creating data directory: %w", err)
		}
	} else if err != nil {
		return nil, fmt.Errorf("environment %q: %w", name, err)
	} else if !info.Mode().IsRegular() {
		// Opening a FIFO blocks until a writer appears; a device or a
		// directory is no environment either.
		return nil, fmt.Errorf("%w: %s is a %s, not a regular file", ErrNotEnvironment, path, fileType(info.Mode()))
	}
	if err := checkHeader(path); err != nil {
		return nil, err
	}
	if c.readOnly {
		return openReadOnly(ctx, name, path, c, info)
	}
	db, err := sql.Open("sqlite", dsn(path, c.busyTimeout, ""))
	if err != nil {
		return nil, fmt.Errorf("environment %q: %w", name, err)
	}
	if err := prepare(ctx, db, path, c.busyTimeout); err != nil {
		db.Close()
		return nil, err
	}
	return &Env{name: name, path: path, db: db, now: c.now}, nil
}

// openReadOnly opens an existing file without writing anything next to it.
// In WAL mode a reader needs the log's shared-memory index: while a writer
// has the environment open both files exist and the reader maps them as
// they are; when neither exists every committed record is in the main file,
// which is then read as immutable, with no lock and no index to create.
func openReadOnly(ctx context.Context, name, path string, c config, info fs.FileInfo) (*Env, error) {
	env := &Env{name: name, path: path, readOnly: true, openedAs: info, busy: c.busyTimeout, now: c.now}
	if info.Size() == 0 {
		return env, nil
	}
	extra := "mode=ro"
	if !exists(path+"-wal") || !exists(path+"-shm") {
		extra += "&immutable=1"
		env.immutable = true
	}
	db, err := sql.Open("sqlite", dsn(path, c.busyTimeout, extra))
	if err != nil {
		return nil, fmt.Errorf("environment %q: %w", name, err)
	}
	version, fresh, err := classifyConsistently(ctx, db, path)
	if err != nil {
		db.Close()
		return nil, err
	}
	if fresh || version == 0 {
		db.Close() // marked but never migrated: no records table yet
		return env, nil
	}
	env.db = db
	return env, nil
}

func exists(path string) bool {
	_, err := os.Lstat(path)
	return err == nil
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
		busy.Milliseconds())
	if extra != "" {
		q += "&" + extra
	}
	return "file:" + escapeURIPath(path) + "?" + q
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

// Name is the environment's name.
func (e *Env) Name() string { return e.name }

// Path is the environment's file.
func (e *Env) Path() string { return e.path }

// Close releases the environment. Using it afterwards fails with ErrClosed;
// closing twice is harmless.
func (e *Env) Close() error {
	if e.closed.Swap(true) {
		return nil
	}
	e.mu.Lock()
	db, retired := e.db, e.retired
	e.mu.Unlock()
	for _, r := range retired {
		r.Close()
	}
	if db == nil {
		return nil
	}
	if err := db.Close(); err != nil {
		return fmt.Errorf("environment %q: closing: %w", e.name, err)
	}
	return nil
}

func (e *Env) usable() error {
	if e.closed.Load() {
		return fmt.Errorf("environment %q: %w", e.name, ErrClosed)
	}
	return nil
}

func (e *Env) writable() error {
	if err := e.usable(); err != nil {
		return err
	}
	if e.readOnly {
		return fmt.Errorf("environment %q: %w", e.name, ErrReadOnly)
	}
	return nil
}

// errNoTable: a read-only environment whose file holds no records table yet.
var errNoTable = errors.New("environment: no records yet")

// read runs one read against the environment. A read-only environment
// opened as immutable (no writer had it open) checks afterwards that no
// writer appeared meanwhile; if one did, the read may have raced its
// checkpoint, so the file is opened again as a WAL reader and the read
// repeated.
func (e *Env) read(fn func(db *sql.DB) error) error {
	for attempt := 0; ; attempt++ {
		e.mu.Lock()
		db, immutable, opened := e.db, e.immutable, e.openedAs
		e.mu.Unlock()
		if db == nil {
			if !e.readOnly || !e.changedSince(opened) {
				return errNoTable
			}
		} else {
			err := fn(db)
			if !immutable || !e.changedSince(opened) {
				return err
			}
		}
		if attempt == 2 {
			return fmt.Errorf("environment %q: the file kept changing under a read-only reader", e.name)
		}
		if err := e.reopenReadOnly(); err != nil {
			return err
		}
	}
}

// changedSince reports whether a writer has touched the file since it was
// opened: a log next to it, or another size or modification time.
func (e *Env) changedSince(opened fs.FileInfo) bool {
	if exists(e.path + "-wal") {
		return true
	}
	now, err := os.Stat(e.path)
	return err != nil || opened == nil || now.Size() != opened.Size() || !now.ModTime().Equal(opened.ModTime())
}

func (e *Env) reopenReadOnly() error {
	fresh, err := OpenContext(context.Background(), e.name, WithDir(filepath.Dir(e.path)), ReadOnly(), WithBusyTimeout(e.busy))
	if err != nil {
		return err
	}
	e.mu.Lock()
	// The old pool may be in use by a concurrent read: it is closed with
	// the environment, not now.
	if e.db != nil {
		e.retired = append(e.retired, e.db)
	}
	e.db, e.immutable, e.openedAs = fresh.db, fresh.immutable, fresh.openedAs
	e.mu.Unlock()
	return nil
}
