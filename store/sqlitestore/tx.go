package sqlitestore

import (
	"cmp"
	"context"
	"database/sql"
	"errors"
	"fmt"
	"strings"
	"time"

	"github.com/outboxd/outboxd/outbox"
	"github.com/outboxd/outboxd/store"
)

// The statements of outbox.Tx, prepared once on the write pool and bound to
// each transaction (sql.Tx.StmtContext reuses the statement already prepared
// on the pool's one connection): the two lookups, then an INSERT of events
// and one of outbox entries for each of insertRows.
const (
	stmtLookupKeys = iota
	stmtKeyExists
	stmtKeyBetween
	stmtInsertEvents                             // + i: insertRows[i] rows
	stmtInsertEntries = stmtInsertEvents + rowsN // + i: insertRows[i] rows
	stmtCount         = stmtInsertEntries + rowsN
)

// insertRows are the row counts of the multi-row INSERTs, largest first: a
// batch is inserted in the fewest statements of these sizes (a group of 5
// events: 4 + 1). One statement per row costs database/sql's and the
// driver's round trip each time; 32 rows of 16 columns stay far below
// SQLite's 32,766 parameters.
var insertRows = [rowsN]int{32, 16, 8, 4, 2, 1}

// rowsN is len(insertRows).
const rowsN = 6

// The columns of the two INSERTs, and how many each row binds.
//
// Both are INSERT OR FAIL: a failing row ends the statement and keeps the
// rows before it, where SQLite's default (ABORT) undoes the statement's own
// rows. Undoing them needs a statement journal, which SQLite writes for every
// page a multi-row INSERT touches before it knows whether a row will fail
// (about 5% of ingest's CPU in a batch profile); the transaction is rolled
// back as a whole after any failure of either INSERT anyway (outbox.Tx), so
// nothing of the partial statement is ever committed.
const (
	insertEventHead = `INSERT OR FAIL INTO "{events}" (id, idempotency_key, source_key, device_key, type, occurred_at,
		payload, content_hash, created_at, synced_at, last_requeued_at, requeue_count, sync_failure, failure_category,
		traceparent, client) VALUES `
	insertEventArgs = 16
	insertEntryHead = `INSERT OR FAIL INTO "{outbox}" (event_id, stream, message, created_at, dispatched_at, traceparent, partition) VALUES `
	insertEntryArgs = 7
)

// nextInsert returns how many of left (≥ 1) rows the next INSERT carries:
// the largest of insertRows within left, and its index there.
func nextInsert(left int) (rows, i int) {
	for i, n := range insertRows {
		if n <= left {
			return n, i
		}
	}
	return 1, rowsN - 1
}

// valuesList returns rows groups of n placeholders: "(?, ?), (?, ?)".
func valuesList(rows, n int) string {
	row := "(" + strings.TrimSuffix(strings.Repeat("?, ", n), ", ") + ")"
	return strings.TrimSuffix(strings.Repeat(row+", ", rows), ", ")
}

// txQueries are the statements of outbox.Tx, with {events} and {outbox}
// for the tables' names (queries.tx has them with the names).
var txQueries = func() (q [stmtCount]string) {
	// Index events_idempotency_key, one probe per key of the list.
	q[stmtLookupKeys] = `SELECT idempotency_key, id, content_hash FROM "{events}"
		WHERE idempotency_key IN (SELECT value FROM json_each(?))`
	// Index events_idempotency_key.
	q[stmtKeyExists] = `SELECT 1 FROM "{events}" WHERE idempotency_key = ? AND id <> ?`
	// Index events_idempotency_key: one probe.
	q[stmtKeyBetween] = `SELECT EXISTS (SELECT 1 FROM "{events}" WHERE idempotency_key >= ? AND idempotency_key < ?)`
	for i, n := range insertRows {
		q[stmtInsertEvents+i] = insertEventHead + valuesList(n, insertEventArgs)
		q[stmtInsertEntries+i] = insertEntryHead + valuesList(n, insertEntryArgs)
	}
	return q
}()

// writeStmts are the prepared statements of outbox.Tx.
type writeStmts struct {
	list [stmtCount]*sql.Stmt
}

func (w *writeStmts) close() {
	for _, st := range w.list {
		if st != nil {
			_ = st.Close()
		}
	}
}

// prepared returns the statements of outbox.Tx, preparing them on first use.
// Call it outside a write transaction: preparing needs the write pool's one
// connection. When the tables are missing it returns CheckSchema's error.
func (s *Store) prepared(ctx context.Context) (*writeStmts, error) {
	if st := s.stmts.Load(); st != nil {
		return st, nil
	}
	s.stmtsMu.Lock()
	defer s.stmtsMu.Unlock()
	if st := s.stmts.Load(); st != nil {
		return st, nil
	}
	if s.closed.Load() {
		return nil, s.fail("preparing statements", errors.New("sql: database is closed"))
	}
	st := &writeStmts{}
	for i, q := range s.q.tx {
		p, err := s.write.PrepareContext(ctx, q)
		if err != nil {
			st.close()
			if schemaErr := s.CheckSchema(ctx); schemaErr != nil {
				return nil, schemaErr
			}
			return nil, s.fail("preparing statements", err)
		}
		st.list[i] = p
	}
	s.stmts.Store(st)
	return st, nil
}

// readyStmts returns the prepared statements when they exist, and nil
// otherwise. It neither prepares nor waits for a preparation: both need the
// write pool's one connection, which the caller's transaction holds.
func (s *Store) readyStmts() *writeStmts { return s.stmts.Load() }

// WriteTx runs fn in one write transaction (BEGIN IMMEDIATE on the write
// pool), committing when fn returns nil and rolling back otherwise; fn's
// error is returned as it is. The tx given to fn is valid only during fn,
// and fn must not call the Store's other writing methods (they would wait
// for the connection fn's transaction holds). After a commit that inserted
// outbox entries, the feeds opened from this Store wake up at once (feeds of
// other Stores and processes see the entries at their next poll). WriteTx
// does not run fn again: a lock another process holds for longer than
// Options.BusyTimeout fails it with an error wrapping store.ErrUnavailable,
// and a cancelled ctx with ctx's error.
func (s *Store) WriteTx(ctx context.Context, fn func(ctx context.Context, tx outbox.Tx) error) error {
	if store.RoleOf(ctx) == "" {
		ctx = store.WithRole(ctx, store.RoleIngest) // the writer of ingest is its only caller
	}
	return s.RunTx(ctx, func(ctx context.Context, _ *sql.Tx, tx outbox.Tx) error { return fn(ctx, tx) })
}

// RunTx runs fn in one write transaction of the store's, the one its own
// writes run in (WriteTx): BEGIN IMMEDIATE on the write pool, bounded by
// ctx and, for the write lock, Options.BusyTimeout; committed when fn
// returns nil, rolled back otherwise. fn gets the transaction, for the
// caller's own statements on its own tables in the same file, and the
// writer's view of it, for outbox.Writer.WriteInTx: the caller's rows and
// the events commit together or not at all, and the feeds of this Store
// wake at the commit. fn's error comes back as it is; the store's errors
// are wrapped as WriteTx's (a lock held too long wraps
// store.ErrUnavailable). RunTx does not run fn again; a caller that
// retries (after ErrUnavailable, or a key another writer stored meanwhile:
// outbox.ErrDuplicateKey) runs it again whole. Make that retry
// idempotent: write the event first and skip your own rows when it is a
// Duplicate (an earlier run committed both):
//
//	err := st.RunTx(ctx, func(ctx context.Context, tx *sql.Tx, otx outbox.Tx) error {
//		res, err := w.WriteInTx(ctx, otx, []outbox.Input{{IdempotencyKey: "order-42", …}})
//		if err != nil || res[0].Duplicate {
//			return err
//		}
//		_, err = tx.ExecContext(ctx, `INSERT INTO orders (id) VALUES (?)`, 42)
//		return err
//	})
//
// fn must not call the Store's other writing methods (they wait for the
// connection fn's transaction holds).
func (s *Store) RunTx(ctx context.Context, fn func(ctx context.Context, tx *sql.Tx, otx outbox.Tx) error) error {
	st, err := s.prepared(ctx)
	if err != nil {
		return err
	}
	inserted := false
	err = s.inWriteTx(ctx, "running write transaction", func(tx *sql.Tx) error {
		w := &txWriter{s: s, tx: tx, stmts: st}
		if err := fn(ctx, tx, w); err != nil {
			return err
		}
		inserted = w.entries > 0
		return nil
	})
	if err == nil && inserted {
		s.notify()
	}
	return err
}

// Tx returns the outbox.Tx of a transaction the caller runs, so the caller's
// own rows and the writer's (outbox.Writer.WriteInTx) commit or roll back
// together:
//
//	tx, err := s.DB().BeginTx(ctx, nil) // BEGIN IMMEDIATE
//	… the caller's own statements on tx …
//	results, err := writer.WriteInTx(ctx, s.Tx(tx), inputs)
//	… tx.Commit() or tx.Rollback()
//
// Begin tx on DB(), the write pool; a tx of another *sql.DB fails at its
// first use. While tx is open, do not call the Store's writing methods (they
// wait for the connection tx holds). After an error of InsertEvents or
// InsertEntries roll tx back (some rows of the call may be in it); after one
// wrapping outbox.ErrDuplicateKey, run the whole transaction again. The
// caller commits, so the store does not see the commit: feeds see the
// entries at their next poll rather than at once.
func (s *Store) Tx(tx *sql.Tx) outbox.Tx {
	return &txWriter{s: s, tx: tx, stmts: s.readyStmts()}
}

// inWriteTx runs fn in a transaction of the write pool (BEGIN IMMEDIATE),
// committing when fn returns nil. fn's error is returned as it is (wrap it
// in fn); errors of BEGIN and COMMIT are wrapped with what.
func (s *Store) inWriteTx(ctx context.Context, what string, fn func(tx *sql.Tx) error) error {
	began := time.Now()
	tx, err := s.write.BeginTx(ctx, nil)
	if err != nil {
		return s.fail(what, err)
	}
	if s.observe != nil {
		got := time.Now()
		defer func() { s.observe(cmp.Or(store.RoleOf(ctx), roleOther), got.Sub(began), time.Since(got)) }()
	}
	if err := fn(tx); err != nil {
		_ = tx.Rollback() // the error that matters is fn's
		return err
	}
	if err := tx.Commit(); err != nil {
		return s.fail(what, err)
	}
	return nil
}

// roleOther is the role Options.ObserveWriter gets for a context that
// store.WithRole did not label.
const roleOther = "other"

// txWriter is the outbox.Tx of one SQLite transaction.
type txWriter struct {
	s     *Store
	tx    *sql.Tx
	stmts *writeStmts // nil: prepare on the transaction (Store.Tx before first use)
	bound [stmtCount]*sql.Stmt
	// entries counts the outbox entries inserted, to wake feeds on commit.
	entries int
}

// stmt returns statement i bound to the transaction.
func (w *txWriter) stmt(ctx context.Context, i int) (*sql.Stmt, error) {
	if w.bound[i] != nil {
		return w.bound[i], nil
	}
	if w.stmts != nil {
		w.bound[i] = w.tx.StmtContext(ctx, w.stmts.list[i])
		return w.bound[i], nil
	}
	p, err := w.tx.PrepareContext(ctx, w.s.q.tx[i]) // closed with the transaction
	if err != nil {
		return nil, w.s.fail("preparing statement", err)
	}
	w.bound[i] = p
	return p, nil
}

// AnyKeyBetween reports whether an original is stored under a key k with
// from <= k < to (outbox.KeyRanger).
func (w *txWriter) AnyKeyBetween(ctx context.Context, from, to string) (bool, error) {
	st, err := w.stmt(ctx, stmtKeyBetween)
	if err != nil {
		return false, err
	}
	var found bool
	if err := st.QueryRowContext(ctx, from, to).Scan(&found); err != nil {
		return false, w.s.fail("looking up idempotency keys", err)
	}
	return found, nil
}

// LookupKeys returns the stored originals named by keys, by key.
func (w *txWriter) LookupKeys(ctx context.Context, keys []string) (map[string]outbox.KeyRecord, error) {
	out := make(map[string]outbox.KeyRecord, len(keys))
	if len(keys) == 0 {
		return out, nil
	}
	list, err := jsonArray(keys)
	if err != nil {
		return nil, fmt.Errorf("error looking up idempotency keys: %w", err)
	}
	st, err := w.stmt(ctx, stmtLookupKeys)
	if err != nil {
		return nil, err
	}
	rows, err := st.QueryContext(ctx, list)
	if err != nil {
		return nil, w.s.fail("looking up idempotency keys", err)
	}
	defer rows.Close()
	for rows.Next() {
		var key string
		var rec outbox.KeyRecord
		if err := rows.Scan(&key, &rec.ID, &rec.ContentHash); err != nil {
			return nil, w.s.fail("reading idempotency keys", err)
		}
		out[key] = rec
	}
	if err := rows.Err(); err != nil {
		return nil, w.s.fail("reading idempotency keys", err)
	}
	return out, nil
}

// InsertEvents inserts originals. A key already stored fails it with an
// error wrapping outbox.ErrDuplicateKey; the transaction must then be rolled
// back (the originals before the failing one are inserted).
func (w *txWriter) InsertEvents(ctx context.Context, events []outbox.Event) error {
	for len(events) > 0 {
		n, i := nextInsert(len(events))
		st, err := w.stmt(ctx, stmtInsertEvents+i)
		if err != nil {
			return err
		}
		args := make([]any, 0, n*insertEventArgs)
		for j := range n {
			ev := &events[j]
			payload := string(ev.Payload)
			if payload == "" {
				payload = "{}"
			}
			failure, category, err := encodeFailure(ev.SyncFailure)
			if err != nil {
				return fmt.Errorf("error inserting original %s: %w", ev.ID, err)
			}
			args = append(args, ev.ID, ev.IdempotencyKey, ev.SourceKey, ev.DeviceKey, ev.Type,
				millis(ev.OccurredAt), payload, ev.ContentHash, millis(ev.CreatedAt),
				nullMillis(ev.SyncedAt), nullMillis(ev.LastRequeuedAt), ev.RequeueCount, failure, category,
				nullText(ev.TraceParent), nullText(ev.Client))
		}
		if _, err := st.ExecContext(ctx, args...); err != nil {
			return w.insertFailed(ctx, events[:n], err)
		}
		events = events[n:]
	}
	return nil
}

// insertFailed explains the failure of an INSERT of events: a key another
// transaction stored (an error wrapping outbox.ErrDuplicateKey), or else the
// store's error.
func (w *txWriter) insertFailed(ctx context.Context, events []outbox.Event, err error) error {
	if isUniqueViolation(err) {
		// The id or a key is taken. Which one is read from the table,
		// never from the message; a constraint failure ends only the
		// statement, so the transaction can still read. The statement's
		// rows before the failing one stay (INSERT OR FAIL), so a key
		// counts as taken only by an original of another id.
		for _, ev := range events {
			if dup, lookErr := w.keyExists(ctx, ev.IdempotencyKey, ev.ID); lookErr == nil && dup {
				return fmt.Errorf("error inserting original with idempotency key %q: %w", ev.IdempotencyKey, outbox.ErrDuplicateKey)
			}
		}
		// No key is taken, so an event id is (outbox.NewEventID: two ids
		// of one slot collide with a chance of 2⁻⁴⁸). Running the
		// transaction again draws new ids, as for MongoDB's duplicate _id.
		return fmt.Errorf("error inserting %d originals from %s, an event id is taken: %w", len(events), events[0].ID, outbox.ErrDuplicateKey)
	}
	if len(events) == 1 {
		return w.s.fail(fmt.Sprintf("inserting original %s", events[0].ID), err)
	}
	return w.s.fail(fmt.Sprintf("inserting %d originals from %s", len(events), events[0].ID), err)
}

// keyExists reports whether an original with idempotency key and another
// id than id is stored.
func (w *txWriter) keyExists(ctx context.Context, key, id string) (bool, error) {
	st, err := w.stmt(ctx, stmtKeyExists)
	if err != nil {
		return false, err
	}
	var one int
	err = st.QueryRowContext(ctx, key, id).Scan(&one)
	if errors.Is(err, sql.ErrNoRows) {
		return false, nil
	}
	return err == nil, err
}

// InsertEntries inserts outbox entries and sets their IDs (the seq, see
// entryID) in entries.
func (w *txWriter) InsertEntries(ctx context.Context, entries []outbox.Entry) error {
	for len(entries) > 0 {
		n, i := nextInsert(len(entries))
		chunk := entries[:n]
		if err := w.insertEntries(ctx, stmtInsertEntries+i, chunk); err != nil {
			return w.s.fail(fmt.Sprintf("inserting the outbox entry of %s", chunk[0].EventID), err)
		}
		w.entries += n
		entries = entries[n:]
	}
	return nil
}

// insertEntries runs statement i, an INSERT of len(chunk) entries, and sets
// their IDs. The seqs of the rows are the last rowid it inserted and the
// ones just below: seq is an AUTOINCREMENT key, so each row gets one more
// than the largest seq ever used, the rows of one INSERT … VALUES go in in
// VALUES order, and no other connection inserts meanwhile (the transaction
// holds the write lock). Reading them back with RETURNING cost a temporary
// table, a statement journal and a result set per statement.
func (w *txWriter) insertEntries(ctx context.Context, i int, chunk []outbox.Entry) error {
	st, err := w.stmt(ctx, i)
	if err != nil {
		return err
	}
	args := make([]any, 0, len(chunk)*insertEntryArgs)
	for _, e := range chunk {
		args = append(args, e.EventID, e.Stream, e.Message, millis(e.CreatedAt), nullMillis(e.DispatchedAt), nullText(e.TraceParent), e.Partition)
	}
	res, err := st.ExecContext(ctx, args...)
	if err != nil {
		return err
	}
	last, err := res.LastInsertId()
	if err != nil {
		return err
	}
	first := last - int64(len(chunk)) + 1
	for j := range chunk {
		chunk[j].ID = entryID(first + int64(j))
	}
	return nil
}
