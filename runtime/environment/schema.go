package environment

import (
	"bytes"
	"context"
	"database/sql"
	"errors"
	"fmt"
	"io"
	"io/fs"
	"os"
	"path/filepath"
	"strings"
	"time"

	"modernc.org/sqlite"
	sqlite3 "modernc.org/sqlite/lib"

	"github.com/vkrt/vkrt/internal/printable"
)

// applicationID marks a SQLite file as a vkrt environment ("vkrt" in ASCII),
// so a file of anything else is refused instead of written into.
const applicationID = 0x766b7274

// migrations[v] takes a file from schema version v to v+1. The file's
// user_version is the number of migrations applied; SchemaVersion is the
// newest this build knows.
var migrations = []string{
	// 0 → 1: the records table. The body is JSON text, checked on the way in
	// so a reader never meets a record it cannot parse.
	`CREATE TABLE records (
		id      INTEGER PRIMARY KEY AUTOINCREMENT,
		kind    TEXT    NOT NULL CHECK (kind <> ''),
		label   TEXT    NOT NULL,
		time_ns INTEGER NOT NULL,
		body    TEXT    NOT NULL CHECK (json_valid(body))
	);
	CREATE INDEX records_kind_time ON records (kind, time_ns);`,
}

// SchemaVersion is the newest schema this build reads and writes.
func SchemaVersion() int64 { return int64(len(migrations)) }

var sqliteHeader = []byte("SQLite format 3\x00")

// checkHeader refuses a non-empty file that is not SQLite at all, before the
// driver touches it.
func checkHeader(path string) error {
	f, err := os.Open(path)
	if errors.Is(err, os.ErrNotExist) {
		return nil
	}
	if err != nil {
		return fmt.Errorf("environment: %w", err)
	}
	defer f.Close()
	head := make([]byte, len(sqliteHeader))
	n, err := io.ReadFull(f, head)
	if n == 0 && errors.Is(err, io.EOF) {
		return nil // empty: a fresh environment
	}
	if n < len(head) || !bytes.Equal(head, sqliteHeader) {
		return fmt.Errorf("%w: %s is not a SQLite file", ErrNotEnvironment, path)
	}
	return nil
}

type querier interface {
	QueryRowContext(ctx context.Context, query string, args ...any) *sql.Row
}

// classify reads what the file is: the schema version of a vkrt environment,
// or fresh (an empty database) — anything else is an error that leaves the
// file as it was.
func classify(ctx context.Context, q querier, path string) (version int64, fresh bool, err error) {
	var appID int64
	if err := q.QueryRowContext(ctx, "PRAGMA application_id").Scan(&appID); err != nil {
		if strings.Contains(err.Error(), "not a database") {
			return 0, false, fmt.Errorf("%w: %s: %v", ErrNotEnvironment, path, err)
		}
		return 0, false, fileError(path, "reading", 0, err)
	}
	if err := q.QueryRowContext(ctx, "PRAGMA user_version").Scan(&version); err != nil {
		return 0, false, fileError(path, "reading", 0, err)
	}
	switch appID {
	case applicationID:
		if version > SchemaVersion() {
			return 0, false, &SchemaError{Path: path, Version: version, Supported: SchemaVersion()}
		}
		if version < 0 {
			// vkrt counts migrations from 0; a negative version was set
			// by something else, and would index no migration.
			return 0, false, fmt.Errorf("%w: %s is marked as a vkrt environment but has schema version %d, which no vkrt writes",
				ErrNotEnvironment, path, version)
		}
		return version, false, nil
	case 0:
		var objects int64
		if err := q.QueryRowContext(ctx, "SELECT count(*) FROM sqlite_schema").Scan(&objects); err != nil {
			return 0, false, fmt.Errorf("environment: reading %s: %w", path, err)
		}
		if objects > 0 || version != 0 {
			plural := "s"
			if objects == 1 {
				plural = ""
			}
			return 0, false, fmt.Errorf("%w: %s is a SQLite database of something else (%d schema object%s, user_version %d)",
				ErrNotEnvironment, path, objects, plural, version)
		}
		return 0, true, nil
	default:
		return 0, false, fmt.Errorf("%w: %s belongs to another application (application_id %#x, vkrt is %#x)",
			ErrNotEnvironment, path, appID, applicationID)
	}
}

// classifyConsistently classifies the file inside one read transaction, so
// its reads see one state of the file even while another process is
// creating it, and refuses, as a writer does, a file of this schema whose
// records table another program dropped or changed: a reader's every read
// failed with SQLite's "no such table".
func classifyConsistently(ctx context.Context, db *sql.DB, path string) (version int64, fresh bool, err error) {
	conn, err := db.Conn(ctx)
	if err != nil {
		return 0, false, fileError(path, "opening", 0, err)
	}
	defer conn.Close()
	// A plain BEGIN: the pool's _txlock=immediate would ask for the write
	// lock, which a read-only connection cannot take.
	if _, err := conn.ExecContext(ctx, "BEGIN DEFERRED"); err != nil {
		return 0, false, fileError(path, "reading", 0, err)
	}
	defer conn.ExecContext(context.WithoutCancel(ctx), "ROLLBACK")
	version, fresh, err = classify(ctx, conn, path)
	if err == nil && !fresh && version == SchemaVersion() {
		err = checkRecordsTable(ctx, conn, path)
	}
	return version, fresh, err
}

// prepare checks the file is ours and brings its schema up to date, both in
// one write transaction so that processes opening a new environment at once
// see it either untouched or complete, then switches it to write-ahead
// logging.
func prepare(ctx context.Context, db *sql.DB, path string, busy time.Duration) error {
	if err := migrate(ctx, db, path, busy); err != nil {
		return err
	}
	return enableWAL(ctx, db, path, busy)
}

// enableWAL switches the file to write-ahead logging. WAL: a writer appends
// to the log and a commit is one record in it, so a killed writer leaves at
// most an uncommitted tail the next open ignores; readers never block
// writers. The mode is a property of the file, set only once the file is
// known to be ours. Changing it needs the file to itself, and SQLite answers
// "busy" at once rather than wait when waiting could deadlock, so the switch
// is retried until the busy timeout.
func enableWAL(ctx context.Context, db *sql.DB, path string, busy time.Duration) error {
	deadline := time.Now().Add(busy)
	for pause := time.Millisecond; ; pause = min(2*pause, 50*time.Millisecond) {
		var mode string
		err := db.QueryRowContext(ctx, "PRAGMA journal_mode=WAL").Scan(&mode)
		if err == nil {
			if !strings.EqualFold(mode, "wal") {
				return fmt.Errorf("environment: %s: asked for WAL journal mode, the file system gave %q", path, mode)
			}
			return nil
		}
		if !isBusy(err) || time.Now().After(deadline) {
			return fileError(path, "setting WAL mode of", busy, err)
		}
		select {
		case <-ctx.Done():
			return fmt.Errorf("environment: %s: setting WAL mode: %w", path, ctx.Err())
		case <-time.After(pause):
		}
	}
}

// isBusy reports whether err is SQLite's SQLITE_BUSY or SQLITE_LOCKED.
func isBusy(err error) bool {
	var se *sqlite.Error
	if errors.As(err, &se) {
		code := se.Code() & 0xff
		return code == sqlite3.SQLITE_BUSY || code == sqlite3.SQLITE_LOCKED
	}
	msg := err.Error()
	return strings.Contains(msg, "database is locked") || strings.Contains(msg, "SQLITE_BUSY") ||
		strings.Contains(msg, "database table is locked") || strings.Contains(msg, "SQLITE_LOCKED")
}

// migrate checks the file and applies the missing migrations in one write
// transaction (the pool's transactions take the write lock at BEGIN and wait
// on the busy timeout), so another process that created or migrated the
// file in the meantime is seen whole.
func migrate(ctx context.Context, db *sql.DB, path string, busy time.Duration) error {
	tx, err := db.BeginTx(ctx, nil)
	if err != nil {
		return fileError(path, "opening", busy, err)
	}
	defer tx.Rollback()
	version, fresh, err := classify(ctx, tx, path)
	if err != nil {
		return err
	}
	if !fresh {
		// A write into a damaged file can make it worse (a page taken
		// from a broken free list may be one that holds records), so a
		// writer refuses it before its first write.
		if err := quickCheck(ctx, tx, path); err != nil {
			return err
		}
	}
	if version == SchemaVersion() && !fresh {
		return checkRecordsTable(ctx, tx, path)
	}
	if fresh {
		if _, err := tx.ExecContext(ctx, fmt.Sprintf("PRAGMA application_id = %d", applicationID)); err != nil {
			return fmt.Errorf("environment: %s: marking the file: %w", path, err)
		}
	}
	for v := version; v < SchemaVersion(); v++ {
		if _, err := tx.ExecContext(ctx, migrations[v]); err != nil {
			return fmt.Errorf("environment: %s: migrating schema %d to %d: %w", path, v, v+1, err)
		}
	}
	if _, err := tx.ExecContext(ctx, fmt.Sprintf("PRAGMA user_version = %d", SchemaVersion())); err != nil {
		return fmt.Errorf("environment: %s: setting schema version: %w", path, err)
	}
	if err := tx.Commit(); err != nil {
		return fileError(path, "committing the migration of", busy, err)
	}
	return nil
}

// recordsColumns are the columns of the records table the schema makes.
var recordsColumns = []string{"id", "kind", "label", "time_ns", "body"}

// checkRecordsTable refuses, with ErrNotEnvironment, a file marked as an
// environment of this schema whose records table another program dropped
// or changed: a writer opened it and then failed every write with SQLite's
// "no such table", and a reader every read.
func checkRecordsTable(ctx context.Context, q interface {
	QueryContext(ctx context.Context, query string, args ...any) (*sql.Rows, error)
}, path string) error {
	rows, err := q.QueryContext(ctx, "SELECT name FROM pragma_table_info('records')")
	if err != nil {
		return fileError(path, "checking", 0, err)
	}
	defer rows.Close()
	have := map[string]bool{}
	for rows.Next() {
		var name string
		if err := rows.Scan(&name); err != nil {
			return fileError(path, "checking", 0, err)
		}
		have[name] = true
	}
	if err := rows.Err(); err != nil {
		return fileError(path, "checking", 0, err)
	}
	if len(have) == 0 {
		return fmt.Errorf("%w: %s is marked as one of schema %d but has no records table (another program dropped it)", ErrNotEnvironment, path, SchemaVersion())
	}
	for _, c := range recordsColumns {
		if !have[c] {
			return fmt.Errorf("%w: %s is marked as one of schema %d but its records table has no column %s (another program changed it)", ErrNotEnvironment, path, SchemaVersion(), c)
		}
	}
	return nil
}

// maxCheckProblems bounds how many of quick_check's findings an error
// quotes.
const maxCheckProblems = 3

// quickCheck runs SQLite's quick_check (every page and record is well
// formed; indexes are not compared with their tables) and refuses a damaged
// file with ErrCorrupt.
func quickCheck(ctx context.Context, q interface {
	QueryContext(ctx context.Context, query string, args ...any) (*sql.Rows, error)
}, path string) error {
	rows, err := q.QueryContext(ctx, fmt.Sprintf("PRAGMA quick_check(%d)", maxCheckProblems))
	if err != nil {
		return fileError(path, "checking", 0, err)
	}
	defer rows.Close()
	var rowsRead []string
	for rows.Next() {
		var p string
		if err := rows.Scan(&p); err != nil {
			return fileError(path, "checking", 0, err)
		}
		rowsRead = append(rowsRead, p)
	}
	if err := rows.Err(); err != nil {
		return fileError(path, "checking", 0, err)
	}
	if len(rowsRead) == 1 && rowsRead[0] == "ok" {
		return nil
	}
	// A row may hold several findings a line each, under a heading line
	// naming the database (always main here): each finding is a line of
	// the error of its own, indented under it, and escaped, as it quotes
	// names from the damaged file.
	var problems []string
	for _, r := range rowsRead {
		for line := range strings.Lines(r) {
			line = strings.TrimSpace(line)
			if line == "" || strings.HasPrefix(line, "*** in database ") {
				continue
			}
			problems = append(problems, "\n  "+printable.Escaped(line))
		}
	}
	problems = problems[:min(len(problems), maxCheckProblems)]
	return fmt.Errorf("%w: %s fails SQLite's quick_check; it is left as it was (sqlite3's .recover can "+
		"salvage its records into a new file):%s", ErrCorrupt, path, strings.Join(problems, ""))
}

// fileError is err of SQLite on the file at path while doing what: of a
// kind dbError classifies, it is that error, which names the kind and the
// file once ("environment: file is damaged: PATH: …", where it read
// "environment: PATH: opening: environment: file is damaged: PATH: …");
// else it is told with what and the file.
func fileError(path, what string, busy time.Duration, err error) error {
	classified := dbError(path, busy, err)
	if classified == err {
		return fmt.Errorf("environment: %s %s: %w", what, path, err)
	}
	if !strings.HasPrefix(classified.Error(), "environment: ") {
		return fmt.Errorf("environment: %w", classified)
	}
	return classified
}

// dbError classifies an error SQLite returned for the file at path: a
// damaged page is ErrCorrupt, a write lock held past the busy timeout
// ErrBusy, a row the table's checks refuse ErrInvalidRecord; anything else
// is returned as it is.
func dbError(path string, busy time.Duration, err error) error {
	var se *sqlite.Error
	if err == nil || !errors.As(err, &se) {
		return err
	}
	switch se.Code() {
	case sqlite3.SQLITE_READONLY_DBMOVED:
		// SQLite's own finding that the file went from under it.
		return fmt.Errorf("%w: %s: %w", ErrReplaced, path, err)
	case sqlite3.SQLITE_READONLY_DIRECTORY:
		// The file may be writable: SQLite makes its write-ahead log and
		// index beside it, in a directory it may not write.
		return fmt.Errorf("%s cannot be written: its directory %s is not writable, where SQLite keeps its write-ahead log (%w; it can still be read, read-only): %w", path, filepath.Dir(path), fs.ErrPermission, err)
	}
	switch se.Code() & 0xff {
	case sqlite3.SQLITE_CORRUPT:
		return fmt.Errorf("%w: %s: %w", ErrCorrupt, path, err)
	case sqlite3.SQLITE_NOTADB:
		// A file that starts as SQLite's do but is none (its header
		// alone, a header over other bytes), met as a connection
		// opens, where classify is not reached: it matched no kind.
		return fmt.Errorf("%w: %s: %w", ErrNotEnvironment, path, err)
	case sqlite3.SQLITE_BUSY, sqlite3.SQLITE_LOCKED:
		if busy <= 0 {
			return fmt.Errorf("%w: %s: %w", ErrBusy, path, err)
		}
		return fmt.Errorf("%w: %s, still locked after %v (the busy timeout): %w", ErrBusy, path, busy, err)
	case sqlite3.SQLITE_CONSTRAINT:
		return fmt.Errorf("%w: %s refuses it: %w", ErrInvalidRecord, path, err)
	case sqlite3.SQLITE_READONLY:
		return fmt.Errorf("%s cannot be written (%w; it can still be read, read-only): %w", path, fs.ErrPermission, err)
	}
	return err
}
