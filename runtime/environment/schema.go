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

// prepare checks the file is ours, switches it to write-ahead logging and
// brings its schema up to date.
func prepare(ctx context.Context, db *sql.DB, path string) error {
	version, fresh, err := classify(ctx, db, path)
	if err != nil {
		return err
	}
	// WAL: a writer appends to the log and a commit is one record in it, so a
	// killed writer leaves at most an uncommitted tail the next open ignores;
	// readers never block writers. The mode is a property of the file and is
	// set only once the file is known to be ours.
	var mode string
	if err := db.QueryRowContext(ctx, "PRAGMA journal_mode=WAL").Scan(&mode); err != nil {
		return fmt.Errorf("environment: %s: setting WAL mode: %w", path, err)
	}
	if !strings.EqualFold(mode, "wal") {
		return fmt.Errorf("environment: %s: asked for WAL journal mode, the file system gave %q", path, mode)
	}
	if version == SchemaVersion() && !fresh {
		return nil
	}
	return migrate(ctx, db, path)
}

// migrate applies the missing migrations in one write transaction, reading
// the version again under the write lock since another process may have
// migrated the file in the meantime.
func migrate(ctx context.Context, db *sql.DB, path string) error {
	tx, err := db.BeginTx(ctx, nil)
	if err != nil {
		return fmt.Errorf("environment: %s: starting migration: %w", path, err)
	}
	defer tx.Rollback()
	version, fresh, err := classify(ctx, tx, path)
	if err != nil {
		return err
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
