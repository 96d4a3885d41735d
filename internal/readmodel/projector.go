package readmodel

import (
	"context"
	"encoding/json"
	"fmt"
	"slices"
	"strings"
	"time"

	"github.com/jackc/pgx/v5"

	"github.com/outboxd/outboxd/outbox"
)

// Projector is the worker's default projector (a worker.Projector): one row
// per original in events and per (source, device, UTC day) counts in
// device_daily_stats, idempotently. It keeps no state: one value serves any
// number of workers.
type Projector struct{}

// NewProjector returns the default projector.
func NewProjector() *Projector { return &Projector{} }

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
func (p *Projector) Project(ctx context.Context, tx pgx.Tx, events []*outbox.Event) error {
	rows, err := projectRows(events)
	if err != nil {
		return err
	}
	if _, err := tx.Exec(ctx, projectSQL, rows.args()...); err != nil {
		return fmt.Errorf("error projecting %d events: %w", len(events), err)
	}
	return nil
}

// QueueProject queues Project's statement on b (worker.PipelinedProjector):
// the worker sends it with the transaction's BEGIN and COMMIT in one round
// trip.
func (p *Projector) QueueProject(b *pgx.Batch, events []*outbox.Event) error {
	rows, err := projectRows(events)
	if err != nil {
		return err
	}
	b.Queue(projectSQL, rows.args()...)
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
