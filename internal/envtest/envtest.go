// Package envtest is what tests of several packages do to an environment's
// file from outside it: hold its write lock as another process's writer
// would.
package envtest

import (
	"context"
	"database/sql"
	"sync"
	"testing"

	"github.com/stretchr/testify/require"
	_ "modernc.org/sqlite" // registers the "sqlite" database/sql driver
)

// HoldWriteLock begins an immediate transaction on the SQLite file at path,
// as another process's writer holds it, until release is called or the
// test ends; release reports a failed rollback.
func HoldWriteLock(t testing.TB, path string) (release func() error) {
	t.Helper()
	db, err := sql.Open("sqlite", "file:"+path)
	require.NoError(t, err)
	conn, err := db.Conn(context.Background())
	require.NoError(t, err)
	_, err = conn.ExecContext(context.Background(), "BEGIN IMMEDIATE")
	require.NoError(t, err)
	var once sync.Once
	var rollback error
	release = func() error {
		once.Do(func() {
			_, rollback = conn.ExecContext(context.Background(), "ROLLBACK")
			conn.Close()
			db.Close()
		})
		return rollback
	}
	t.Cleanup(func() { _ = release() })
	return release
}
