// Package environment keeps vkrt's named environments: each one a SQLite file
// of typed records (kind "memory" for the pool reports a client snapshots,
// more kinds later) that outlive the process that wrote them.
//
// An environment stores a record as its kind, a label, the time it was
// written and its JSON body; it knows nothing of what the bodies mean, so any
// package can define a kind of its own by giving a type a Kind method. Bodies
// are written with the type's own JSON encoding, which for the memory records
// is the serde-compatible shape of the runtime the design comes from.
//
// Files live under a data directory: the WithDir option, else $VKRT_ENV_DIR,
// else $XDG_DATA_HOME/vkrt/env (an absolute one), else
// ~/.local/share/vkrt/env. The store is
// kill-safe (write-ahead log, each Put one synchronous transaction: a process
// killed mid-write loses at most the record it was writing) and safe for
// concurrent use by goroutines and by several processes: processes that open
// a new environment at once check and create its schema in one write
// transaction, so none fails and no record is lost. The directory is passed
// to SQLite as an escaped URI, so '%', '?' and '#' in it name the directory
// they spell. A reader that opens with ReadOnly writes nothing next to the
// file (no -wal or -shm of its own, no schema into an empty file, no
// checkpoint) and never blocks a writer; a log found without its -shm index
// is read, every committed record of it, from a private copy in the
// temporary directory.
// A file that is not a regular one (a FIFO, a device) is refused before it
// is opened, and so is a log or index next to it that is not a file. A
// writer refuses, before writing anything, a file it cannot write (an error
// matching fs.ErrPermission) and one that fails SQLite's quick check
// (ErrCorrupt), and a reader's first read (Each, Get or Kinds, once per
// Open) fails with the same error. Reader and writer refuse at Open, with
// ErrCorrupt, a write-ahead log holding frames beside a file that is empty
// or missing, or whose header SQLite does not take: SQLite reads either
// log as holding no records, and a writer deletes or restarts it. A writer refuses a file that has other names (hard
// links: SQLite keeps a log beside each name, and writers through two
// damage it) with ErrHardLinked; a reader reads it, without the records a
// writer through another name holds in its log; a write lock held by
// another writer past the busy timeout is ErrBusy. A writer whose file is removed or replaced, or whose
// write-ahead log is removed, while it is open stops with ErrReplaced
// rather than write where no reader looks. An
// environment reached through a symbolic link is read with
// the log next to the file the link points to, where SQLite keeps it.
//
// A call given a nil context is refused with ErrNilContext, one given a nil
// Option with ErrInvalidOption, and a method of a nil or zero *Env (which
// Open never returns) with ErrNil.
//
// Each lists records a page at a time, so a listing of a large environment
// holds one page of bodies, not all of them; Query collects what Each
// lists.
package environment
