// Package migrations owns the SQL schemas, as numbered files embedded in
// the binary: postgres/ (the read model, applied by goose) and sqlite/ (the
// embedded store, applied by sqlitestore.Migrate). The MongoDB store
// creates its indexes itself (mongostore.Store.Migrate). Applying them
// twice changes nothing.
package migrations

import (
	"context"
	"database/sql"
	"embed"
	"fmt"
	"io/fs"

	_ "github.com/jackc/pgx/v5/stdlib" // database/sql driver "pgx" for goose
	"github.com/pressly/goose/v3"
	"github.com/pressly/goose/v3/lock"
)

//go:embed postgres/*.sql
var postgresFiles embed.FS

// Postgres applies every pending PostgreSQL migration to the database at
// url, under a session advisory lock so concurrent callers are safe. It
// returns how many migrations it applied.
func Postgres(ctx context.Context, url string) (int, error) {
	db, err := sql.Open("pgx", url)
	if err != nil {
		return 0, fmt.Errorf("error opening PostgreSQL: %w", err)
	}
	defer db.Close()
	sub, err := fs.Sub(postgresFiles, "postgres")
	if err != nil {
		return 0, err
	}
	locker, err := lock.NewPostgresSessionLocker()
	if err != nil {
		return 0, err
	}
	p, err := goose.NewProvider(goose.DialectPostgres, db, sub, goose.WithSessionLocker(locker))
	if err != nil {
		return 0, fmt.Errorf("error loading migrations: %w", err)
	}
	res, err := p.Up(ctx)
	if err != nil {
		return 0, fmt.Errorf("error applying PostgreSQL migrations: %w", err)
	}
	return len(res), nil
}

// PostgresFiles returns the embedded SQL migrations (file names at the root).
func PostgresFiles() fs.FS {
	sub, _ := fs.Sub(postgresFiles, "postgres")
	return sub
}
