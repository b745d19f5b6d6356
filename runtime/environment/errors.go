package environment

import (
	"errors"
	"fmt"
)

var (
	// ErrInvalidName: an environment name that cannot be a file name.
	ErrInvalidName = errors.New("environment: invalid name")
	// ErrNotEnvironment: the file exists but is not a vkrt environment.
	ErrNotEnvironment = errors.New("environment: not a vkrt environment")
	// ErrNewerSchema: the file was written by a newer vkrt. Typed form:
	// *SchemaError.
	ErrNewerSchema = errors.New("environment: schema newer than this build")
	// ErrClosed: the environment was used after Close.
	ErrClosed = errors.New("environment: closed")
	// ErrInvalidRecord: a kind, label or body that cannot be stored, or a
	// query that cannot be run (a listing given no function among them).
	ErrInvalidRecord = errors.New("environment: invalid record")
	// ErrReadOnly: a write to an environment opened with ReadOnly.
	ErrReadOnly = errors.New("environment: opened read-only")
	// ErrKindMismatch: an entry decoded as a type of another kind.
	ErrKindMismatch = errors.New("environment: record kind mismatch")
	// ErrCorrupt: the file is a vkrt environment whose pages SQLite found
	// damaged (truncated, overwritten). A writer refuses it at Open, before
	// writing into it; a reader opened ReadOnly is refused it at its first
	// read (Each, Query, EachAs, QueryAs, Get or Kinds), where SQLite reads
	// a broken page of records as holding none. Both are refused it at
	// Open where a write-ahead log holding frames lies beside a file that
	// is empty or missing (the error also matches fs.ErrNotExist), or has
	// a header SQLite does not take: SQLite reads such a log as holding no
	// records, and a writer deletes it or starts it again.
	ErrCorrupt = errors.New("environment: file is damaged")
	// ErrBusy: another writer (a goroutine or a process) held the
	// environment's write lock for longer than the busy timeout.
	ErrBusy = errors.New("environment: locked by another writer past the busy timeout")
	// ErrReplaced: the file a writer opened was removed, or another file
	// put at its path, or its write-ahead log removed, while it was open. SQLite would go on writing into
	// the file that went, and a connection opened later into the new one,
	// so the writer stops: open the environment again.
	ErrReplaced = errors.New("environment: file removed or replaced while open")
)

// ErrHardLinked: a writer was asked to open a file that has other names
// (hard links). SQLite keeps the write-ahead log beside the name a file was
// opened by, so writers through two names damage it, and a reader through
// one misses what the other name's log holds; a writer opens an
// environment by its one name.
var ErrHardLinked = errors.New("environment: file has several names (hard links)")

// SchemaError is ErrNewerSchema with the numbers: the file's schema version
// and the newest one this build reads.
type SchemaError struct {
	Path      string
	Version   int64
	Supported int64
}

func (e *SchemaError) Error() string {
	return fmt.Sprintf("environment: %s has schema version %d, this build reads up to %d; open it with a newer vkrt",
		e.Path, e.Version, e.Supported)
}

// Is makes a *SchemaError match ErrNewerSchema.
func (e *SchemaError) Is(target error) bool { return target == ErrNewerSchema }

// ErrNil: a method was called on a nil *Env, or on a zero one, which Open
// never returns: it has no file to act on. Every method that returns an
// error returns it (Name and Path say ""), rather than dereferencing nil.
var ErrNil = errors.New("environment: a nil or zero Env, not made by Open")

// ErrNilContext: a nil context.Context was passed where a call takes one
// (it panicked deep in database/sql); context.Background() stands for
// none.
var ErrNilContext = errors.New("environment: nil context (pass context.Background() for none)")

// ErrInvalidOption: Open, Path or List was given an option it cannot
// follow: a nil Option (calling it panicked), an empty WithDir, a negative
// WithBusyTimeout.
var ErrInvalidOption = errors.New("environment: invalid option")

// ErrNoRecord: no record has the id asked for.
var ErrNoRecord = errors.New("environment: no such record")

// ErrLogNotCopied: a read-only environment whose write-ahead log has no
// shared-memory index next to it, and whose file and log could not be
// copied into a private directory to be read there.
var ErrLogNotCopied = errors.New("environment: write-ahead log without its index could not be copied to be read")
