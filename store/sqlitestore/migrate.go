package sqlitestore

import (
	"context"
	"database/sql"
	"embed"
	"errors"
	"fmt"
	"io/fs"
	"path"
	"slices"
	"strconv"
	"strings"

	"github.com/outboxd/outboxd/store"
)

// migrationFiles holds the store's schema: numbered SQL files in goose's
// format (00001_store.sql and so on), embedded here rather than in package
// migrations so that a program using only this store links neither goose
// nor pgx.
//
//go:embed migrations/*.sql
var migrationFiles embed.FS

// schemaFiles returns the embedded migrations, file names at the root.
func schemaFiles() fs.FS {
	sub, _ := fs.Sub(migrationFiles, "migrations") // a valid name: cannot fail
	return sub
}

// The schema is versioned with PRAGMA user_version, not goose's version
// table. goose v3 ships no lock for SQLite (only PostgreSQL's advisory lock
// and PostgreSQL/MySQL lock tables, whose store is internal to goose), so two
// processes running goose's Up at once would both see a migration pending
// and both apply it; a lease row of our own would be left behind by a killed
// process. SQLite needs none of that: DDL is transactional and BEGIN
// IMMEDIATE is a lock across processes that a dead process releases. Migrate
// reads user_version, applies the pending files and sets user_version in one
// such transaction, so a second process waits, then finds nothing to do. The
// files keep goose's format (-- +goose Up / Down); only the Up part runs. No
// second SQLite driver is involved either way (goose's sqlite3 dialect is SQL
// text only).

// migration is one numbered SQL file.
type migration struct {
	version int
	name    string
	up      string
}

// loadMigrations reads the numbered files of fsys, in version order, and
// checks that no number is used twice. A number may be skipped: helpers
// that add migrations in parallel reserve their numbers up front, so a
// branch can hold 00007 before 00005 and 00006 are merged. The schema
// version is the highest number applied (see Migrate).
func loadMigrations(fsys fs.FS) ([]migration, error) {
	names, err := fs.Glob(fsys, "*.sql")
	if err != nil {
		return nil, fmt.Errorf("error listing SQLite migrations: %w", err)
	}
	var out []migration
	for _, name := range names {
		digits, _, ok := strings.Cut(name, "_")
		v, err := strconv.Atoi(digits)
		if !ok || err != nil || v <= 0 {
			return nil, fmt.Errorf("error loading SQLite migration %s: the name must start with its number and _", name)
		}
		b, err := fs.ReadFile(fsys, name)
		if err != nil {
			return nil, fmt.Errorf("error loading SQLite migration %s: %w", name, err)
		}
		out = append(out, migration{version: v, name: path.Base(name), up: upSection(string(b))})
	}
	slices.SortFunc(out, func(a, b migration) int { return a.version - b.version })
	for i := 1; i < len(out); i++ {
		if out[i].version == out[i-1].version {
			return nil, fmt.Errorf("error loading SQLite migrations: %s and %s have the same number", out[i-1].name, out[i].name)
		}
	}
	return out, nil
}

// latest returns the highest version of all (0 for none): the schema
// version once all is applied.
func latest(all []migration) int {
	if len(all) == 0 {
		return 0
	}
	return all[len(all)-1].version
}

// upSection returns the part of a goose file between "-- +goose Up" and
// "-- +goose Down" (the whole file when it has no annotations).
func upSection(text string) string {
	if _, after, ok := strings.Cut(text, "-- +goose Up"); ok {
		text = after
	}
	before, _, _ := strings.Cut(text, "-- +goose Down")
	return before
}

// Migrate creates or updates the schema: in one BEGIN IMMEDIATE transaction
// it reads PRAGMA user_version, runs the Up part of every newer migration of
// the embedded migrations/ folder and sets user_version to the newest. It is
// idempotent and safe to run from several processes at once (they take
// turns). cfg is not used: the SQLite store has no TTL index, DeleteDispatched
// applies retention.
func (s *Store) Migrate(ctx context.Context, cfg *store.MigrateConfig) error {
	all, err := loadMigrations(schemaFiles())
	if err != nil {
		return err
	}
	err = s.inWriteTx(ctx, "migrating SQLite store", func(tx *sql.Tx) error {
		var current int
		if err := tx.QueryRowContext(ctx, `PRAGMA user_version`).Scan(&current); err != nil {
			return s.fail("reading schema version", err)
		}
		if current > latest(all) {
			return fmt.Errorf("error migrating SQLite store %s: %w: its schema version %d is newer than this outboxd knows (%d); use a newer outboxd",
				s.path, store.ErrSchema, current, latest(all))
		}
		for _, m := range all {
			if m.version <= current {
				continue
			}
			if _, err := tx.ExecContext(ctx, m.up); err != nil {
				return s.fail(fmt.Sprintf("applying SQLite migration %s", m.name), err)
			}
		}
		// PRAGMA takes no parameters; the number is ours.
		if _, err := tx.ExecContext(ctx, fmt.Sprintf(`PRAGMA user_version = %d`, latest(all))); err != nil {
			return s.fail("setting schema version", err)
		}
		return nil
	})
	// Statements prepared earlier need nothing: SQLite prepares a statement
	// again when the schema it was prepared on changed.
	return err
}

// requiredTables are the tables the store's operations use.
var requiredTables = []string{"events", "outbox", "feed_floor", "leases", "partitions"}

// CheckSchema returns an error wrapping store.ErrSchema, naming what is
// missing and saying to run Store.Migrate, when the tables are absent or
// older than this outboxd's migrations.
func (s *Store) CheckSchema(ctx context.Context) error {
	all, err := loadMigrations(schemaFiles())
	if err != nil {
		return err
	}
	var version int
	if err := s.read.QueryRowContext(ctx, `PRAGMA user_version`).Scan(&version); err != nil {
		return s.fail("checking schema", err)
	}
	rows, err := s.read.QueryContext(ctx, `SELECT name FROM sqlite_master WHERE type = 'table'`)
	if err != nil {
		return s.fail("checking schema", err)
	}
	present := map[string]bool{}
	for rows.Next() {
		var name string
		if err := rows.Scan(&name); err != nil {
			_ = rows.Close()
			return s.fail("checking schema", err)
		}
		present[name] = true
	}
	if err := errors.Join(rows.Err(), rows.Close()); err != nil {
		return s.fail("checking schema", err)
	}
	var missing []string
	for _, t := range requiredTables {
		if !present[t] {
			missing = append(missing, t)
		}
	}
	switch {
	case len(missing) > 0:
		return fmt.Errorf("error checking schema of SQLite store %s: %w: table(s) %s missing; run Store.Migrate",
			s.path, store.ErrSchema, strings.Join(missing, ", "))
	case version < latest(all):
		return fmt.Errorf("error checking schema of SQLite store %s: %w: schema version %d, this outboxd needs %d; run Store.Migrate",
			s.path, store.ErrSchema, version, latest(all))
	case version > latest(all):
		return fmt.Errorf("error checking schema of SQLite store %s: %w: schema version %d is newer than this outboxd knows (%d); use a newer outboxd",
			s.path, store.ErrSchema, version, latest(all))
	}
	return nil
}
