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
// the embedded migrations/ folder (with the names of Options.EventsTable
// and Options.OutboxTable for {events} and {outbox}) and sets user_version
// to the newest. It is idempotent and safe to run from several processes at
// once (they take turns). cfg is not used: the SQLite store has no TTL
// index, DeleteDispatched applies retention.
//
// A table (or view) under one of the two names that outboxd did not
// create — one of the service's own, in a file whose user_version is 0,
// or one without outboxd's columns — fails Migrate with an error wrapping
// store.ErrForeign that names the option choosing another name, and changes
// nothing; so does a user_version set while the two tables are missing (the
// file's tables have other names, or another program versions the file).
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
		if err := s.checkOwnTables(ctx, tx, "migrating", current, true); err != nil {
			return err
		}
		for _, m := range all {
			if m.version <= current {
				continue
			}
			if _, err := tx.ExecContext(ctx, s.q.sql(m.up)); err != nil {
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

// requiredTables are the tables the store's operations use, besides the
// events and outbox tables.
var requiredTables = []string{"feed_floor", "leases", "partitions"}

// signatures are columns the events and outbox tables have had since the
// first migration: a table of that name without one of them is not
// outboxd's.
var signatures = [2][]string{
	{"id", "idempotency_key", "source_key", "device_key", "payload", "content_hash", "created_at", "synced_at"},
	{"seq", "event_id", "stream", "message", "created_at", "dispatched_at"},
}

// schemaReader is what *sql.DB and *sql.Tx share for checkOwnTables.
type schemaReader interface {
	QueryContext(ctx context.Context, query string, args ...any) (*sql.Rows, error)
}

// columnsOf returns the lower-case names of the columns of table (none
// when there is no such table or view), or of SQLite's tables and views
// with table "".
func columnsOf(ctx context.Context, q schemaReader, table string) (map[string]bool, error) {
	query, args := `SELECT lower(name) FROM sqlite_master WHERE type IN ('table', 'view')`, []any(nil)
	if table != "" {
		query, args = `SELECT lower(name) FROM pragma_table_info(?)`, []any{table}
	}
	rows, err := q.QueryContext(ctx, query, args...)
	if err != nil {
		return nil, err
	}
	out := map[string]bool{}
	for rows.Next() {
		var name string
		if err := rows.Scan(&name); err != nil {
			_ = rows.Close()
			return nil, err
		}
		out[name] = true
	}
	return out, errors.Join(rows.Err(), rows.Close())
}

// checkOwnTables returns an error wrapping store.ErrForeign, naming the
// option, when the events or outbox table in the file is not outboxd's: one
// present at schema version 0 (when migrating: outboxd is about to create
// it), one without outboxd's columns; when migrating, a version above 0
// with either table missing is one too (the tables have other names, or the
// version is another program's).
func (s *Store) checkOwnTables(ctx context.Context, q schemaReader, doing string, version int, migrating bool) error {
	present, err := columnsOf(ctx, q, "")
	if err != nil {
		return s.fail(doing+" SQLite store", err)
	}
	for i, t := range []struct{ field, name string }{{"EventsTable", s.q.events}, {"OutboxTable", s.q.outbox}} {
		var why string
		switch {
		case !present[t.name] && migrating && version > 0:
			why = fmt.Sprintf("PRAGMA user_version is %d but there is no table %s: outboxd's tables were created under other names "+
				"(name them with Options.EventsTable and Options.OutboxTable), or another program versions this file with user_version "+
				"(give outboxd a file of its own)", version, t.name)
		case !present[t.name]:
			continue
		case version == 0 && migrating:
			why = fmt.Sprintf("the table %s exists and outboxd did not create it (PRAGMA user_version is 0); "+
				"choose a table of outboxd's own with Options.%s", t.name, t.field)
		default:
			cols, err := columnsOf(ctx, q, t.name)
			if err != nil {
				return s.fail(doing+" SQLite store", err)
			}
			var missing []string
			for _, c := range signatures[i] {
				if !cols[c] {
					missing = append(missing, c)
				}
			}
			if len(missing) == 0 {
				continue
			}
			why = fmt.Sprintf("the table %s lacks outboxd's columns %s: it is not outboxd's; choose a table of outboxd's own with Options.%s",
				t.name, strings.Join(missing, ", "), t.field)
		}
		return fmt.Errorf("error %s SQLite store %s: %w: %s", doing, s.path, store.ErrForeign, why)
	}
	return nil
}

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
	present, err := columnsOf(ctx, s.read, "")
	if err != nil {
		return s.fail("checking schema", err)
	}
	var missing []string
	for _, t := range append([]string{s.q.events, s.q.outbox}, requiredTables...) {
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
	return s.checkOwnTables(ctx, s.read, "checking schema of", version, false)
}
