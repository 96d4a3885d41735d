package sqlitestore

import (
	"context"
	"database/sql"
	"errors"
	"fmt"

	"github.com/outboxd/outboxd/outbox"
)

// The statements of outbox.Tx, prepared once on the write pool and bound to
// each transaction (sql.Tx.StmtContext reuses the statement already prepared
// on the pool's one connection).
const (
	stmtLookupKeys = iota
	stmtInsertEvent
	stmtKeyExists
	stmtInsertEntry
	stmtCount
)

var txQueries = [stmtCount]string{
	// Index events_idempotency_key, one probe per key of the list.
	stmtLookupKeys: `SELECT idempotency_key, id, content_hash FROM events
		WHERE idempotency_key IN (SELECT value FROM json_each(?))`,
	stmtInsertEvent: `INSERT INTO events (id, idempotency_key, source_key, device_key, type, occurred_at,
		payload, content_hash, created_at, synced_at, last_requeued_at, requeue_count, sync_failure, failure_category)
		VALUES (?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?)`,
	// Index events_idempotency_key.
	stmtKeyExists: `SELECT 1 FROM events WHERE idempotency_key = ?`,
	stmtInsertEntry: `INSERT INTO outbox (event_id, stream, message, created_at, dispatched_at)
		VALUES (?, ?, ?, ?, ?)`,
}

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
	for i, q := range txQueries {
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
	st, err := s.prepared(ctx)
	if err != nil {
		return err
	}
	inserted := false
	err = s.inWriteTx(ctx, "running write transaction", func(tx *sql.Tx) error {
		w := &txWriter{s: s, tx: tx, stmts: st}
		if err := fn(ctx, w); err != nil {
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
// wait for the connection tx holds). An InsertEvents error wrapping
// outbox.ErrDuplicateKey means: roll back and run the whole transaction
// again. The caller commits, so the store does not see the commit: feeds see
// the entries at their next poll rather than at once.
func (s *Store) Tx(tx *sql.Tx) outbox.Tx {
	return &txWriter{s: s, tx: tx, stmts: s.readyStmts()}
}

// inWriteTx runs fn in a transaction of the write pool (BEGIN IMMEDIATE),
// committing when fn returns nil. fn's error is returned as it is (wrap it
// in fn); errors of BEGIN and COMMIT are wrapped with what.
func (s *Store) inWriteTx(ctx context.Context, what string, fn func(tx *sql.Tx) error) error {
	tx, err := s.write.BeginTx(ctx, nil)
	if err != nil {
		return s.fail(what, err)
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
	p, err := w.tx.PrepareContext(ctx, txQueries[i]) // closed with the transaction
	if err != nil {
		return nil, w.s.fail("preparing statement", err)
	}
	w.bound[i] = p
	return p, nil
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
	if len(events) == 0 {
		return nil
	}
	st, err := w.stmt(ctx, stmtInsertEvent)
	if err != nil {
		return err
	}
	for i := range events {
		ev := &events[i]
		payload := string(ev.Payload)
		if payload == "" {
			payload = "{}"
		}
		failure, category, err := encodeFailure(ev.SyncFailure)
		if err != nil {
			return fmt.Errorf("error inserting original %s: %w", ev.ID, err)
		}
		_, err = st.ExecContext(ctx, ev.ID, ev.IdempotencyKey, ev.SourceKey, ev.DeviceKey, ev.Type,
			millis(ev.OccurredAt), payload, ev.ContentHash, millis(ev.CreatedAt),
			nullMillis(ev.SyncedAt), nullMillis(ev.LastRequeuedAt), ev.RequeueCount, failure, category)
		if err == nil {
			continue
		}
		if isUniqueViolation(err) {
			// The id or the key is taken. Which one is read from the table,
			// never from the message; a constraint failure ends only the
			// statement, so the transaction can still read.
			if dup, lookErr := w.keyExists(ctx, ev.IdempotencyKey); lookErr == nil && dup {
				return fmt.Errorf("error inserting original with idempotency key %q: %w", ev.IdempotencyKey, outbox.ErrDuplicateKey)
			}
		}
		return w.s.fail(fmt.Sprintf("inserting original %s", ev.ID), err)
	}
	return nil
}

// keyExists reports whether an original with idempotency key is stored.
func (w *txWriter) keyExists(ctx context.Context, key string) (bool, error) {
	st, err := w.stmt(ctx, stmtKeyExists)
	if err != nil {
		return false, err
	}
	var one int
	err = st.QueryRowContext(ctx, key).Scan(&one)
	if errors.Is(err, sql.ErrNoRows) {
		return false, nil
	}
	return err == nil, err
}

// InsertEntries inserts outbox entries and sets their IDs (the seq, see
// entryID) in entries.
func (w *txWriter) InsertEntries(ctx context.Context, entries []outbox.Entry) error {
	if len(entries) == 0 {
		return nil
	}
	st, err := w.stmt(ctx, stmtInsertEntry)
	if err != nil {
		return err
	}
	for i := range entries {
		e := &entries[i]
		res, err := st.ExecContext(ctx, e.EventID, e.Stream, e.Message, millis(e.CreatedAt), nullMillis(e.DispatchedAt))
		if err != nil {
			return w.s.fail(fmt.Sprintf("inserting outbox entry of %s", e.EventID), err)
		}
		seq, err := res.LastInsertId()
		if err != nil {
			return w.s.fail(fmt.Sprintf("inserting outbox entry of %s", e.EventID), err)
		}
		e.ID = entryID(seq)
		w.entries++
	}
	return nil
}
