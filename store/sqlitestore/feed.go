package sqlitestore

import (
	"context"
	"database/sql"
	"errors"
	"fmt"
	"sync"
	"time"

	"github.com/outboxd/outboxd/outbox"
	"github.com/outboxd/outboxd/store"
)

// entryColumns are the columns scanEntries reads, in its order.
const entryColumns = `seq, event_id, stream, message, created_at, dispatched_at, traceparent, partition`

// deleteChunk bounds the entries DeleteDispatched removes per transaction,
// so retention never holds the write lock for long.
const deleteChunk = 5000

// qLastSeq reads the highest seq AUTOINCREMENT ever assigned (kept in
// sqlite_sequence, a table of one row per AUTOINCREMENT table), even when
// those entries were deleted since.
const qLastSeq = `SELECT coalesce((SELECT seq FROM sqlite_sequence WHERE name = '{outbox}'), 0)`

// OpenFeed opens the outbox feed of stream after from: the entries whose seq
// is greater than from's, in seq order. from == nil (or empty) starts from
// now: after the highest seq ever assigned. A from that is not a decimal seq,
// is below the stream's floor (entries after it were removed by
// DeleteDispatched) or above the highest seq ever assigned (it comes from
// another file) fails with an error wrapping store.ErrPositionLost.
//
// Seq order is commit order: SQLite lets one transaction write at a time,
// every transaction takes the write lock before its first insert, and
// AUTOINCREMENT numbers each insert above every number assigned before, so a
// transaction that commits later has only higher seqs. A feed that has read
// seq N never finds a smaller seq committed afterwards.
func (s *Store) OpenFeed(ctx context.Context, stream string, from store.Position, opts store.FeedOptions) (store.Feed, error) {
	if opts.PollInterval < 0 {
		return nil, fmt.Errorf("invalid FeedOptions.PollInterval %s: must not be negative", opts.PollInterval)
	}
	if opts.Gather < 0 {
		return nil, fmt.Errorf("invalid FeedOptions.Gather %s: must not be negative", opts.Gather)
	}
	f := &feed{s: s, stream: stream, part: opts.Partition, poll: opts.PollInterval, gather: opts.Gather, idle: true, closed: make(chan struct{})}
	if f.poll == 0 {
		f.poll = PollIntervalDefault
	}
	if len(from) == 0 {
		err := s.read.QueryRowContext(ctx, s.q.lastSeq).Scan(&f.pos)
		if err != nil {
			return nil, s.fail(fmt.Sprintf("opening feed of stream %s", stream), err)
		}
		return f, nil
	}
	pos, err := parsePosition(from)
	if err != nil {
		return nil, fmt.Errorf("error opening feed of stream %s: %w", stream, err)
	}
	var floor, last int64
	err = s.read.QueryRowContext(ctx, s.q.floorAndLastSeq, stream).Scan(&floor, &last)
	if err != nil {
		return nil, s.fail(fmt.Sprintf("opening feed of stream %s", stream), err)
	}
	if pos < floor {
		return nil, fmt.Errorf("error opening feed of stream %s: %w: position %d is below the oldest kept entry (entries up to %d were removed)",
			stream, store.ErrPositionLost, pos, floor)
	}
	if pos > last {
		// No seq this high was ever assigned in this file: the position comes
		// from another file (one that was replaced), and this file's entries
		// up to it would be skipped.
		return nil, fmt.Errorf("error opening feed of stream %s: %w: position %d is ahead of the store's last entry %d",
			stream, store.ErrPositionLost, pos, last)
	}
	f.pos = pos
	return f, nil
}

// querier is what *sql.DB and *sql.Tx share.
type querier interface {
	QueryRowContext(ctx context.Context, query string, args ...any) *sql.Row
}

// qFloorAndLastSeq reads a stream's floor (0: none) and the highest seq
// ever assigned, by primary keys.
const qFloorAndLastSeq = `SELECT coalesce((SELECT seq FROM feed_floor WHERE stream = ?), 0), (` + qLastSeq + `)`

// qFloor reads a stream's floor. Primary key of feed_floor.
const qFloor = `SELECT seq FROM feed_floor WHERE stream = ?`

// floor returns the highest seq of stream that DeleteDispatched removed (0:
// none), read with q, qFloor prepared (readStmt).
func (s *Store) floor(ctx context.Context, q *sql.Stmt, stream string) (int64, error) {
	var floor int64
	err := q.QueryRowContext(ctx, stream).Scan(&floor)
	if errors.Is(err, sql.ErrNoRows) {
		return 0, nil
	}
	if err != nil {
		return 0, s.fail(fmt.Sprintf("reading feed floor of stream %s", stream), err)
	}
	return floor, nil
}

// feed is a Feed on the outbox table. Next is for one goroutine at a time;
// Position and Close may be called from others.
type feed struct {
	s      *Store
	stream string
	part   store.Partition
	poll   time.Duration
	// gather is FeedOptions.Gather.
	gather time.Duration
	// onWait, when set (tests), is called each time Next found nothing and
	// is about to wait.
	onWait func()

	mu  sync.Mutex
	pos int64 // seq of the last entry returned (or the opening position)
	// idle: the last read found nothing (a feed opens idle), so the next
	// looks at the last seq first (read).
	idle bool

	closeOnce sync.Once
	closed    chan struct{}
}

// Next returns the entries of the stream after the feed's position, at most
// max, in seq order, waiting up to wait for the first: it looks at the
// outbox every poll interval, and at once when a commit of this Store
// inserted entries (then, with FeedOptions.Gather, that long later). It
// returns none (and no error) when nothing arrived.
func (f *feed) Next(ctx context.Context, max int, wait time.Duration) ([]outbox.Entry, error) {
	if max <= 0 {
		return nil, fmt.Errorf("error reading feed of stream %s: max must be positive, got %d", f.stream, max)
	}
	deadline := time.Now().Add(wait)
	var timer *time.Timer
	defer func() {
		if timer != nil {
			timer.Stop()
		}
	}()
	for {
		select {
		case <-f.closed:
			return nil, fmt.Errorf("error reading feed of stream %s: the feed is closed", f.stream)
		default:
		}
		woken := f.s.woken() // before the read, so a commit after it is not missed
		entries, err := f.read(ctx, max)
		if err != nil || len(entries) > 0 {
			return entries, err
		}
		left := time.Until(deadline)
		if left <= 0 {
			return nil, nil
		}
		d := min(f.poll, left)
		if timer == nil {
			timer = time.NewTimer(d)
		} else {
			timer.Reset(d)
		}
		if f.onWait != nil {
			f.onWait()
		}
		select {
		case <-ctx.Done():
			return nil, ctx.Err()
		case <-f.closed:
		case <-woken:
			if g := min(f.gather, time.Until(deadline)); g > 0 {
				// More commits may follow this one: read them together
				// (Reset drops a pending tick since Go 1.23).
				timer.Reset(g)
				select {
				case <-ctx.Done():
					return nil, ctx.Err()
				case <-f.closed:
				case <-timer.C:
				}
			}
		case <-timer.C:
		}
	}
}

// qFeed reads a stream's entries after a seq. Index outbox_stream_seq:
// equality on stream, range and order on seq.
const qFeed = `SELECT ` + entryColumns + ` FROM "{outbox}" WHERE stream = ? AND seq > ? ORDER BY seq LIMIT ?`

// qFeedPartition reads a partition's entries after a seq. Index
// outbox_partition_seq: equality on stream and partition, range and order
// on seq.
const qFeedPartition = `SELECT ` + entryColumns + ` FROM "{outbox}"
	WHERE stream = ? AND partition = ? AND seq > ? ORDER BY seq LIMIT ?`

// partitionQuery returns q (the whole stream's) with its arguments, or
// inPart (one partition's, the partition bound after the stream) when part
// is one of several.
func partitionQuery(q, inPart, stream string, part store.Partition, rest ...any) (string, []any) {
	if part.Whole() {
		return q, append([]any{stream}, rest...)
	}
	return inPart, append([]any{stream, part.Index}, rest...)
}

// read returns the entries after the position, and checks, in the same
// snapshot, that none of them was removed (the floor).
func (f *feed) read(ctx context.Context, max int) ([]outbox.Entry, error) {
	f.mu.Lock()
	pos, idle := f.pos, f.idle
	f.mu.Unlock()
	what := fmt.Sprintf("reading feed of stream %s", f.stream)
	// After a read that found nothing (an idle feed's polls), look first
	// whether anything was committed after the position: not when the last
	// seq ever assigned is not past it (sqlite_sequence is written by the
	// transaction that assigns a seq, and one writer commits at a time, so
	// every entry up to it is committed). Then there is no entry to read,
	// and no floor above the position either (a removed entry's seq is at
	// most the last): one statement instead of a read transaction of two.
	// A feed that keeps finding entries skips the look.
	if idle {
		lastStmt, err := f.s.readStmt(ctx, f.s.q.lastSeq)
		if err != nil {
			return nil, f.s.fail(what, err)
		}
		var last int64
		if err := lastStmt.QueryRowContext(ctx).Scan(&last); err != nil {
			return nil, f.s.fail(what, err)
		}
		if last <= pos {
			return nil, nil
		}
	}
	q, args := partitionQuery(f.s.q.feed, f.s.q.feedPartition, f.stream, f.part, pos, max)
	floorStmt, err := f.s.readStmt(ctx, qFloor)
	if err != nil {
		return nil, f.s.fail(what, err)
	}
	feedStmt, err := f.s.readStmt(ctx, q)
	if err != nil {
		return nil, f.s.fail(what, err)
	}
	tx, err := f.s.read.BeginTx(ctx, &sql.TxOptions{ReadOnly: true})
	if err != nil {
		return nil, f.s.fail(what, err)
	}
	defer func() { _ = tx.Rollback() }() // read only: nothing to commit
	floor, err := f.s.floor(ctx, tx.StmtContext(ctx, floorStmt), f.stream)
	if err != nil {
		return nil, err
	}
	if pos < floor {
		return nil, fmt.Errorf("error %s: %w: entries up to %d were removed, the feed is at %d", what, store.ErrPositionLost, floor, pos)
	}
	st := tx.StmtContext(ctx, feedStmt)
	rows, err := st.QueryContext(ctx, args...)
	if err != nil {
		return nil, f.s.fail(what, err)
	}
	entries, last, err := scanEntries(rows)
	if err != nil {
		return nil, f.s.fail(what, err)
	}
	f.mu.Lock()
	f.idle = len(entries) == 0
	if len(entries) > 0 {
		f.pos = last
	}
	f.mu.Unlock()
	return entries, nil
}

// Position returns the seq of the last entry Next returned (the opening
// position before any), in decimal.
func (f *feed) Position() store.Position {
	f.mu.Lock()
	defer f.mu.Unlock()
	return position(f.pos)
}

// Close ends the feed; a Next waiting returns. It holds no resources between
// calls of Next.
func (f *feed) Close(ctx context.Context) error {
	f.closeOnce.Do(func() { close(f.closed) })
	return nil
}

// scanEntries reads rows of entryColumns and closes rows; last is the seq of
// the last entry.
func scanEntries(rows *sql.Rows) (entries []outbox.Entry, last int64, err error) {
	defer rows.Close()
	for rows.Next() {
		var e outbox.Entry
		var seq, created int64
		var dispatched sql.NullInt64
		var traceParent sql.NullString
		if err := rows.Scan(&seq, &e.EventID, &e.Stream, &e.Message, &created, &dispatched, &traceParent, &e.Partition); err != nil {
			return nil, 0, err
		}
		e.TraceParent = traceParent.String
		e.ID = entryID(seq)
		e.CreatedAt = fromMillis(created)
		e.DispatchedAt = fromNullMillis(dispatched)
		entries = append(entries, e)
		last = seq
	}
	return entries, last, rows.Err()
}

// qUndispatched reads a stream's undispatched entries after a seq. Index
// outbox_undispatched (undispatched entries only).
const qUndispatched = `SELECT ` + entryColumns + ` FROM "{outbox}"
	WHERE stream = ? AND dispatched_at IS NULL AND seq > ? ORDER BY seq LIMIT ?`

// qUndispatchedPartition reads a partition's undispatched entries after a
// seq. Index outbox_partition_undispatched (undispatched entries only).
const qUndispatchedPartition = `SELECT ` + entryColumns + ` FROM "{outbox}"
	WHERE stream = ? AND partition = ? AND dispatched_at IS NULL AND seq > ? ORDER BY seq LIMIT ?`

// Undispatched returns at most limit entries of stream (of part) whose
// dispatched_at is NULL and whose id sorts after after ("" for the start),
// in id order.
func (s *Store) Undispatched(ctx context.Context, stream string, part store.Partition, after string, limit int) ([]outbox.Entry, error) {
	if limit <= 0 {
		return nil, nil
	}
	var seq int64
	if after != "" {
		var err error
		if seq, err = parseEntryID(after); err != nil {
			return nil, fmt.Errorf("error reading undispatched entries of stream %s: %w", stream, err)
		}
	}
	q, args := partitionQuery(s.q.undispatched, s.q.undispatchedPartition, stream, part, seq, limit)
	rows, err := s.read.QueryContext(ctx, q, args...)
	if err != nil {
		return nil, s.fail(fmt.Sprintf("reading undispatched entries of stream %s", stream), err)
	}
	entries, _, err := scanEntries(rows)
	if err != nil {
		return nil, s.fail(fmt.Sprintf("reading undispatched entries of stream %s", stream), err)
	}
	return entries, nil
}

// qMarkDispatched marks a JSON array of entry ids dispatched. Primary key,
// one probe per id.
const qMarkDispatched = `UPDATE "{outbox}" SET dispatched_at = ?
	WHERE seq IN (SELECT CAST(value AS INTEGER) FROM json_each(?)) AND dispatched_at IS NULL`

// MarkDispatched sets dispatched_at = at on those of ids not dispatched yet,
// in one transaction that first checks that lease is still held by its owner
// with its term (else nothing changes and the error wraps store.ErrFenced).
// An id that is not an entry id of this store is an error.
func (s *Store) MarkDispatched(ctx context.Context, lease store.Lease, ids []string, at time.Time) error {
	what := fmt.Sprintf("marking entries of lease %s dispatched", lease.Name)
	if err := checkEntryIDs(what, ids); err != nil {
		return err
	}
	return s.inWriteTx(ctx, what, func(tx *sql.Tx) error {
		if err := s.checkLease(ctx, tx, lease); err != nil {
			return fmt.Errorf("error %s: %w", what, err)
		}
		return s.markDispatched(ctx, tx, what, ids, at)
	})
}

// checkEntryIDs returns an error naming what unless every id is an entry
// id of this store.
func checkEntryIDs(what string, ids []string) error {
	for _, id := range ids {
		if _, err := parseEntryID(id); err != nil {
			return fmt.Errorf("error %s: %w", what, err)
		}
	}
	return nil
}

// markDispatched sets dispatched_at = at on those of ids (entry ids,
// checked by the caller) not dispatched yet, in tx.
func (s *Store) markDispatched(ctx context.Context, tx *sql.Tx, what string, ids []string, at time.Time) error {
	for _, chunk := range chunks(ids, idChunk) {
		list, err := jsonArray(chunk)
		if err != nil {
			return fmt.Errorf("error %s: %w", what, err)
		}
		if _, err := tx.ExecContext(ctx, s.q.markDispatched, millis(at), list); err != nil {
			return s.fail(what, err)
		}
	}
	return nil
}

// DeleteDispatched's statements: the oldest dispatched entries, from index
// outbox_dispatched_at (dispatched entries only), removed by primary key;
// the floor by its primary key.
const (
	qDeleteDispatched = `DELETE FROM "{outbox}" WHERE seq IN (
		SELECT seq FROM "{outbox}" WHERE dispatched_at < ? ORDER BY dispatched_at LIMIT ?)
		RETURNING stream, seq`
	qRaiseFloor = `INSERT INTO feed_floor (stream, seq) VALUES (?, ?)
		ON CONFLICT (stream) DO UPDATE SET seq = max(seq, excluded.seq)`
)

// DeleteDispatched removes the entries dispatched before before and returns
// how many. It works in transactions of at
// most deleteChunk entries; each raises, per stream, feed_floor to the
// highest seq it removed, so a feed position below it is known lost.
func (s *Store) DeleteDispatched(ctx context.Context, before time.Time) (int64, error) {
	var total int64
	for {
		var n int64
		err := s.inWriteTx(ctx, "deleting dispatched entries", func(tx *sql.Tx) error {
			rows, err := tx.QueryContext(ctx, s.q.deleteDispatched, millis(before), deleteChunk)
			if err != nil {
				return s.fail("deleting dispatched entries", err)
			}
			highest := map[string]int64{}
			for rows.Next() {
				var stream string
				var seq int64
				if err := rows.Scan(&stream, &seq); err != nil {
					_ = rows.Close()
					return s.fail("deleting dispatched entries", err)
				}
				highest[stream] = max(highest[stream], seq)
				n++
			}
			if err := rows.Err(); err != nil {
				_ = rows.Close()
				return s.fail("deleting dispatched entries", err)
			}
			if err := rows.Close(); err != nil {
				return s.fail("deleting dispatched entries", err)
			}
			for stream, seq := range highest {
				_, err := tx.ExecContext(ctx, qRaiseFloor, stream, seq)
				if err != nil {
					return s.fail(fmt.Sprintf("raising feed floor of stream %s", stream), err)
				}
			}
			return nil
		})
		if err != nil {
			return total, err
		}
		total += n
		if n < deleteChunk {
			return total, nil
		}
	}
}
