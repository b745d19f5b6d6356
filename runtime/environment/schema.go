package environment

import (
	"bytes"
	"context"
	"database/sql"
	"errors"
	"fmt"
	"io"
	"os"
	"strings"
	"time"
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
		return 0, false, fmt.Errorf("environment: reading %s: %w", path, err)
	}
	if err := q.QueryRowContext(ctx, "PRAGMA user_version").Scan(&version); err != nil {
		return 0, false, fmt.Errorf("environment: reading %s: %w", path, err)
	}
	switch appID {
	case applicationID:
		if version > SchemaVersion() {
			return 0, false, &SchemaError{Path: path, Version: version, Supported: SchemaVersion()}
		}
		return version, false, nil
	case 0:
		var objects int64
		if err := q.QueryRowContext(ctx, "SELECT count(*) FROM sqlite_schema").Scan(&objects); err != nil {
			return 0, false, fmt.Errorf("environment: reading %s: %w", path, err)
		}
		if objects > 0 || version != 0 {
			return 0, false, fmt.Errorf("%w: %s is a SQLite database of something else (%d schema objects, user_version %d)",
				ErrNotEnvironment, path, objects, version)
		}
		return 0, true, nil
	default:
		return 0, false, fmt.Errorf("%w: %s belongs to another application (application_id %#x, vkrt is %#x)",
			ErrNotEnvironment, path, appID, applicationID)
	}
}

// classifyConsistently classifies the file inside one read transaction, so
// its reads see one state of the file even while another process is
// creating it.
func classifyConsistently(ctx context.Context, db *sql.DB, path string) (version int64, fresh bool, err error) {
	conn, err := db.Conn(ctx)
	if err != nil {
		return 0, false, fmt.Errorf("environment: opening %s: %w", path, err)
	}
	defer conn.Close()
	// A plain BEGIN: the pool's _txlock=immediate would ask for the write
	// lock, which a read-only connection cannot take.
	if _, err := conn.ExecContext(ctx, "BEGIN DEFERRED"); err != nil {
		return 0, false, fmt.Errorf("environment: reading %s: %w", path, err)
	}
	defer conn.ExecContext(context.WithoutCancel(ctx), "ROLLBACK")
	return classify(ctx, conn, path)
}

// prepare checks the file is ours and brings its schema up to date, both in
// one write transaction so that processes opening a new environment at once
// see it either untouched or complete, then switches it to write-ahead
// logging.
func prepare(ctx context.Context, db *sql.DB, path string, busy time.Duration) error {
	if err := migrate(ctx, db, path); err != nil {
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
			return fmt.Errorf("environment: %s: setting WAL mode: %w", path, err)
		}
		select {
		case <-ctx.Done():
			return fmt.Errorf("environment: %s: setting WAL mode: %w", path, ctx.Err())
		case <-time.After(pause):
		}
	}
}

// isBusy reports whether err is SQLite's SQLITE_BUSY or SQLITE_LOCKED (the
// driver's error carries the code; its text is the portable check).
func isBusy(err error) bool {
	msg := err.Error()
	return strings.Contains(msg, "database is locked") || strings.Contains(msg, "SQLITE_BUSY") ||
		strings.Contains(msg, "database table is locked") || strings.Contains(msg, "SQLITE_LOCKED")
}

// migrate checks the file and applies the missing migrations in one write
// transaction (the pool's transactions take the write lock at BEGIN and wait
// on the busy timeout), so another process that created or migrated the
// file in the meantime is seen whole.
func migrate(ctx context.Context, db *sql.DB, path string) error {
	tx, err := db.BeginTx(ctx, nil)
	if err != nil {
		return fmt.Errorf("environment: %s: opening: %w", path, err)
	}
	defer tx.Rollback()
	version, fresh, err := classify(ctx, tx, path)
	if err != nil {
		return err
	}
	if version == SchemaVersion() && !fresh {
		return nil
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
		return fmt.Errorf("environment: %s: committing migration: %w", path, err)
	}
	return nil
}
