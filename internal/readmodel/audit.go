package readmodel

import (
	"context"
	"errors"
	"fmt"
	"strings"
	"time"

	"github.com/jackc/pgx/v5"
)

// The lookups of the audit (package operator's Audit): bounded reads of the
// rows and statistics of a sample of originals, each one statement in a
// read-only transaction, and the record of the audit's last run.

// RowsByID returns the rows of those of ids that have one.
func (d *DB) RowsByID(ctx context.Context, ids []string) ([]Row, error) {
	out, err := d.queryRows(ctx, `SELECT `+rowColumns+` FROM events WHERE event_id = ANY($1::text[])`, ids)
	if err != nil {
		return nil, fmt.Errorf("error reading %d rows: %w", len(ids), err)
	}
	return out, nil
}

// keyArrays splits keys into the arrays the statements unnest.
func keyArrays(keys []StatsKey) (sources, devices []string, days []time.Time) {
	for _, k := range keys {
		sources, devices, days = append(sources, k.SourceKey), append(devices, k.DeviceKey), append(days, k.Day)
	}
	return sources, devices, days
}

// RowsOfDays returns at most limit rows counted in the statistics rows of
// keys (their source, device and UTC day), in event id order.
func (d *DB) RowsOfDays(ctx context.Context, keys []StatsKey, limit int) ([]Row, error) {
	sources, devices, days := keyArrays(keys)
	out, err := d.queryRows(ctx, `SELECT `+prefixed("e.", rowColumns)+`
		FROM unnest($1::text[], $2::text[], $3::date[]) AS k(source_key, device_key, day)
		JOIN events e ON e.source_key = k.source_key AND e.device_key = k.device_key
			AND e.occurred_at >= k.day::timestamp AT TIME ZONE 'UTC' AND e.occurred_at < (k.day + 1)::timestamp AT TIME ZONE 'UTC'
		ORDER BY e.event_id LIMIT $4`, sources, devices, days, limit)
	if err != nil {
		return nil, fmt.Errorf("error reading the rows of %d days: %w", len(keys), err)
	}
	return out, nil
}

// prefixed returns the comma-separated columns, each with prefix.
func prefixed(prefix, columns string) string {
	return prefix + strings.ReplaceAll(columns, ", ", ", "+prefix)
}

// statsOfSQL compares the statistics rows of the keys with their rows (the
// count, first and last occurrence), in one statement.
const statsOfSQL = `
WITH k AS (
	SELECT DISTINCT * FROM unnest($1::text[], $2::text[], $3::date[]) AS k(source_key, device_key, day)
), r AS (
	SELECT k.source_key, k.device_key, k.day, count(e.event_id) AS n, min(e.occurred_at) AS first, max(e.occurred_at) AS last
	FROM k LEFT JOIN events e ON e.source_key = k.source_key AND e.device_key = k.device_key
		AND e.occurred_at >= k.day::timestamp AT TIME ZONE 'UTC' AND e.occurred_at < (k.day + 1)::timestamp AT TIME ZONE 'UTC'
	GROUP BY 1, 2, 3
)
SELECT r.source_key, r.device_key, r.day, coalesce(s.event_count, 0), r.n
FROM r LEFT JOIN device_daily_stats s ON s.source_key = r.source_key AND s.device_key = r.device_key AND s.day = r.day
WHERE s.event_count IS DISTINCT FROM r.n AND NOT (s.event_count IS NULL AND r.n = 0)
	OR s.first_occurred_at IS DISTINCT FROM r.first AND r.n > 0
	OR s.last_occurred_at IS DISTINCT FROM r.last AND r.n > 0
ORDER BY 1, 2, 3`

// StatsDriftOf returns those statistics rows of keys that differ from their
// rows (count, first or last occurrence; a missing row where there are
// rows, a row where there are none), in key order.
func (d *DB) StatsDriftOf(ctx context.Context, keys []StatsKey) ([]StatsDrift, error) {
	sources, devices, days := keyArrays(keys)
	out, err := d.queryStatsDrift(ctx, statsOfSQL, sources, devices, days)
	if err != nil {
		return nil, fmt.Errorf("error comparing %d statistics rows with their rows: %w", len(keys), err)
	}
	return out, nil
}

// SaveAudit records report (JSON) as the last audit run of stream, at
// ranAt.
func (d *DB) SaveAudit(ctx context.Context, stream string, ranAt time.Time, report []byte) error {
	err := d.inTx(ctx, pgx.ReadWrite, func(tx pgx.Tx) error {
		_, err := tx.Exec(ctx, `INSERT INTO audit_runs (stream, ran_at, report) VALUES ($1, $2, $3)
			ON CONFLICT (stream) DO UPDATE SET ran_at = excluded.ran_at, report = excluded.report`, stream, ranAt, report)
		return err
	})
	if err != nil {
		return fmt.Errorf("error recording the audit run: %w", err)
	}
	return nil
}

// LastAudit returns the report (JSON) of the last audit run of stream, or
// nil when none was recorded.
func (d *DB) LastAudit(ctx context.Context, stream string) ([]byte, error) {
	var report []byte
	err := d.inTx(ctx, pgx.ReadOnly, func(tx pgx.Tx) error {
		return tx.QueryRow(ctx, `SELECT report FROM audit_runs WHERE stream = $1`, stream).Scan(&report)
	})
	if errors.Is(err, pgx.ErrNoRows) {
		return nil, nil
	}
	if err != nil {
		return nil, fmt.Errorf("error reading the last audit run: %w", err)
	}
	return report, nil
}
