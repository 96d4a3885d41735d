package sqlitestore

import (
	"context"
	"fmt"
	"math"
	"strings"

	"github.com/outboxd/outboxd/outbox"
	"github.com/outboxd/outboxd/store"
)

// The indexes of the operator queries (migration 00002), after the events
// table's name (events_occurred with the default). Each query names its
// index with INDEXED BY, so the plan does not depend on SQLite's guesses
// (the store runs no ANALYZE): a range of the window's time, in (time, id)
// order, with the other conditions filtered from the range.
const (
	indexOccurred = "occurred"
	indexCreated  = "created"
	indexDevice   = "device"
)

// eventQuery returns the FROM … WHERE part of q's statements and its
// arguments, and the time column of q's order. A cursor (q.After) is used
// when withCursor is set.
func (t tables) eventQuery(q store.EventQuery, withCursor bool) (string, []any, string) {
	col, index := "occurred_at", indexOccurred
	if q.By == store.ByCreated {
		col, index = "created_at", indexCreated
	}
	var conds []string
	var args []any
	if index == indexOccurred && q.SourceKey != "" && q.DeviceKey != "" {
		index = indexDevice
		conds = append(conds, "source_key = ?", "device_key = ?")
		args = append(args, q.SourceKey, q.DeviceKey)
	}
	lo, hi := int64(math.MinInt64), int64(math.MaxInt64)
	if !q.From.IsZero() {
		lo = millis(q.From)
	}
	if !q.To.IsZero() {
		hi = millis(q.To)
	}
	if withCursor && q.After != nil {
		lo = max(lo, millis(q.After.At))
	}
	conds = append(conds, col+" >= ?", col+" < ?")
	args = append(args, lo, hi)
	if withCursor && q.After != nil {
		conds = append(conds, "("+col+" > ? OR id > ?)")
		args = append(args, millis(q.After.At), q.After.ID)
	}
	if index != indexDevice {
		if q.SourceKey != "" {
			conds = append(conds, "source_key = ?")
			args = append(args, q.SourceKey)
		}
		if q.DeviceKey != "" {
			conds = append(conds, "device_key = ?")
			args = append(args, q.DeviceKey)
		}
	}
	if q.HasDeviceRange() { // BINARY collation: byte order, as store.EventQuery says
		conds = append(conds, "device_key >= ?", "device_key <= ?")
		args = append(args, q.DeviceFrom, q.DeviceTo)
	}
	switch q.State {
	case outbox.StatePending:
		conds = append(conds, "synced_at IS NULL AND sync_failure IS NULL")
	case outbox.StateFailed:
		conds = append(conds, "sync_failure IS NOT NULL AND synced_at IS NULL")
	case outbox.StateSynced:
		conds = append(conds, "synced_at IS NOT NULL")
	}
	return t.sql(`FROM "{events}" INDEXED BY "{events}_`+index+`" WHERE `) + strings.Join(conds, " AND "), args, col
}

// listEventsSQL returns ListEvents' statement for q and its arguments.
func (t tables) listEventsSQL(q store.EventQuery) (string, []any) {
	from, args, col := t.eventQuery(q, true)
	return `SELECT ` + eventColumnsNoPayload + ` ` + from + ` ORDER BY ` + col + `, id LIMIT ?`, append(args, q.Limit)
}

// countEventsSQL returns CountEvents' statement for q and its arguments.
func (t tables) countEventsSQL(q store.EventQuery) (string, []any) {
	from, args, _ := t.eventQuery(q, false)
	return `SELECT count(*) ` + from, args
}

// ListEvents returns the originals q selects, at most q.Limit, in (time, id)
// order after q.After, without their payloads, from index events_occurred,
// events_created or (source and device given, by occurredAt)
// events_device. An original that cannot be decoded fails the page with an
// error wrapping store.ErrCorrupt that names it.
func (s *Store) ListEvents(ctx context.Context, q store.EventQuery) ([]*outbox.Event, error) {
	if err := q.Validate(); err != nil {
		return nil, err
	}
	if q.Limit <= 0 {
		return nil, fmt.Errorf("invalid EventQuery.Limit %d: must be positive", q.Limit)
	}
	query, args := s.q.listEventsSQL(q)
	rows, err := s.read.QueryContext(ctx, query, args...)
	if err != nil {
		return nil, s.fail("listing originals", err)
	}
	defer rows.Close()
	var out []*outbox.Event
	for rows.Next() {
		var r rawEvent
		if err := rows.Scan(r.dest()...); err != nil {
			return nil, s.fail("listing originals", err)
		}
		ev, err := r.decode()
		if err != nil {
			return nil, fmt.Errorf("error listing originals: %w", err)
		}
		ev.Payload = nil
		out = append(out, ev)
	}
	if err := rows.Err(); err != nil {
		return nil, s.fail("listing originals", err)
	}
	return out, nil
}

// CountEvents counts the originals q selects over the same index range as
// ListEvents.
func (s *Store) CountEvents(ctx context.Context, q store.EventQuery) (int64, error) {
	if err := q.Validate(); err != nil {
		return 0, err
	}
	query, args := s.q.countEventsSQL(q)
	var n int64
	if err := s.read.QueryRowContext(ctx, query, args...).Scan(&n); err != nil {
		return 0, s.fail("counting originals", err)
	}
	return n, nil
}

// qRedrive makes parked originals of a JSON array of ids pending again.
// Index events_id, one probe per id.
const qRedrive = `UPDATE "{events}" SET sync_failure = NULL, failure_category = NULL, last_requeued_at = NULL, requeue_count = 0
	WHERE id IN (SELECT value FROM json_each(?)) AND sync_failure IS NOT NULL AND synced_at IS NULL`

// Redrive clears sync_failure and last_requeued_at and zeroes requeue_count
// on those of ids that are parked and not synced, in one transaction, and
// returns how many it changed.
func (s *Store) Redrive(ctx context.Context, ids []string) (int64, error) {
	return s.updateByIDs(ctx, "redriving parked originals", s.q.redrive, ids)
}
