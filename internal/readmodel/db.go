package readmodel

import (
	"cmp"
	"context"
	"errors"
	"fmt"
	"slices"
	"strings"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgxpool"

	"github.com/outboxd/outboxd/internal/pgerr"
	"github.com/outboxd/outboxd/outbox"
)

// txAttempts is how often a transaction of DB runs when it meets a
// serialization failure or deadlock.
const txAttempts = 5

// DB is the read model in PostgreSQL as the operator actions use it: the
// lookups of verify and the journey, and the repair statements of verify
// --repair and replay --rebuild, on the default projector's tables, with the
// same key order for locks as Project. Each method runs in a transaction
// of its own (read-only for the reads), again after a serialization failure
// or deadlock. It is safe for concurrent use.
type DB struct {
	pool *pgxpool.Pool
}

// New returns the read model over pool.
func New(pool *pgxpool.Pool) *DB { return &DB{pool: pool} }

// Ping checks that PostgreSQL answers.
func (d *DB) Ping(ctx context.Context) error { return d.pool.Ping(ctx) }

// Present reports whether the default projector's tables (events and
// device_daily_stats) exist where the pool's search_path finds them: a team
// that projects into a read model of its own has not applied outboxd's.
func (d *DB) Present(ctx context.Context) (bool, error) {
	var ok bool
	err := d.pool.QueryRow(ctx, `SELECT to_regclass('events') IS NOT NULL AND to_regclass('device_daily_stats') IS NOT NULL`).Scan(&ok)
	return ok, err
}

// AuditRecordable reports whether the table the audit records its runs
// in (audit_runs, migration 00002) is in the database.
func (d *DB) AuditRecordable(ctx context.Context) (bool, error) {
	var ok bool
	err := d.pool.QueryRow(ctx, `SELECT to_regclass('audit_runs') IS NOT NULL`).Scan(&ok)
	return ok, err
}

// inTx runs fn in one transaction of mode, again after a serialization
// failure or deadlock.
func (d *DB) inTx(ctx context.Context, mode pgx.TxAccessMode, fn func(tx pgx.Tx) error) error {
	var err error
	for range txAttempts {
		err = pgx.BeginTxFunc(ctx, d.pool, pgx.TxOptions{AccessMode: mode}, fn)
		if code := pgerr.Code(err); code != "40001" && code != "40P01" {
			break
		}
	}
	return err
}

// Lookup returns, in one read-only transaction, the row of eventID (or
// else the row of idempotencyKey: one projected from an earlier original of
// the key; nil when neither has one) and the statistics row of key (nil
// when there is none): what the journey of an original shows.
func (d *DB) Lookup(ctx context.Context, eventID, idempotencyKey string, key StatsKey) (*Row, *Stats, error) {
	var row *Row
	var stats *Stats
	err := d.inTx(ctx, pgx.ReadOnly, func(tx pgx.Tx) error {
		r, err := scanRow(tx.QueryRow(ctx, `SELECT `+rowColumns+` FROM events
			WHERE event_id = $1 OR idempotency_key = $2 ORDER BY event_id = $1 DESC LIMIT 1`, eventID, idempotencyKey))
		switch {
		case errors.Is(err, pgx.ErrNoRows):
			row = nil
		case err != nil:
			return err
		default:
			row = &r
		}
		st := Stats{StatsKey: key}
		err = tx.QueryRow(ctx, `SELECT event_count, first_occurred_at, last_occurred_at FROM device_daily_stats
			WHERE source_key = $1 AND device_key = $2 AND day = $3::date`, key.SourceKey, key.DeviceKey, key.Day).
			Scan(&st.EventCount, &st.FirstOccurredAt, &st.LastOccurredAt)
		switch {
		case errors.Is(err, pgx.ErrNoRows):
			stats = nil
		case err != nil:
			return err
		default:
			st.FirstOccurredAt, st.LastOccurredAt = st.FirstOccurredAt.UTC(), st.LastOccurredAt.UTC()
			stats = &st
		}
		return nil
	})
	if err != nil {
		return nil, nil, fmt.Errorf("error reading the read model: %w", err)
	}
	return row, stats, nil
}

// StatsKey names one device_daily_stats row; Day is a UTC midnight.
type StatsKey struct {
	SourceKey, DeviceKey string
	Day                  time.Time
}

// KeyOf returns the key of the statistics row ev is counted in: its source,
// device and the UTC day of its occurredAt.
func KeyOf(ev *outbox.Event) StatsKey {
	return StatsKey{SourceKey: ev.SourceKey, DeviceKey: ev.DeviceKey, Day: ev.OccurredAt.UTC().Truncate(24 * time.Hour)}
}

// Compare orders keys by source, device and day: the order statistics rows
// are locked in.
func (k StatsKey) Compare(o StatsKey) int {
	return cmp.Or(strings.Compare(k.SourceKey, o.SourceKey), strings.Compare(k.DeviceKey, o.DeviceKey), k.Day.Compare(o.Day))
}

// Row is a row of the events table, without its payload; times are UTC.
type Row struct {
	EventID        string    `json:"eventId"`
	IdempotencyKey string    `json:"idempotencyKey"`
	SourceKey      string    `json:"sourceKey"`
	DeviceKey      string    `json:"deviceKey"`
	Type           string    `json:"type"`
	OccurredAt     time.Time `json:"occurredAt"`
	CreatedAt      time.Time `json:"createdAt"`
	// ProjectedAt is when the worker inserted it.
	ProjectedAt time.Time `json:"projectedAt"`
}

// rowColumns are the columns of a Row, in its fields' order.
const rowColumns = `event_id, idempotency_key, source_key, device_key, type, occurred_at, created_at, projected_at`

func scanRow(r pgx.Row) (Row, error) {
	var row Row
	err := r.Scan(&row.EventID, &row.IdempotencyKey, &row.SourceKey, &row.DeviceKey, &row.Type, &row.OccurredAt, &row.CreatedAt, &row.ProjectedAt)
	row.OccurredAt, row.CreatedAt, row.ProjectedAt = row.OccurredAt.UTC(), row.CreatedAt.UTC(), row.ProjectedAt.UTC()
	return row, err
}

// Stats is a row of device_daily_stats; times are UTC.
type Stats struct {
	StatsKey
	EventCount                      int64
	FirstOccurredAt, LastOccurredAt time.Time
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
// RecomputeStats), in one transaction: a re-published original is then
// counted once more only after its old count is gone. It returns how many
// rows it removed.
func (d *DB) Unproject(ctx context.Context, ids []string) (int64, error) {
	var n int64
	err := d.inTx(ctx, pgx.ReadWrite, func(tx pgx.Tx) error {
		var err error
		n, err = unproject(ctx, tx, ids)
		return err
	})
	return n, err
}

func unproject(ctx context.Context, tx pgx.Tx, ids []string) (int64, error) {
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
	return int64(len(keys)), recomputeStats(ctx, tx, keys)
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
// (count, first and last occurrence), deleting it when its day has no row,
// in one transaction. Rows projected concurrently are counted once: the
// statistics rows are locked first (see recomputeLockSQL).
func (d *DB) RecomputeStats(ctx context.Context, keys []StatsKey) error {
	return d.inTx(ctx, pgx.ReadWrite, func(tx pgx.Tx) error { return recomputeStats(ctx, tx, keys) })
}

func recomputeStats(ctx context.Context, tx pgx.Tx, keys []StatsKey) error {
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
func (d *DB) Projected(ctx context.Context, ids []string) (map[string]bool, error) {
	var found []string
	err := d.inTx(ctx, pgx.ReadOnly, func(tx pgx.Tx) error {
		rows, err := tx.Query(ctx, `SELECT event_id FROM events WHERE event_id = ANY($1::text[])`, ids)
		if err == nil {
			found, err = pgx.CollectRows(rows, pgx.RowTo[string])
		}
		return err
	})
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
func (d *DB) Rows(ctx context.Context, from, to *time.Time, after string, limit int) ([]Row, error) {
	out, err := d.queryRows(ctx, `SELECT `+rowColumns+` FROM events
		WHERE event_id > $1 AND occurred_at >= coalesce($2::timestamptz, '-infinity') AND occurred_at < coalesce($3::timestamptz, 'infinity')
		ORDER BY event_id LIMIT $4`, after, from, to, limit)
	if err != nil {
		return nil, fmt.Errorf("error reading rows: %w", err)
	}
	return out, nil
}

// CountRows returns how many rows have their occurred_at in [from, to) (a
// nil bound is open): what the rows phase of a verify will check.
func (d *DB) CountRows(ctx context.Context, from, to *time.Time) (int64, error) {
	var n int64
	err := d.inTx(ctx, pgx.ReadOnly, func(tx pgx.Tx) error {
		return tx.QueryRow(ctx, `SELECT count(*) FROM events
			WHERE occurred_at >= coalesce($1::timestamptz, '-infinity') AND occurred_at < coalesce($2::timestamptz, 'infinity')`,
			from, to).Scan(&n)
	})
	if err != nil {
		return 0, fmt.Errorf("error counting rows: %w", err)
	}
	return n, nil
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
func (d *DB) StatsDrift(ctx context.Context, from, to *time.Time, limit int) ([]StatsDrift, error) {
	var first, end *time.Time
	if from != nil {
		d := from.UTC().Truncate(24 * time.Hour)
		first = &d
	}
	if to != nil {
		d := to.UTC().Add(-time.Nanosecond).Truncate(24 * time.Hour).Add(24 * time.Hour)
		end = &d
	}
	out, err := d.queryStatsDrift(ctx, statsDriftSQL, first, end, limit)
	if err != nil {
		return nil, fmt.Errorf("error comparing statistics with rows: %w", err)
	}
	return out, nil
}

// queryStatsDrift runs sql, whose rows are (source, device, day, counted,
// rows), in a read-only transaction.
func (d *DB) queryStatsDrift(ctx context.Context, sql string, args ...any) ([]StatsDrift, error) {
	var out []StatsDrift
	err := d.inTx(ctx, pgx.ReadOnly, func(tx pgx.Tx) error {
		rows, err := tx.Query(ctx, sql, args...)
		if err == nil {
			out, err = pgx.CollectRows(rows, func(r pgx.CollectableRow) (StatsDrift, error) {
				var sd StatsDrift
				return sd, r.Scan(&sd.SourceKey, &sd.DeviceKey, &sd.Day, &sd.Counted, &sd.Rows)
			})
		}
		return err
	})
	return out, err
}

// queryRows runs sql, whose rows are Rows (rowColumns), in a read-only
// transaction.
func (d *DB) queryRows(ctx context.Context, sql string, args ...any) ([]Row, error) {
	var out []Row
	err := d.inTx(ctx, pgx.ReadOnly, func(tx pgx.Tx) error {
		rows, err := tx.Query(ctx, sql, args...)
		if err == nil {
			out, err = pgx.CollectRows(rows, func(r pgx.CollectableRow) (Row, error) { return scanRow(r) })
		}
		return err
	})
	return out, err
}
