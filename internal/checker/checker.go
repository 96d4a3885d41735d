// Package checker is the checker of docs/reliability.md, the last step of every
// fault test and of the soak: for the set of idempotency keys that ingest
// acknowledged, it counts from PostgreSQL, the store and Redis what was
// lost, duplicated or unexpected, whether the statistics equal the rows,
// and what is left over. The tests reach it through internal/testkit; the
// soak (cmd/outboxd-bench soak) calls it directly.
package checker

import (
	"context"
	"fmt"
	"strings"

	"github.com/jackc/pgx/v5/pgxpool"

	"github.com/outboxd/outboxd/store"
)

// Verdict is what the checker counts for a set of accepted idempotency
// keys. Every field must be zero (and StatsMismatch empty) for the pipeline
// to be correct.
type Verdict struct {
	Lost       int // accepted, no row in PostgreSQL
	Duplicated int // more than one row or more than one original per key
	Unexpected int // a row nobody accepted
	// Leftovers: work not finished.
	Pending      int64 // PEL entries of the group
	Undispatched int64 // outbox entries not relayed
	Unsynced     int64 // originals with syncedAt == null and no syncFailure
	// StatsMismatch describes device-day counts that differ from the rows.
	StatsMismatch []string
}

// OK reports whether nothing is lost, duplicated, unexpected or left over.
func (v Verdict) OK() bool {
	return v.Violations() == 0 && v.Pending == 0 && v.Undispatched == 0 && v.Unsynced == 0
}

// Violations counts the broken promises (lost, duplicated, unexpected,
// statistics rows that differ), leftovers aside: work still in flight is
// not a violation until the pipeline was given time to finish it.
func (v Verdict) Violations() int {
	return v.Lost + v.Duplicated + v.Unexpected + len(v.StatsMismatch)
}

func (v Verdict) String() string {
	return fmt.Sprintf("lost=%d duplicated=%d unexpected=%d pending=%d undispatched=%d unsynced=%d stats=[%s]",
		v.Lost, v.Duplicated, v.Unexpected, v.Pending, v.Undispatched, v.Unsynced, strings.Join(v.StatsMismatch, "; "))
}

// Input is what Check reads.
type Input struct {
	// Store is the system of record; nil skips the store's checks (a store
	// only the process under test can reach).
	Store store.Store
	// Pool is the read model. Required.
	Pool *pgxpool.Pool
	// PendingEntries returns the consumer group's pending entries (0 when
	// the group does not exist); nil skips the check.
	PendingEntries func(ctx context.Context) (int64, error)
	// Accepted are the idempotency keys ingest answered with 2xx.
	Accepted []string
}

// Check counts what happened to the accepted keys.
func Check(ctx context.Context, in Input) (Verdict, error) {
	var v Verdict
	want := make(map[string]bool, len(in.Accepted))
	for _, k := range in.Accepted {
		want[k] = true
	}
	rows, err := in.Pool.Query(ctx, `SELECT idempotency_key, count(*) FROM events GROUP BY idempotency_key`)
	if err != nil {
		return v, err
	}
	seen := map[string]bool{}
	for rows.Next() {
		var k string
		var n int
		if err := rows.Scan(&k, &n); err != nil {
			return v, err
		}
		seen[k] = true
		if n > 1 {
			v.Duplicated++
		}
		if !want[k] {
			v.Unexpected++
		}
	}
	if err := rows.Err(); err != nil {
		return v, err
	}
	for k := range want {
		if !seen[k] {
			v.Lost++
		}
	}

	// Stats must equal the rows, per device-day and in total.
	mism, err := in.Pool.Query(ctx, `
		WITH r AS (SELECT source_key, device_key, (occurred_at AT TIME ZONE 'UTC')::date AS day, count(*) AS n
		           FROM events GROUP BY 1, 2, 3)
		SELECT coalesce(r.source_key, s.source_key), coalesce(r.device_key, s.device_key), coalesce(r.day, s.day),
		       coalesce(r.n, 0), coalesce(s.event_count, 0)
		FROM r FULL JOIN device_daily_stats s USING (source_key, device_key, day)
		WHERE coalesce(r.n, 0) <> coalesce(s.event_count, 0)`)
	if err != nil {
		return v, err
	}
	for mism.Next() {
		var src, dev string
		var day any
		var rowsN, stats int64
		if err := mism.Scan(&src, &dev, &day, &rowsN, &stats); err != nil {
			return v, err
		}
		v.StatsMismatch = append(v.StatsMismatch, fmt.Sprintf("%s/%s/%v rows=%d stats=%d", src, dev, day, rowsN, stats))
	}
	if err := mism.Err(); err != nil {
		return v, err
	}

	if in.Store != nil {
		// One original per key in the store.
		c, err := in.Store.Counts(store.WithCurrentCounts(ctx)) // a verdict: never a cached or a secondary's figure
		if err != nil {
			return v, err
		}
		if int(c.Total) > len(want) {
			v.Duplicated += int(c.Total) - len(want)
		}
		v.Unsynced, v.Undispatched = c.Pending, c.Undispatched
	}
	if in.PendingEntries != nil {
		n, err := in.PendingEntries(ctx)
		if err != nil {
			return v, err
		}
		v.Pending = n
	}
	return v, nil
}
