package testkit

import (
	"context"
	"crypto/sha256"
	"encoding/hex"
	"fmt"
	"io/fs"
	"strings"
	"sync"
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
	pg, drop, err := createPostgres()
	require.NoError(t, err)
	t.Cleanup(drop)
	return pg
}

// examplePostgres is the database of a package's Examples
// (ExamplePostgresURL), dropped when Main ends.
var examplePostgres struct {
	once sync.Once
	url  string
	drop func()
	err  error
}

// ExamplePostgresURL returns the URL of a database of the package's
// Examples, which have no testing.TB to clean up after them: a fresh
// database on the test cluster (OUTBOXD_TEST_POSTGRES_URL) as NewPostgres
// makes it, created at the first call and dropped when Main ends. It
// panics when the database cannot be created: an Example has no other way
// to fail.
func ExamplePostgresURL() string {
	e := &examplePostgres
	e.once.Do(func() {
		var pg *Postgres
		pg, e.drop, e.err = createPostgres()
		if e.err == nil {
			pg.Pool.Close() // the Example opens its own
			e.url = pg.URL
		}
	})
	if e.err != nil {
		panic(e.err)
	}
	return e.url
}

// dropExamplePostgres drops the database of ExamplePostgresURL, if one
// was created.
func dropExamplePostgres() {
	if e := &examplePostgres; e.drop != nil {
		e.drop()
	}
}

// createPostgres creates a fresh database cloned from a template that
// holds the current migrations, opens a pool on it, and returns the
// function that closes the pool and drops the database.
func createPostgres() (*Postgres, func(), error) {
	ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
	defer cancel()
	admin, err := pgx.Connect(ctx, PostgresURL())
	if err != nil {
		return nil, nil, fmt.Errorf("PostgreSQL must run at %s (make test sets it up): %w", PostgresURL(), err)
	}
	defer admin.Close(context.Background())

	tmpl, err := templateName()
	if err != nil {
		return nil, nil, err
	}
	if err := ensureTemplate(ctx, admin, tmpl); err != nil {
		return nil, nil, err
	}

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
	if err != nil {
		return nil, nil, err
	}
	drop := func() {
		ctx := context.Background()
		if c, err := pgx.Connect(ctx, PostgresURL()); err == nil {
			_, _ = c.Exec(ctx, "DROP DATABASE IF EXISTS "+name+" WITH (FORCE)")
			_ = c.Close(ctx)
		}
	}
	url := withDatabase(PostgresURL(), name)
	pool, err := pgxpool.New(ctx, url)
	if err != nil {
		drop()
		return nil, nil, err
	}
	return &Postgres{Pool: pool, URL: url, Name: name}, func() { pool.Close(); drop() }, nil
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
func templateName() (string, error) {
	h := sha256.New()
	err := fs.WalkDir(migrations.PostgresFiles(), ".", func(path string, d fs.DirEntry, err error) error {
		if err != nil || d.IsDir() {
			return err
		}
		b, err := fs.ReadFile(migrations.PostgresFiles(), path)
		h.Write([]byte(path))
		h.Write(b)
		return err
	})
	return "outboxd_tmpl_" + hex.EncodeToString(h.Sum(nil))[:12], err
}

func ensureTemplate(ctx context.Context, admin *pgx.Conn, tmpl string) error {
	// Serialise template creation across test processes.
	if _, err := admin.Exec(ctx, "SELECT pg_advisory_lock(7307341)"); err != nil {
		return err
	}
	defer admin.Exec(context.Background(), "SELECT pg_advisory_unlock(7307341)") //nolint:errcheck
	var exists bool
	if err := admin.QueryRow(ctx, "SELECT EXISTS(SELECT 1 FROM pg_database WHERE datname=$1)", tmpl).Scan(&exists); err != nil || exists {
		return err
	}
	building := tmpl + "_building"
	_, _ = admin.Exec(ctx, "DROP DATABASE IF EXISTS "+building+" WITH (FORCE)")
	if _, err := admin.Exec(ctx, "CREATE DATABASE "+building); err != nil {
		return err
	}
	if _, err := migrations.Postgres(ctx, withDatabase(PostgresURL(), building)); err != nil {
		return err
	}
	_, err := admin.Exec(ctx, "ALTER DATABASE "+building+" RENAME TO "+tmpl)
	return err
}
