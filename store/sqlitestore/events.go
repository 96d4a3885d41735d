package sqlitestore

import (
	"cmp"
	"context"
	"database/sql"
	"encoding/json"
	"errors"
	"fmt"
	"strings"
	"time"

	"github.com/outboxd/outboxd/outbox"
	"github.com/outboxd/outboxd/store"
)

// idChunk bounds the ids of one statement (LoadEvents, MarkSynced,
// MarkDispatched), so a long list does not hold a lock or a result set for
// long.
const idChunk = 500

// eventColumns are the columns decodeEvent reads, in its order.
const eventColumns = `id, idempotency_key, source_key, device_key, type, occurred_at, payload,
	content_hash, created_at, synced_at, last_requeued_at, requeue_count, sync_failure, traceparent, client`

// eventColumnsNoPayload are eventColumns with the payload left out (NULL).
const eventColumnsNoPayload = `id, idempotency_key, source_key, device_key, type, occurred_at, NULL,
	content_hash, created_at, synced_at, last_requeued_at, requeue_count, sync_failure, traceparent, client`

// rawEvent holds a row of eventColumns as the driver gave it, so that a row
// with a value of the wrong kind is reported as corrupt (with its id) rather
// than failing the whole read.
type rawEvent [15]any

func (r *rawEvent) dest() []any {
	d := make([]any, len(r))
	for i := range r {
		d[i] = &r[i]
	}
	return d
}

// decode returns the original of the row, or an error wrapping
// store.ErrCorrupt. A NULL payload (eventColumnsNoPayload) gives a nil
// Payload.
func (r *rawEvent) decode() (*outbox.Event, error) {
	d := decoder{}
	ev := &outbox.Event{
		ID:             d.text(r[0], "id"),
		IdempotencyKey: d.text(r[1], "idempotency_key"),
		SourceKey:      d.text(r[2], "source_key"),
		DeviceKey:      d.text(r[3], "device_key"),
		Type:           d.text(r[4], "type"),
		OccurredAt:     fromMillis(d.integer(r[5], "occurred_at")),
		ContentHash:    d.text(r[7], "content_hash"),
		CreatedAt:      fromMillis(d.integer(r[8], "created_at")),
		SyncedAt:       d.nullTime(r[9], "synced_at"),
		LastRequeuedAt: d.nullTime(r[10], "last_requeued_at"),
		RequeueCount:   d.integer(r[11], "requeue_count"),
	}
	if r[6] != nil {
		p := d.text(r[6], "payload")
		if d.err == nil && !json.Valid([]byte(p)) {
			d.err = errors.New("payload is not JSON")
		}
		ev.Payload = json.RawMessage(p)
	}
	if r[12] != nil {
		var f outbox.SyncFailure
		if err := json.Unmarshal([]byte(d.text(r[12], "sync_failure")), &f); err != nil && d.err == nil {
			d.err = fmt.Errorf("sync_failure: %w", err)
		}
		f.At = f.At.UTC()
		ev.SyncFailure = &f
	}
	if r[13] != nil {
		ev.TraceParent = d.text(r[13], "traceparent")
	}
	if r[14] != nil {
		ev.Client = d.text(r[14], "client")
	}
	if d.err != nil {
		return nil, fmt.Errorf("error decoding original %s: %w: %w", ev.ID, store.ErrCorrupt, d.err)
	}
	return ev, nil
}

// decoder reads driver values, keeping the first error.
type decoder struct{ err error }

func (d *decoder) text(v any, col string) string {
	switch x := v.(type) {
	case string:
		return x
	case []byte:
		return string(x)
	}
	d.fail(col, v)
	return ""
}

func (d *decoder) integer(v any, col string) int64 {
	if x, ok := v.(int64); ok {
		return x
	}
	d.fail(col, v)
	return 0
}

func (d *decoder) nullTime(v any, col string) *time.Time {
	if v == nil {
		return nil
	}
	t := fromMillis(d.integer(v, col))
	return &t
}

func (d *decoder) fail(col string, v any) {
	if d.err == nil {
		d.err = fmt.Errorf("column %s holds %T", col, v)
	}
}

// encodeFailure returns the sync_failure JSON and failure_category of f
// (NULLs for nil), with f.At in UTC milliseconds.
func encodeFailure(f *outbox.SyncFailure) (sql.NullString, sql.NullString, error) {
	if f == nil {
		return sql.NullString{}, sql.NullString{}, nil
	}
	c := *f
	c.At = c.At.UTC().Truncate(time.Millisecond)
	b, err := json.Marshal(c)
	if err != nil {
		return sql.NullString{}, sql.NullString{}, fmt.Errorf("error encoding sync failure: %w", err)
	}
	return sql.NullString{String: string(b), Valid: true}, sql.NullString{String: c.Category, Valid: true}, nil
}

// LoadEvents returns the originals with the given ids, by id, reading at
// most idChunk ids per statement (index events_id). A stored original that
// cannot be decoded is present with Loaded.Err wrapping store.ErrCorrupt.
// It ignores the read-after positions ctx may carry (store.WithReadAfter):
// every read of the file sees every committed write.
func (s *Store) LoadEvents(ctx context.Context, ids []string) (map[string]store.Loaded, error) {
	out := make(map[string]store.Loaded, len(ids))
	for _, chunk := range chunks(ids, idChunk) {
		list, err := jsonArray(chunk)
		if err != nil {
			return nil, fmt.Errorf("error loading originals: %w", err)
		}
		if err := s.loadChunk(ctx, list, out); err != nil {
			return nil, err
		}
	}
	return out, nil
}

// qLoadEvents reads the originals of a JSON array of ids. Index events_id,
// one probe per id.
const qLoadEvents = `SELECT ` + eventColumns + ` FROM "{events}" WHERE id IN (SELECT value FROM json_each(?))`

func (s *Store) loadChunk(ctx context.Context, list string, out map[string]store.Loaded) error {
	st, err := s.readStmt(ctx, s.q.loadEvents)
	if err != nil {
		return s.fail("loading originals", err)
	}
	rows, err := st.QueryContext(ctx, list)
	if err != nil {
		return s.fail("loading originals", err)
	}
	if err := scanEvents(rows, out); err != nil {
		return s.fail("loading originals", err)
	}
	return nil
}

// scanEvents decodes each row of rows (eventColumns or
// eventColumnsNoPayload) on its own into out, by id, and closes rows: a row
// that does not decode is an out[id].Err, not a failure of the read.
func scanEvents(rows *sql.Rows, out map[string]store.Loaded) error {
	defer rows.Close()
	for rows.Next() {
		var r rawEvent
		if err := rows.Scan(r.dest()...); err != nil {
			return err
		}
		id, ok := r[0].(string)
		if !ok {
			continue // not an id anyone asked for
		}
		ev, err := r.decode()
		out[id] = store.Loaded{Event: ev, Err: err}
	}
	return rows.Err()
}

// qEventByKey reads the original of an idempotency key. Index
// events_idempotency_key.
const qEventByKey = `SELECT ` + eventColumns + ` FROM "{events}" WHERE idempotency_key = ?`

// EventByKey returns the original stored under idempotency key (index
// events_idempotency_key), or an error wrapping store.ErrNotFound.
func (s *Store) EventByKey(ctx context.Context, key string) (*outbox.Event, error) {
	var r rawEvent
	err := s.read.QueryRowContext(ctx, s.q.eventByKey, key).Scan(r.dest()...)
	if errors.Is(err, sql.ErrNoRows) {
		return nil, fmt.Errorf("error reading original with idempotency key %q: %w", key, store.ErrNotFound)
	}
	if err != nil {
		return nil, s.fail(fmt.Sprintf("reading original with idempotency key %q", key), err)
	}
	return r.decode()
}

// qMarkSynced marks a JSON array of ids synced. Index events_id, one probe
// per id.
const qMarkSynced = `UPDATE "{events}" SET synced_at = ?, sync_failure = NULL, failure_category = NULL
	WHERE id IN (SELECT value FROM json_each(?)) AND synced_at IS NULL`

// MarkSynced sets synced_at = at and clears sync_failure on those of ids
// whose synced_at is NULL, in one transaction, and returns how many it
// changed.
func (s *Store) MarkSynced(ctx context.Context, ids []string, at time.Time) (int64, error) {
	return s.updateByIDs(ctx, "marking originals synced", s.q.markSynced, ids, millis(at))
}

// updateByIDs runs q, an UPDATE whose last parameter is a JSON array of ids
// (json_each) after args, over ids in chunks of idChunk in one write
// transaction, and returns how many rows it changed.
func (s *Store) updateByIDs(ctx context.Context, what, q string, ids []string, args ...any) (int64, error) {
	if len(ids) == 0 {
		return 0, nil
	}
	var n int64
	err := s.inWriteTx(ctx, what, func(tx *sql.Tx) error {
		for _, chunk := range chunks(ids, idChunk) {
			list, err := jsonArray(chunk)
			if err != nil {
				return fmt.Errorf("error %s: %w", what, err)
			}
			res, err := tx.ExecContext(ctx, q, append(args[:len(args):len(args)], list)...)
			if err != nil {
				return s.fail(what, err)
			}
			c, err := res.RowsAffected()
			if err != nil {
				return s.fail(what, err)
			}
			n += c
		}
		return nil
	})
	if err != nil {
		return 0, err
	}
	return n, nil
}

// qPark parks an original. Index events_id.
const qPark = `UPDATE "{events}" SET sync_failure = ?, failure_category = ? WHERE id = ? AND synced_at IS NULL`

// Park sets sync_failure on the original id unless it is synced, and reports
// whether it did (an original parked before is parked again, with f).
//
// Single-statement writes like this one run in autocommit on the write
// pool: a writing statement takes SQLite's write lock when it starts, so it
// cannot fail to upgrade a read lock the way a deferred transaction can.
func (s *Store) Park(ctx context.Context, id string, f outbox.SyncFailure) (bool, error) {
	failure, category, err := encodeFailure(&f)
	if err != nil {
		return false, fmt.Errorf("error parking original %s: %w", id, err)
	}
	res, err := s.write.ExecContext(ctx, s.q.park, failure, category, id)
	if err != nil {
		return false, s.fail(fmt.Sprintf("parking original %s", id), err)
	}
	n, err := res.RowsAffected()
	if err != nil {
		return false, s.fail(fmt.Sprintf("parking original %s", id), err)
	}
	return n > 0, nil
}

// qCandidates reads the reconciler's candidates. Index events_pending: a
// range on created_at in index order, last_requeued_at filtered from the
// index.
const qCandidates = `SELECT id FROM "{events}"
	WHERE synced_at IS NULL AND sync_failure IS NULL AND created_at < ?
	  AND (last_requeued_at IS NULL OR last_requeued_at < ?)
	ORDER BY created_at LIMIT ?`

// Candidates returns the ids of the reconciler's candidates, oldest
// (created_at) first, at most q.Limit.
func (s *Store) Candidates(ctx context.Context, q store.CandidateQuery) ([]string, error) {
	if q.Limit <= 0 {
		return nil, nil
	}
	rows, err := s.read.QueryContext(ctx, s.q.candidates, millis(q.CreatedBefore), millis(q.ClaimedBefore), q.Limit)
	if err != nil {
		return nil, s.fail("reading reconciler candidates", err)
	}
	defer rows.Close()
	var ids []string
	for rows.Next() {
		var id string
		if err := rows.Scan(&id); err != nil {
			return nil, s.fail("reading reconciler candidates", err)
		}
		ids = append(ids, id)
	}
	if err := rows.Err(); err != nil {
		return nil, s.fail("reading reconciler candidates", err)
	}
	return ids, nil
}

// Claim's statements, over a JSON array of ids. Index events_id, one probe
// per id.
const (
	qClaimRead = `SELECT ` + eventColumnsNoPayload + ` FROM "{events}"
		WHERE id IN (SELECT value FROM json_each(?)) AND ` + qCandidate
	qClaim = `UPDATE "{events}" SET last_requeued_at = ?, requeue_count = requeue_count + 1
		WHERE id IN (SELECT value FROM json_each(?)) AND ` + qCandidate
	// qCandidate is a claim's condition: pending, never claimed or claimed
	// before the parameter.
	qCandidate = `synced_at IS NULL AND sync_failure IS NULL
		AND (last_requeued_at IS NULL OR last_requeued_at < ?)`
)

// Claim stamps last_requeued_at = at and increments requeue_count on those
// of ids that are still candidates, in one write transaction (the read of
// the before-images and the update see the same rows: SQLite has one
// writer), and returns their originals as they were before, without
// payloads, in the order of ids. A row that does not decode is left
// unclaimed in Claimed.Unreadable.
func (s *Store) Claim(ctx context.Context, ids []string, at, claimedBefore time.Time) (store.Claimed, error) {
	const what = "claiming reconciler candidates"
	var out store.Claimed
	if len(ids) == 0 {
		return out, nil
	}
	list, err := jsonArray(ids)
	if err != nil {
		return out, fmt.Errorf("error %s: %w", what, err)
	}
	err = s.inWriteTx(ctx, what, func(tx *sql.Tx) error {
		rows, err := tx.QueryContext(ctx, s.q.claimRead, list, millis(claimedBefore))
		if err != nil {
			return s.fail(what, err)
		}
		read := make(map[string]store.Loaded, len(ids))
		if err := scanEvents(rows, read); err != nil {
			return s.fail(what, err)
		}
		out = store.ClaimedOf(ids, read)
		if len(out.Events) == 0 {
			return nil
		}
		good := make([]string, len(out.Events))
		for i, ev := range out.Events {
			good[i] = ev.ID
		}
		if len(out.Unreadable) > 0 {
			if list, err = jsonArray(good); err != nil {
				return fmt.Errorf("error %s: %w", what, err)
			}
		}
		res, err := tx.ExecContext(ctx, s.q.claim, millis(at), list, millis(claimedBefore))
		if err != nil {
			return s.fail(what, err)
		}
		if n, err := res.RowsAffected(); err != nil || n != int64(len(good)) {
			// One writer: the rows just read are the rows updated.
			return s.fail(what, cmp.Or(err, fmt.Errorf("claimed %d of the %d candidates read", n, len(good))))
		}
		return nil
	})
	if err != nil {
		return store.Claimed{}, err
	}
	return out, nil
}

// qRollbackClaim undoes a claim. Index events_id.
const qRollbackClaim = `UPDATE "{events}" SET last_requeued_at = ?, requeue_count = max(requeue_count - 1, 0)
	WHERE id = ? AND last_requeued_at = ?`

// RollbackClaims undoes the claims stamped at on claimed, in one write
// transaction: each original whose last_requeued_at still equals at (to
// the millisecond) gets back its before-image's (NULL: none) and one
// requeue fewer. It returns how many it restored.
func (s *Store) RollbackClaims(ctx context.Context, at time.Time, claimed []*outbox.Event) (int, error) {
	const what = "rolling back claims"
	if len(claimed) == 0 {
		return 0, nil
	}
	var restored int
	err := s.inWriteTx(ctx, what, func(tx *sql.Tx) error {
		stmt, err := tx.PrepareContext(ctx, s.q.rollbackClaim)
		if err != nil {
			return s.fail(what, err)
		}
		defer stmt.Close()
		for _, ev := range claimed {
			res, err := stmt.ExecContext(ctx, nullMillis(ev.LastRequeuedAt), ev.ID, millis(at))
			if err != nil {
				return s.fail(fmt.Sprintf("rolling back the claim of original %s", ev.ID), err)
			}
			n, err := res.RowsAffected()
			if err != nil {
				return s.fail(what, err)
			}
			restored += int(n)
		}
		return nil
	})
	if err != nil {
		return 0, err
	}
	return restored, nil
}

// The queries of Counts; see Counts for the index each one uses.
const (
	qCountTotal   = `SELECT coalesce(max(rowid), 0) - (SELECT n FROM events_removed WHERE id = 1) FROM "{events}"`
	qCountPending = `SELECT count(*), min(created_at) FROM "{events}"
		WHERE synced_at IS NULL AND sync_failure IS NULL`
	qCountFailed = `SELECT coalesce(failure_category, ''), count(*) FROM "{events}"
		WHERE sync_failure IS NOT NULL AND synced_at IS NULL GROUP BY failure_category`
	qCountUndispatched = `SELECT count(*) FROM "{outbox}" WHERE dispatched_at IS NULL`
)

// Counts returns the status figures, exact, read in one snapshot. No query
// reads every original:
//   - Total is max(rowid) of events minus the originals DeleteSynced
//     removed (table events_removed): originals are appended, so rowids run
//     from 1 without gaps, and DeleteSynced keeps the newest, so max(rowid)
//     never goes down.
//   - Pending and OldestPending come from index events_pending (the backlog
//     only), Failed and FailedByCategory from events_failed (parked only).
//   - Undispatched comes from index outbox_undispatched.
//   - Synced is Total-Pending-Failed.
func (s *Store) Counts(ctx context.Context) (store.Counts, error) {
	c := store.Counts{FailedByCategory: map[string]int64{}}
	tx, err := s.read.BeginTx(ctx, &sql.TxOptions{ReadOnly: true})
	if err != nil {
		return c, s.fail("reading counts", err)
	}
	defer func() { _ = tx.Rollback() }() // read only: nothing to commit
	var oldest sql.NullInt64
	err = tx.QueryRowContext(ctx, s.q.countTotal).Scan(&c.Total)
	if err == nil {
		err = tx.QueryRowContext(ctx, s.q.countPending).Scan(&c.Pending, &oldest)
	}
	if err == nil {
		err = tx.QueryRowContext(ctx, s.q.countUndispatched).Scan(&c.Undispatched)
	}
	if err != nil {
		return c, s.fail("reading counts", err)
	}
	rows, err := tx.QueryContext(ctx, s.q.countFailed)
	if err != nil {
		return c, s.fail("reading counts", err)
	}
	defer rows.Close()
	for rows.Next() {
		var cat string
		var n int64
		if err := rows.Scan(&cat, &n); err != nil {
			return c, s.fail("reading counts", err)
		}
		c.FailedByCategory[cat] += n
		c.Failed += n
	}
	if err := rows.Err(); err != nil {
		return c, s.fail("reading counts", err)
	}
	c.Synced = c.Total - c.Pending - c.Failed
	c.OldestPending = fromNullMillis(oldest)
	c.ReadAt = time.Now().UTC()
	return c, nil
}

// DeleteSynced's statements: the oldest synced originals created before a
// time, from index events_created, except the newest original (so that
// max(rowid) stays, see Counts) and those with an undispatched outbox
// entry (index outbox_event), narrowed by the scope's conditions where
// scopeMark stands (scopedDeleteSynced); then the count of removed
// originals.
const (
	qDeleteSynced = `DELETE FROM "{events}" WHERE rowid IN (
		SELECT e.rowid FROM "{events}" e
		WHERE e.created_at < ? AND e.synced_at IS NOT NULL
			AND e.rowid < (SELECT max(rowid) FROM "{events}")
			AND NOT EXISTS (SELECT 1 FROM "{outbox}" o WHERE o.event_id = e.id AND o.dispatched_at IS NULL)` + scopeMark + `
		ORDER BY e.created_at LIMIT ?)`
	qCountRemoved = `UPDATE events_removed SET n = n + ? WHERE id = 1`
	// scopeMark is where scopedDeleteSynced puts a scope's conditions.
	scopeMark = ` /*scope*/`
)

// scopedDeleteSynced returns query (q.deleteSynced) narrowed to scope, and
// its arguments: before, the scope's values, limit. The scope's types and
// sources are filtered on the rows events_created reads (no index has
// them): a scope that leaves out many old originals makes each call read
// past them.
func scopedDeleteSynced(query string, before time.Time, scope store.SyncedScope, limit int) (string, []any) {
	args := []any{millis(before)}
	var conds strings.Builder
	eq := func(col, v string) {
		if v != "" {
			// Unary + keeps the source's equality off index events_device:
			// the oldest first, from events_created, stops at the limit
			// instead of sorting all of the source's originals.
			conds.WriteString(" AND +e." + col + " = ?")
			args = append(args, v)
		}
	}
	notIn := func(col string, vs []string) {
		if len(vs) == 0 {
			return
		}
		conds.WriteString(" AND e." + col + " NOT IN (" + strings.TrimSuffix(strings.Repeat("?,", len(vs)), ",") + ")")
		for _, v := range vs {
			args = append(args, v)
		}
	}
	eq("type", scope.Type)
	eq("source_key", scope.Source)
	notIn("type", scope.ExceptTypes)
	notIn("source_key", scope.ExceptSources)
	return strings.Replace(query, scopeMark, conds.String(), 1), append(args, limit)
}

// DeleteSynced removes at most limit synced originals created before
// before that scope selects, in one write transaction, with their count in
// events_removed.
func (s *Store) DeleteSynced(ctx context.Context, before time.Time, scope store.SyncedScope, limit int) (int64, error) {
	if limit < 1 {
		return 0, fmt.Errorf("error deleting synced originals: limit must be positive (got %d)", limit)
	}
	query, args := scopedDeleteSynced(s.q.deleteSynced, before, scope, limit)
	var n int64
	err := s.inWriteTx(ctx, "deleting synced originals", func(tx *sql.Tx) error {
		res, err := tx.ExecContext(ctx, query, args...)
		if err != nil {
			return s.fail("deleting synced originals", err)
		}
		if n, err = res.RowsAffected(); err != nil {
			return s.fail("deleting synced originals", err)
		}
		if n > 0 {
			if _, err := tx.ExecContext(ctx, qCountRemoved, n); err != nil {
				return s.fail("counting deleted originals", err)
			}
		}
		return nil
	})
	if err != nil {
		return 0, err
	}
	return n, nil
}
