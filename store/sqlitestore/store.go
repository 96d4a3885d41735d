package sqlitestore

import (
	"bytes"
	"cmp"
	"context"
	"database/sql"
	"database/sql/driver"
	"encoding/binary"
	"errors"
	"fmt"
	"io"
	"os"
	"path/filepath"
	"sync"
	"sync/atomic"
	"time"

	"github.com/outboxd/outboxd/store"
)

// Kind is what Store.Kind returns.
const Kind = "sqlite"

// Defaults of Options.
const (
	// BusyTimeoutDefault is how long a statement waits for a lock another
	// connection (or process) holds.
	BusyTimeoutDefault = 10 * time.Second
	// ReadConnsDefault is the size of the read pool.
	ReadConnsDefault = 4
	// PollIntervalDefault is how often a quiet feed looks at the outbox.
	PollIntervalDefault = 100 * time.Millisecond
	// CheckpointIntervalDefault is how often a Store copies the WAL into
	// the database file (see checkpointer). A checkpoint's syncs slow the
	// commits that meet them, the more the larger it is: measured at 2,000
	// events/s in `outboxd dev`, ingest → syncedAt p99 was 50 ms with
	// 250ms, 100 ms with 1s, 700 ms with 10s (and 60–120 ms with 100ms).
	CheckpointIntervalDefault = 250 * time.Millisecond
)

// Options tune a Store. A nil *Options means all defaults.
type Options struct {
	// EventsTable names the originals' table, so outboxd can sit beside a
	// service's own tables in its file; its indexes are named after it
	// (EventsTable_id, …). An SQL identifier (letters, digits and _),
	// compared without case as SQLite does, not one of the store's other
	// tables (feed_floor, leases, partitions, events_removed) and not
	// OutboxTable. It must be a table of outboxd's own: Migrate refuses one
	// it did not create (store.ErrForeign). Every process on the file must
	// name the same. Defaults to EventsTable ("events").
	EventsTable string
	// OutboxTable names the outbox entries' table, with the same rules;
	// its indexes are named after it. Defaults to OutboxTable ("outbox").
	OutboxTable string
	// BusyTimeout is how long a statement waits for a lock held by another
	// connection, typically another process's write transaction, before it
	// fails with an error wrapping store.ErrUnavailable. Defaults to
	// BusyTimeoutDefault (10 seconds).
	BusyTimeout time.Duration
	// ReadConns is the number of connections that serve reads (feeds,
	// loads, counts) while a write is running. Defaults to ReadConnsDefault
	// (4).
	ReadConns int
	// CheckpointInterval is how often the Store copies the WAL into the
	// database file, in the background, so that no commit pays for it.
	// Defaults to CheckpointIntervalDefault (250ms).
	CheckpointInterval time.Duration
	// ObserveWriter, when set, is called after each write transaction of
	// the Store's write connection with the role of its context
	// (store.RoleOf; "other" when none), how long it waited for the
	// connection and the write lock (BEGIN IMMEDIATE included), and how long
	// it then held them (its statements and COMMIT, or rollback). A
	// metric: this package imports no metrics code. Single-statement writes
	// in autocommit (Park, lease renewals and releases, claim rollbacks) are
	// not observed. Defaults to nil.
	ObserveWriter func(role string, waited, held time.Duration)
	// walRestartFrames replaces walRestartFrames when not zero (tests).
	walRestartFrames int
}

func (o *Options) withDefaults() Options {
	var out Options
	if o != nil {
		out = *o
	}
	if out.BusyTimeout == 0 {
		out.BusyTimeout = BusyTimeoutDefault
	}
	if out.ReadConns == 0 {
		out.ReadConns = ReadConnsDefault
	}
	if out.CheckpointInterval == 0 {
		out.CheckpointInterval = CheckpointIntervalDefault
	}
	out.EventsTable = cmp.Or(out.EventsTable, EventsTable)
	out.OutboxTable = cmp.Or(out.OutboxTable, OutboxTable)
	return out
}

// Validate reports the first field of the options that cannot work,
// naming it, with the defaults of the fields left zero: a caller (the CLI)
// checks its settings before it opens anything.
func (o *Options) Validate() error {
	return o.withDefaults().validate()
}

func (o Options) validate() error {
	if _, err := tablesOf(o); err != nil {
		return err
	}
	if o.BusyTimeout < time.Millisecond {
		return fmt.Errorf("invalid Options.BusyTimeout %s: must be at least 1ms", o.BusyTimeout)
	}
	if o.ReadConns < 1 {
		return fmt.Errorf("invalid Options.ReadConns %d: must be at least 1", o.ReadConns)
	}
	if o.CheckpointInterval < time.Millisecond {
		return fmt.Errorf("invalid Options.CheckpointInterval %s: must be at least 1ms", o.CheckpointInterval)
	}
	return nil
}

// Store is the storage port on one SQLite file. It is safe for concurrent
// use, and several Stores, in one process or in several, may share a file.
type Store struct {
	path string
	// write has one connection: in-process writers queue in database/sql
	// for it, and only writers of other processes meet in SQLite's lock.
	write *sql.DB
	// read serves reads; WAL lets them run while a transaction writes.
	read *sql.DB
	// ckpt copies the WAL into the file in the background.
	ckpt *checkpointer
	// observe is Options.ObserveWriter.
	observe func(role string, waited, held time.Duration)
	// q are the statements on the events and outbox tables, with the
	// names of Options.EventsTable and Options.OutboxTable.
	q *queries

	// stmts are outbox.Tx's statements, prepared on first use (Open does
	// not need the schema); stmtsMu serialises their preparation only, so
	// Tx never waits for it (see readyStmts).
	stmtsMu sync.Mutex
	stmts   atomic.Pointer[writeStmts]
	// readStmts are the hot reads' statements, by query (readStmt).
	readStmts sync.Map

	wakeMu sync.Mutex
	wake   chan struct{} // closed and replaced after a commit that inserted entries

	closed atomic.Bool
}

// SQLite's file header, the first 16 bytes of every database file.
var sqliteHeader = []byte("SQLite format 3\x00")

// Open opens the SQLite store at path, creating the file and its parent
// folder when missing. It does not create the schema: run Migrate (outboxd
// migrate) for that; CheckSchema says whether it is there. A file at path
// that is not an SQLite database fails with an error that says so.
func Open(ctx context.Context, path string, opts *Options) (*Store, error) {
	o := opts.withDefaults()
	if err := o.validate(); err != nil {
		return nil, err
	}
	if path == "" {
		return nil, errors.New("error opening SQLite store: empty path")
	}
	abs, err := filepath.Abs(path)
	if err != nil {
		return nil, fmt.Errorf("error opening SQLite store %s: %w", path, err)
	}
	if err := os.MkdirAll(filepath.Dir(abs), 0o755); err != nil {
		return nil, fmt.Errorf("error creating the folder of SQLite store %s: %w", path, err)
	}
	if err := checkFile(abs); err != nil {
		return nil, err
	}

	names, _ := tablesOf(o) // validated above
	s := &Store{path: abs, q: newQueries(names), wake: make(chan struct{}), observe: o.ObserveWriter}
	s.write, err = sql.Open(driverName, writeDSN(abs, o.BusyTimeout))
	if err != nil {
		return nil, fmt.Errorf("error opening SQLite store %s: %w", path, err)
	}
	s.write.SetMaxOpenConns(1)
	s.write.SetMaxIdleConns(1)
	s.write.SetConnMaxLifetime(0)
	s.write.SetConnMaxIdleTime(0)
	// The write connection first: it switches a new file to WAL mode.
	if err := s.openCheck(ctx, s.write); err != nil {
		_ = s.write.Close()
		return nil, err
	}
	s.read, err = sql.Open(driverName, readDSN(abs, o.BusyTimeout))
	if err != nil {
		_ = s.write.Close()
		return nil, fmt.Errorf("error opening SQLite store %s: %w", path, err)
	}
	s.read.SetMaxOpenConns(o.ReadConns)
	s.read.SetMaxIdleConns(o.ReadConns)
	if err := s.openCheck(ctx, s.read); err != nil {
		_ = s.write.Close()
		_ = s.read.Close()
		return nil, err
	}
	if s.ckpt, err = startCheckpointer(ctx, s.write, abs, o.BusyTimeout, o.CheckpointInterval, cmp.Or(o.walRestartFrames, walRestartFrames)); err != nil {
		_ = s.write.Close()
		_ = s.read.Close()
		return nil, err
	}
	return s, nil
}

// openCheck opens a connection of db (which runs the DSN's PRAGMAs) and
// reads the schema, so a file that is not a database fails here, and checks
// that the file is in WAL mode.
func (s *Store) openCheck(ctx context.Context, db *sql.DB) error {
	var mode string
	err := db.QueryRowContext(ctx, "PRAGMA journal_mode").Scan(&mode)
	if err == nil {
		var n int
		err = db.QueryRowContext(ctx, "SELECT count(*) FROM sqlite_master").Scan(&n)
	}
	switch {
	case err != nil && isNotADatabase(err):
		return notADatabase(s.path, "SQLite does not recognise it")
	case err != nil:
		return s.fail(fmt.Sprintf("opening SQLite store %s", s.path), err)
	case mode != "wal":
		return fmt.Errorf("error opening SQLite store %s: journal mode is %q, not WAL (WAL needs a local file system with shared memory)", s.path, mode)
	}
	return nil
}

// checkFile fails with a clear error when path exists, is not empty and
// does not start with SQLite's header. (SQLite takes an empty file for an
// empty database.)
func checkFile(path string) error {
	f, err := os.Open(path)
	if errors.Is(err, os.ErrNotExist) {
		return nil
	}
	if err != nil {
		return fmt.Errorf("error opening SQLite store %s: %w", path, err)
	}
	defer f.Close()
	info, err := f.Stat()
	if err != nil {
		return fmt.Errorf("error opening SQLite store %s: %w", path, err)
	}
	if info.IsDir() {
		return fmt.Errorf("error opening SQLite store %s: it is a folder; pass a file path (--store sqlite:PATH)", path)
	}
	if info.Size() == 0 {
		return nil
	}
	head := make([]byte, len(sqliteHeader))
	n, err := io.ReadFull(f, head)
	if err != nil && !errors.Is(err, io.ErrUnexpectedEOF) {
		return fmt.Errorf("error opening SQLite store %s: %w", path, err)
	}
	if bytes.Equal(head[:n], sqliteHeader) {
		return nil
	}
	if looksLikeBSON(f, head[:n], info.Size()) {
		return notADatabase(path, "it holds a BSON document, like the store file of the earlier lungo embedded engine")
	}
	return notADatabase(path, "it does not start with SQLite's header")
}

// looksLikeBSON reports a file that is one BSON document: its first four
// bytes are its size, little-endian, and its last byte is 0.
func looksLikeBSON(f *os.File, head []byte, size int64) bool {
	if len(head) < 5 || int64(binary.LittleEndian.Uint32(head)) != size {
		return false
	}
	last := make([]byte, 1)
	_, err := f.ReadAt(last, size-1)
	return err == nil && last[0] == 0
}

// ErrNotADatabase is wrapped by Open's error for a file that is not an
// SQLite database.
var ErrNotADatabase = errors.New("the file is not an SQLite database")

func notADatabase(path, why string) error {
	return fmt.Errorf("error opening SQLite store %s: %w (%s); "+
		"move it away (outboxd creates a new store there) or pass another path with --store sqlite:PATH", path, ErrNotADatabase, why)
}

// Kind returns "sqlite".
func (s *Store) Kind() string { return Kind }

// Path returns the absolute path of the store's file.
func (s *Store) Path() string { return s.path }

// DB returns the write pool (one connection, transactions begin with BEGIN
// IMMEDIATE). Callers that write their own rows in the same transaction as
// the writer's begin it here and pass it to Tx. Keep such transactions short:
// every writer of the file waits for them.
func (s *Store) DB() *sql.DB { return s.write }

// Ping reads the database's schema from the read pool; an error means the
// store cannot serve reads.
func (s *Store) Ping(ctx context.Context) error {
	var n int
	if err := s.read.QueryRowContext(ctx, "SELECT count(*) FROM sqlite_master").Scan(&n); err != nil {
		return s.fail("pinging SQLite store", err)
	}
	return nil
}

// Close closes both pools. Feeds of the store fail afterwards. Close is
// idempotent.
func (s *Store) Close(ctx context.Context) error {
	if s.closed.Swap(true) {
		return nil
	}
	s.notify() // waiting feeds wake up and see the store closed
	s.stmtsMu.Lock()
	if st := s.stmts.Swap(nil); st != nil {
		st.close()
	}
	s.stmtsMu.Unlock()
	s.closeReadStmts()
	return errors.Join(s.ckpt.close(), s.read.Close(), s.write.Close())
}

// notify wakes the feeds of this Store waiting in Next.
func (s *Store) notify() {
	s.wakeMu.Lock()
	close(s.wake)
	s.wake = make(chan struct{})
	s.wakeMu.Unlock()
}

// woken returns a channel closed at the next notify. Take it before reading,
// so a commit between the read and the wait is not missed.
func (s *Store) woken() <-chan struct{} {
	s.wakeMu.Lock()
	defer s.wakeMu.Unlock()
	return s.wake
}

// fail wraps err, an error of doing what, translating driver errors at the
// boundary: errors of a store that cannot serve now wrap
// store.ErrUnavailable; context errors stay context errors; others are
// wrapped as they are.
func (s *Store) fail(what string, err error) error {
	switch {
	case errors.Is(err, context.Canceled), errors.Is(err, context.DeadlineExceeded):
		return fmt.Errorf("error %s: %w", what, err)
	case s.closed.Load():
		return fmt.Errorf("error %s: %w: the store is closed: %w", what, store.ErrUnavailable, err)
	case isUnavailable(err), errors.Is(err, driver.ErrBadConn), errors.Is(err, sql.ErrConnDone):
		return fmt.Errorf("error %s: %w: %w", what, store.ErrUnavailable, err)
	}
	return fmt.Errorf("error %s: %w", what, err)
}
