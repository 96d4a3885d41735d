package testkit

import (
	"context"
	"crypto/sha256"
	"encoding/hex"
	"io/fs"
	"strings"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgxpool"
	"github.com/stretchr/testify/require"

	"github.com/outboxd/outboxd/migrations"
)

// PostgresURL returns the URL of the test cluster's admin database.
func PostgresURL() string { return envOr(EnvPostgresURL, PostgresURLDefault) }

// Postgres is a test's own PostgreSQL database, migrated.
type Postgres struct {
	Pool *pgxpool.Pool
	URL  string
	Name string
}

// NewPostgres creates a fresh database for t, cloned from a template that
// holds the current migrations, and drops it at cleanup.
func NewPostgres(t testing.TB) *Postgres {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
	defer cancel()
	admin, err := pgx.Connect(ctx, PostgresURL())
	require.NoError(t, err, "PostgreSQL must run at %s (make test sets it up)", PostgresURL())
	defer admin.Close(context.Background())

	tmpl := templateName(t)
	ensureTemplate(ctx, t, admin, tmpl)

	name := Name("outboxd_test")
	for attempt := 0; ; attempt++ {
		_, err = admin.Exec(ctx, "CREATE DATABASE "+name+" TEMPLATE "+tmpl)
		// Another test cloning the template at the same moment holds it.
		if err == nil || attempt > 50 || !strings.Contains(err.Error(), "being accessed by other users") {
			break
		}
		select {
		case <-ctx.Done():
		case <-time.After(50 * time.Millisecond):
		}
	}
	require.NoError(t, err)
	url := withDatabase(PostgresURL(), name)
	pool, err := pgxpool.New(ctx, url)
	require.NoError(t, err)
	t.Cleanup(func() {
		pool.Close()
		ctx := context.Background()
		if c, err := pgx.Connect(ctx, PostgresURL()); err == nil {
			_, _ = c.Exec(ctx, "DROP DATABASE IF EXISTS "+name+" WITH (FORCE)")
			_ = c.Close(ctx)
		}
	})
	return &Postgres{Pool: pool, URL: url, Name: name}
}

// PoolWith returns another pool on pg's database, its configuration
// changed by edit first (the size, the query mode, a tracer, another
// address), closed at cleanup.
func (pg *Postgres) PoolWith(t testing.TB, edit func(*pgxpool.Config)) *pgxpool.Pool {
	t.Helper()
	cfg, err := pgxpool.ParseConfig(pg.URL)
	require.NoError(t, err)
	edit(cfg)
	pool, err := pgxpool.NewWithConfig(context.Background(), cfg)
	require.NoError(t, err)
	t.Cleanup(pool.Close)
	return pool
}

// templateName is keyed on the migration files, so a changed schema gets a
// new template.
func templateName(t testing.TB) string {
	h := sha256.New()
	require.NoError(t, fs.WalkDir(migrations.PostgresFiles(), ".", func(path string, d fs.DirEntry, err error) error {
		if err != nil || d.IsDir() {
			return err
		}
		b, err := fs.ReadFile(migrations.PostgresFiles(), path)
		h.Write([]byte(path))
		h.Write(b)
		return err
	}))
	return "outboxd_tmpl_" + hex.EncodeToString(h.Sum(nil))[:12]
}

func ensureTemplate(ctx context.Context, t testing.TB, admin *pgx.Conn, tmpl string) {
	t.Helper()
	// Serialise template creation across test processes.
	_, err := admin.Exec(ctx, "SELECT pg_advisory_lock(7307341)")
	require.NoError(t, err)
	defer admin.Exec(context.Background(), "SELECT pg_advisory_unlock(7307341)") //nolint:errcheck
	var exists bool
	require.NoError(t, admin.QueryRow(ctx, "SELECT EXISTS(SELECT 1 FROM pg_database WHERE datname=$1)", tmpl).Scan(&exists))
	if exists {
		return
	}
	building := tmpl + "_building"
	_, _ = admin.Exec(ctx, "DROP DATABASE IF EXISTS "+building+" WITH (FORCE)")
	_, err = admin.Exec(ctx, "CREATE DATABASE "+building)
	require.NoError(t, err)
	_, err = migrations.Postgres(ctx, withDatabase(PostgresURL(), building))
	require.NoError(t, err)
	_, err = admin.Exec(ctx, "ALTER DATABASE "+building+" RENAME TO "+tmpl)
	require.NoError(t, err)
}
