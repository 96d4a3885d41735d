package testkit

import (
	"context"

	"github.com/jackc/pgx/v5/pgxpool"
	"github.com/redis/go-redis/v9"

	"github.com/outboxd/outboxd/internal/checker"
	"github.com/outboxd/outboxd/store"
	streampkg "github.com/outboxd/outboxd/stream"
)

// Verdict is the checker's count (package internal/checker).
type Verdict = checker.Verdict

// Check counts, from PostgreSQL, the store and Redis, what happened to the
// accepted keys (checker.Check). st may be nil to skip the store's checks
// (a store only the process under test can reach), rdb nil to skip the PEL
// check.
func Check(ctx context.Context, st store.Store, pool *pgxpool.Pool, rdb redis.UniversalClient, stream, group string, accepted []string) (Verdict, error) {
	in := checker.Input{Store: st, Pool: pool, Accepted: accepted}
	if rdb != nil {
		rc, err := streampkg.NewClient(rdb, nil)
		if err != nil {
			return Verdict{}, err
		}
		keys := streampkg.NewKeys(stream, group)
		in.PendingEntries = func(ctx context.Context) (int64, error) { return rc.GroupPending(ctx, keys) }
	}
	return checker.Check(ctx, in)
}

// PendingEntries returns the count of the pending entries of group on
// stream; 0 when the group does not exist.
func PendingEntries(ctx context.Context, rdb redis.UniversalClient, stream, group string) (int64, error) {
	p, err := rdb.XPending(ctx, stream, group).Result()
	if err != nil && !redis.HasErrorPrefix(err, "NOGROUP") {
		return 0, err
	}
	if p == nil {
		return 0, nil
	}
	return p.Count, nil
}
