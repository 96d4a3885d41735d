package worker

import (
	"cmp"
	"context"
	"encoding/json"
	"fmt"
	"slices"
	"strings"
	"time"

	"github.com/jackc/pgx/v5"

	"github.com/outboxd/outboxd/outbox"
)

// Projector writes a batch of originals into the read model.
//
// The worker owns the transaction: it begins tx, calls Project once per
// attempt, and commits. A serialization failure or deadlock (40001, 40P01)
// makes the worker roll back and call Project again in a new transaction, so
// Project must only write through tx and keep no state between calls.
//
// events holds each original once (the worker de-duplicates the batch by
// event id) in ascending event id order; the slice and the events must not be
// retained. Project must be idempotent: the same event may come again in a
// later batch (redelivery, replay, reconciliation), and must then leave the
// read model unchanged.
//
// A returned error is classified by the worker: connection errors, timeouts
// and server shutdowns pause consumption and are retried; PostgreSQL data
// errors (classes 22 and 23) and errors wrapping ErrRecord count against the
// failing records, which are parked after Config.MaxDeliveries deliveries.
type Projector interface {
	Project(ctx context.Context, tx pgx.Tx, events []*outbox.Event) error
}

// ProjectorFunc adapts a function to Projector.
type ProjectorFunc func(ctx context.Context, tx pgx.Tx, events []*outbox.Event) error

// Project calls f.
func (f ProjectorFunc) Project(ctx context.Context, tx pgx.Tx, events []*outbox.Event) error {
	return f(ctx, tx, events)
}

// EventsProjector is the default Projector: one row per original in events
// and per (source, device, UTC day) counts in device_daily_stats.
type EventsProjector struct{}

// NewEventsProjector returns the default projector.
func NewEventsProjector() *EventsProjector { return &EventsProjector{} }

// projectSQL inserts the batch with one statement: rows that already exist
// (by event_id or idempotency_key) are skipped, and only the rows this
// statement inserted grow device_daily_stats, aggregated per key and written
// in key order (so concurrent batches lock stats rows in the same order).
const projectSQL = `
WITH ins AS (
	INSERT INTO events (event_id, idempotency_key, source_key, device_key, type, occurred_at, payload, created_at)
	SELECT u.event_id, u.idempotency_key, u.source_key, u.device_key, u.type, u.occurred_at, u.payload::jsonb, u.created_at
	FROM unnest($1::text[], $2::text[], $3::text[], $4::text[], $5::text[], $6::timestamptz[], $7::text[], $8::timestamptz[])
		AS u(event_id, idempotency_key, source_key, device_key, type, occurred_at, payload, created_at)
	ORDER BY u.event_id
	ON CONFLICT DO NOTHING
	RETURNING source_key, device_key, occurred_at
)
INSERT INTO device_daily_stats AS s (source_key, device_key, day, event_count, first_occurred_at, last_occurred_at)
SELECT source_key, device_key, (occurred_at AT TIME ZONE 'UTC')::date, count(*), min(occurred_at), max(occurred_at)
FROM ins
GROUP BY 1, 2, 3
ORDER BY 1, 2, 3
ON CONFLICT (source_key, device_key, day) DO UPDATE SET
	event_count = s.event_count + EXCLUDED.event_count,
	first_occurred_at = LEAST(s.first_occurred_at, EXCLUDED.first_occurred_at),
	last_occurred_at = GREATEST(s.last_occurred_at, EXCLUDED.last_occurred_at)`

// Project inserts events and grows the stats of the rows it inserted.
func (p *EventsProjector) Project(ctx context.Context, tx pgx.Tx, events []*outbox.Event) error {
	rows, err := projectRows(events)
	if err != nil {
		return err
	}
	if _, err := tx.Exec(ctx, projectSQL, rows.args()...); err != nil {
		return fmt.Errorf("error projecting %d events: %w", len(events), err)
	}
	return nil
}

// rowSet holds a batch as column arrays for unnest.
type rowSet struct {
	ids, keys, sources, devices, types, payloads []string
	occurred, created                            []time.Time
}

func (r *rowSet) args() []any {
	return []any{r.ids, r.keys, r.sources, r.devices, r.types, r.occurred, r.payloads, r.created}
}

// projectRows turns events into column arrays, de-duplicated by id and in id
// order; the payload goes in as the stored JSON text (no re-encoding).
func projectRows(events []*outbox.Event) (*rowSet, error) {
	sorted := slices.Clone(events)
	slices.SortFunc(sorted, func(a, b *outbox.Event) int { return strings.Compare(a.ID, b.ID) })
	sorted = slices.CompactFunc(sorted, func(a, b *outbox.Event) bool { return a.ID == b.ID })
	r := &rowSet{}
	for _, ev := range sorted {
		payload := ev.Payload
		if len(payload) == 0 {
			payload = json.RawMessage("{}")
		}
		r.ids = append(r.ids, ev.ID)
		r.keys = append(r.keys, ev.IdempotencyKey)
		r.sources = append(r.sources, ev.SourceKey)
		r.devices = append(r.devices, ev.DeviceKey)
		r.types = append(r.types, ev.Type)
		r.occurred = append(r.occurred, ev.OccurredAt.UTC())
		r.payloads = append(r.payloads, string(payload))
		r.created = append(r.created, ev.CreatedAt.UTC())
	}
	return r, nil
}

// The read model's maintenance, for the operator commands (replay
// --rebuild, verify): the same tables as Project, the same key order for
// locks.

// StatsKey names one device_daily_stats row; Day is a UTC midnight.
type StatsKey struct {
	SourceKey, DeviceKey string
	Day                  time.Time
}

// Compare orders keys by source, device and day: the order statistics rows
// are locked in.
func (k StatsKey) Compare(o StatsKey) int {
	return cmp.Or(strings.Compare(k.SourceKey, o.SourceKey), strings.Compare(k.DeviceKey, o.DeviceKey), k.Day.Compare(o.Day))
}

// Row is a row of the events table, without its payload.
type Row struct {
	EventID, SourceKey, DeviceKey string
	OccurredAt                    time.Time
}

// StatsDrift is a device_daily_stats row that differs from its rows: its
// count, first or last occurrence. Counted is the row's event_count (0 when
// it is missing), Rows the number of rows of its device and day.
type StatsDrift struct {
	StatsKey
	Counted, Rows int64
}

// Unproject removes the rows of ids from events and recomputes, from the
// rows left, the statistics rows those rows were counted in (see
// RecomputeStats). It returns how many rows it removed. Run it in one
// transaction: a re-published original is then counted once more only
// after its old count is gone.
func (p *EventsProjector) Unproject(ctx context.Context, tx pgx.Tx, ids []string) (int64, error) {
	rows, err := tx.Query(ctx, `DELETE FROM events WHERE event_id = ANY($1::text[])
		RETURNING source_key, device_key, (occurred_at AT TIME ZONE 'UTC')::date`, ids)
	if err != nil {
		return 0, fmt.Errorf("error removing %d rows: %w", len(ids), err)
	}
	keys, err := pgx.CollectRows(rows, func(r pgx.CollectableRow) (StatsKey, error) {
		var k StatsKey
		return k, r.Scan(&k.SourceKey, &k.DeviceKey, &k.Day)
	})
	if err != nil {
		return 0, fmt.Errorf("error removing %d rows: %w", len(ids), err)
	}
	return int64(len(keys)), p.RecomputeStats(ctx, tx, keys)
}

// recomputeLockSQL locks the statistics rows of the keys in key order, and
// inserts an empty one where none exists, so that a worker projecting a
// row of one of those days now waits for this transaction and then adds its
// count to the recomputed one.
const recomputeLockSQL = `
INSERT INTO device_daily_stats AS s (source_key, device_key, day, event_count, first_occurred_at, last_occurred_at)
SELECT k.source_key, k.device_key, k.day, 0, k.day::timestamp AT TIME ZONE 'UTC', k.day::timestamp AT TIME ZONE 'UTC'
FROM unnest($1::text[], $2::text[], $3::date[]) AS k(source_key, device_key, day)
ORDER BY 1, 2, 3
ON CONFLICT (source_key, device_key, day) DO UPDATE SET event_count = s.event_count`

// recomputeSQL sets the locked statistics rows to the count, first and last
// occurrence of their rows, and deletes those whose day has none.
const recomputeSQL = `
WITH agg AS (
	SELECT k.source_key, k.device_key, k.day, count(e.event_id) AS n, min(e.occurred_at) AS first, max(e.occurred_at) AS last
	FROM unnest($1::text[], $2::text[], $3::date[]) AS k(source_key, device_key, day)
	LEFT JOIN events e ON e.source_key = k.source_key AND e.device_key = k.device_key
		AND e.occurred_at >= k.day::timestamp AT TIME ZONE 'UTC' AND e.occurred_at < (k.day + 1)::timestamp AT TIME ZONE 'UTC'
	GROUP BY 1, 2, 3
), gone AS (
	DELETE FROM device_daily_stats s USING agg
	WHERE agg.n = 0 AND s.source_key = agg.source_key AND s.device_key = agg.device_key AND s.day = agg.day
)
UPDATE device_daily_stats s SET event_count = agg.n, first_occurred_at = agg.first, last_occurred_at = agg.last
FROM agg
WHERE agg.n > 0 AND s.source_key = agg.source_key AND s.device_key = agg.device_key AND s.day = agg.day`

// RecomputeStats sets each statistics row of keys to what its rows say
// (count, first and last occurrence), deleting it when its day has no row.
// Rows projected concurrently are counted once: the statistics rows are
// locked first (see recomputeLockSQL).
func (p *EventsProjector) RecomputeStats(ctx context.Context, tx pgx.Tx, keys []StatsKey) error {
	keys = slices.Clone(keys)
	slices.SortFunc(keys, StatsKey.Compare)
	keys = slices.Compact(keys)
	if len(keys) == 0 {
		return nil
	}
	var sources, devices []string
	var days []time.Time
	for _, k := range keys {
		sources, devices, days = append(sources, k.SourceKey), append(devices, k.DeviceKey), append(days, k.Day)
	}
	if _, err := tx.Exec(ctx, recomputeLockSQL, sources, devices, days); err != nil {
		return fmt.Errorf("error locking %d statistics rows: %w", len(keys), err)
	}
	if _, err := tx.Exec(ctx, recomputeSQL, sources, devices, days); err != nil {
		return fmt.Errorf("error recomputing %d statistics rows: %w", len(keys), err)
	}
	return nil
}

// Projected returns those of ids that have a row.
func (p *EventsProjector) Projected(ctx context.Context, tx pgx.Tx, ids []string) (map[string]bool, error) {
	rows, err := tx.Query(ctx, `SELECT event_id FROM events WHERE event_id = ANY($1::text[])`, ids)
	if err != nil {
		return nil, fmt.Errorf("error reading %d rows: %w", len(ids), err)
	}
	found, err := pgx.CollectRows(rows, pgx.RowTo[string])
	if err != nil {
		return nil, fmt.Errorf("error reading %d rows: %w", len(ids), err)
	}
	out := make(map[string]bool, len(found))
	for _, id := range found {
		out[id] = true
	}
	return out, nil
}

// Rows returns at most limit rows whose occurred_at lies in [from, to) (a
// nil bound is open), after event id after, in event id order.
func (p *EventsProjector) Rows(ctx context.Context, tx pgx.Tx, from, to *time.Time, after string, limit int) ([]Row, error) {
	rows, err := tx.Query(ctx, `SELECT event_id, source_key, device_key, occurred_at FROM events
		WHERE event_id > $1 AND occurred_at >= coalesce($2::timestamptz, '-infinity') AND occurred_at < coalesce($3::timestamptz, 'infinity')
		ORDER BY event_id LIMIT $4`, after, from, to, limit)
	if err != nil {
		return nil, fmt.Errorf("error reading rows: %w", err)
	}
	out, err := pgx.CollectRows(rows, func(r pgx.CollectableRow) (Row, error) {
		var row Row
		err := r.Scan(&row.EventID, &row.SourceKey, &row.DeviceKey, &row.OccurredAt)
		row.OccurredAt = row.OccurredAt.UTC()
		return row, err
	})
	if err != nil {
		return nil, fmt.Errorf("error reading rows: %w", err)
	}
	return out, nil
}

// statsDriftSQL compares the statistics rows of the days in [$1, $2) with
// the rows of those days, both ways.
const statsDriftSQL = `
WITH r AS (
	SELECT source_key, device_key, (occurred_at AT TIME ZONE 'UTC')::date AS day,
		count(*) AS n, min(occurred_at) AS first, max(occurred_at) AS last
	FROM events
	WHERE occurred_at >= coalesce($1::date::timestamp AT TIME ZONE 'UTC', '-infinity')
		AND occurred_at < coalesce($2::date::timestamp AT TIME ZONE 'UTC', 'infinity')
	GROUP BY 1, 2, 3
), s AS (
	SELECT * FROM device_daily_stats
	WHERE day >= coalesce($1::date, '-infinity'::date) AND day < coalesce($2::date, 'infinity'::date)
)
SELECT coalesce(s.source_key, r.source_key), coalesce(s.device_key, r.device_key), coalesce(s.day, r.day),
	coalesce(s.event_count, 0), coalesce(r.n, 0)
FROM s FULL JOIN r ON s.source_key = r.source_key AND s.device_key = r.device_key AND s.day = r.day
WHERE s.event_count IS DISTINCT FROM r.n OR s.first_occurred_at IS DISTINCT FROM r.first
	OR s.last_occurred_at IS DISTINCT FROM r.last
ORDER BY 1, 2, 3
LIMIT $3`

// StatsDrift returns at most limit statistics rows of the UTC days that
// [from, to) touches (a nil bound is open) that differ from their rows, and
// the days of rows that have no statistics row, in key order.
func (p *EventsProjector) StatsDrift(ctx context.Context, tx pgx.Tx, from, to *time.Time, limit int) ([]StatsDrift, error) {
	var first, end *time.Time
	if from != nil {
		d := from.UTC().Truncate(24 * time.Hour)
		first = &d
	}
	if to != nil {
		d := to.UTC().Add(-time.Nanosecond).Truncate(24 * time.Hour).Add(24 * time.Hour)
		end = &d
	}
	rows, err := tx.Query(ctx, statsDriftSQL, first, end, limit)
	if err != nil {
		return nil, fmt.Errorf("error comparing statistics with rows: %w", err)
	}
	out, err := pgx.CollectRows(rows, func(r pgx.CollectableRow) (StatsDrift, error) {
		var d StatsDrift
		return d, r.Scan(&d.SourceKey, &d.DeviceKey, &d.Day, &d.Counted, &d.Rows)
	})
	if err != nil {
		return nil, fmt.Errorf("error comparing statistics with rows: %w", err)
	}
	return out, nil
}
