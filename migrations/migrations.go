// Package migrations owns the PostgreSQL schema of the read model, as
// numbered SQL files in postgres/ embedded in the binary and applied by
// goose. The stores of the system of record carry their own schema: the
// SQLite store embeds its files (sqlitestore.Store.Migrate, so a program
// using only that store links neither goose nor pgx) and the MongoDB store
// creates its indexes itself (mongostore.Store.Migrate). Applying either
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
