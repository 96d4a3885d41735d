package runner

import (
	"context"
	"database/sql"
	"errors"
	"net"
	"os"
	"path/filepath"
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/outboxd/outboxd/internal/testkit"
	"github.com/outboxd/outboxd/store/sqlitestore"
)

// closedAddr returns a loopback address nothing listens on.
func closedAddr(t *testing.T) string {
	t.Helper()
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	require.NoError(t, err)
	addr := ln.Addr().String()
	require.NoError(t, ln.Close())
	return addr
}

// closedPostgres returns a PostgreSQL URL on a loopback port nothing
// listens on.
func closedPostgres(t *testing.T) string {
	return "postgres://outboxd:outboxd@" + closedAddr(t) + "/outboxd?sslmode=disable&connect_timeout=2"
}

// closedMongo returns a MongoDB store URI on a loopback port nothing
// listens on (a store would try it for OpTimeout).
func closedMongo(t *testing.T) string {
	return "mongodb://" + closedAddr(t) + "/"
}

// unopenableSQLite returns an SQLite store URI whose file cannot be
// opened: its directory is a file.
func unopenableSQLite(t *testing.T) string {
	t.Helper()
	notADir := filepath.Join(t.TempDir(), "file")
	require.NoError(t, os.WriteFile(notADir, nil, 0o644))
	return "sqlite:" + filepath.Join(notADir, "s.db")
}

// readModelMigrated reports whether the PostgreSQL database of pg has
// outboxd's read model tables.
func readModelMigrated(t *testing.T, pg *testkit.Postgres) bool {
	t.Helper()
	var n int
	require.NoError(t, pg.Pool.QueryRow(context.Background(),
		`SELECT count(*) FROM unnest(ARRAY['events', 'device_daily_stats', 'audit_runs']) AS t(name) WHERE to_regclass('public.' || name) IS NOT NULL`).Scan(&n))
	return n == 3
}

// storeMigrated reports whether the SQLite store at path has its schema.
func storeMigrated(t *testing.T, path string) bool {
	t.Helper()
	st, err := sqlitestore.Open(context.Background(), path, nil)
	require.NoError(t, err)
	defer st.Close(context.Background())
	return st.CheckSchema(context.Background()) == nil
}

// requirePartLeft asserts that migrate failed, saying that the part left
// was not applied and the part applied was.
func requirePartLeft(t *testing.T, code int, out, left, applied string) {
	t.Helper()
	require.Equal(t, ExitFailure, code, out)
	require.Contains(t, out, left+" was not applied")
	require.Contains(t, out, applied+" was applied")
}

// TestMigrateParts: migrate applies the store's schema and the read
// model's each whatever became of the other; --store-only needs no
// PostgreSQL, --read-model-only leaves the store alone, and a failure names
// the part that was not applied and the one that was.
func TestMigrateParts(t *testing.T) {
	t.Parallel()
	t.Run("StoreOnlyWithPostgresDown", func(t *testing.T) {
		t.Parallel()
		path := filepath.Join(t.TempDir(), "s.db")
		code, out := runCLI(t, nil, "migrate", "--store", "sqlite:"+path, "--postgres-url", closedPostgres(t), "--store-only")
		require.Equal(t, ExitOK, code, out)
		require.True(t, storeMigrated(t, path))
	})
	t.Run("BothWithPostgresDown", func(t *testing.T) {
		t.Parallel()
		path := filepath.Join(t.TempDir(), "s.db")
		code, out := runCLI(t, nil, "migrate", "--store", "sqlite:"+path, "--postgres-url", closedPostgres(t))
		requirePartLeft(t, code, out, "the PostgreSQL read model's schema", "the store's schema")
		require.True(t, storeMigrated(t, path), "the store is migrated though PostgreSQL is down")
	})
	t.Run("ReadModelOnly", func(t *testing.T) {
		t.Parallel()
		pg := testkit.NewPostgres(t)
		path := filepath.Join(t.TempDir(), "s.db")
		code, out := runCLI(t, nil, "migrate", "--store", "sqlite:"+path, "--postgres-url", pg.URL, "--read-model-only")
		require.Equal(t, ExitOK, code, out)
		require.False(t, storeMigrated(t, path), "--read-model-only leaves the store alone")
	})
	t.Run("ReadModelOnlyWithStoreDown", func(t *testing.T) {
		t.Parallel()
		pg := testkit.NewPostgres(t)
		code, out := runCLI(t, nil, "migrate", "--store", closedMongo(t), "--postgres-url", pg.URL, "--read-model-only")
		require.Equal(t, ExitOK, code, out)
		require.NotContains(t, out, "MongoDB", "--read-model-only does not reach for the store")
		require.True(t, readModelMigrated(t, pg))
	})
	t.Run("BothWithStoreDown", func(t *testing.T) {
		t.Parallel()
		pg := testkit.NewPostgres(t)
		code, out := runCLI(t, nil, "migrate", "--store", unopenableSQLite(t), "--postgres-url", pg.URL)
		requirePartLeft(t, code, out, "the store's schema (sqlite)", "the PostgreSQL read model's schema")
		require.True(t, readModelMigrated(t, pg), "the read model is migrated though the store cannot be opened")
	})
	t.Run("ForeignTableNamesTheFlags", func(t *testing.T) {
		t.Parallel()
		path := filepath.Join(t.TempDir(), "s.db")
		db, err := sql.Open("sqlite", path)
		require.NoError(t, err)
		_, err = db.Exec(`CREATE TABLE events (id INTEGER PRIMARY KEY, what TEXT)`)
		require.NoError(t, errors.Join(err, db.Close()))
		code, out := runCLI(t, nil, "migrate", "--store", "sqlite:"+path, "--store-only")
		require.Equal(t, ExitFailure, code, out)
		require.Contains(t, out, "--events-collection")
		require.NotContains(t, out, "Options.")
		require.False(t, storeMigrated(t, path))
		// The way out it names: outboxd's tables under other names.
		code, out = runCLI(t, nil, "migrate", "--store", "sqlite:"+path, "--store-only",
			"--events-collection", "outboxd_events", "--outbox-collection", "outboxd_outbox")
		require.Equal(t, ExitOK, code, out)
	})
	t.Run("NotBoth", func(t *testing.T) {
		t.Parallel()
		code, out := runCLI(t, nil, "migrate", "--store-only", "--read-model-only")
		require.Equal(t, ExitUsage, code, out)
		require.Contains(t, out, "--store-only")
	})
}
