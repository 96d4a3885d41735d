package testkit

import (
	"context"
	"fmt"
	"strings"

	"github.com/jackc/pgx/v5/pgxpool"
	"github.com/redis/go-redis/v9"

	"github.com/outboxd/outboxd/store"
)

// Verdict is what the checker of RELIABILITY.md counts for a set of
// accepted idempotency keys. Every field must be zero (and StatsMismatch
// empty) for the pipeline to be correct.
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
	return v.Lost == 0 && v.Duplicated == 0 && v.Unexpected == 0 && v.Pending == 0 &&
		v.Undispatched == 0 && v.Unsynced == 0 && len(v.StatsMismatch) == 0
}

func (v Verdict) String() string {
	return fmt.Sprintf("lost=%d duplicated=%d unexpected=%d pending=%d undispatched=%d unsynced=%d stats=[%s]",
		v.Lost, v.Duplicated, v.Unexpected, v.Pending, v.Undispatched, v.Unsynced, strings.Join(v.StatsMismatch, "; "))
}

// Check counts, from PostgreSQL, the store and Redis, what happened to the
// accepted keys. st may be nil to skip the store's checks (a store only the
// process under test can reach), rdb nil to skip the PEL check.
func Check(ctx context.Context, st store.Store, pool *pgxpool.Pool, rdb redis.UniversalClient, stream, group string, accepted []string) (Verdict, error) {
	var v Verdict
	want := make(map[string]bool, len(accepted))
	for _, k := range accepted {
		want[k] = true
	}
	rows, err := pool.Query(ctx, `SELECT idempotency_key, count(*) FROM events GROUP BY idempotency_key`)
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
	mism, err := pool.Query(ctx, `
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

	if st == nil {
		return v, checkPEL(ctx, &v, rdb, stream, group)
	}
	// One original per key in the store.
	c, err := st.Counts(ctx)
	if err != nil {
		return v, err
	}
	if int(c.Total) > len(want) {
		v.Duplicated += int(c.Total) - len(want)
	}
	v.Unsynced, v.Undispatched = c.Pending, c.Undispatched
	return v, checkPEL(ctx, &v, rdb, stream, group)
}

func checkPEL(ctx context.Context, v *Verdict, rdb redis.UniversalClient, stream, group string) error {
	if rdb != nil {
		p, err := rdb.XPending(ctx, stream, group).Result()
		if err != nil && !redis.HasErrorPrefix(err, "NOGROUP") {
			return err
		}
		if p != nil {
			v.Pending = p.Count
		}
	}
	return nil
}
