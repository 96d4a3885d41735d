package runner

import (
	"context"
	"net"
	"path/filepath"
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/outboxd/outboxd/internal/testkit"
	"github.com/outboxd/outboxd/store/sqlitestore"
)

// closedPostgres returns a PostgreSQL URL on a loopback port nothing
// listens on.
func closedPostgres(t *testing.T) string {
	t.Helper()
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	require.NoError(t, err)
	addr := ln.Addr().String()
	require.NoError(t, ln.Close())
	return "postgres://outboxd:outboxd@" + addr + "/outboxd?sslmode=disable&connect_timeout=2"
}

// storeMigrated reports whether the SQLite store at path has its schema.
func storeMigrated(t *testing.T, path string) bool {
	t.Helper()
	st, err := sqlitestore.Open(context.Background(), path, nil)
	require.NoError(t, err)
	defer st.Close(context.Background())
	return st.CheckSchema(context.Background()) == nil
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
		require.Equal(t, ExitFailure, code, out)
		require.Contains(t, out, "the PostgreSQL read model's schema was not applied")
		require.Contains(t, out, "the store's schema was applied")
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
	t.Run("NotBoth", func(t *testing.T) {
		t.Parallel()
		code, out := runCLI(t, nil, "migrate", "--store-only", "--read-model-only")
		require.Equal(t, ExitUsage, code, out)
		require.Contains(t, out, "--store-only")
	})
}
