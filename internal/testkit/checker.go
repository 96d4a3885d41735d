package testkit

import (
	"context"

	"github.com/jackc/pgx/v5/pgxpool"
	"github.com/redis/go-redis/v9"

	"github.com/outboxd/outboxd/internal/checker"
	streampkg "github.com/outboxd/outboxd/internal/stream"
	"github.com/outboxd/outboxd/store"
)

// Verdict is the checker's count (package internal/checker).
type Verdict = checker.Verdict

// Check counts, from PostgreSQL, the store and Redis, what happened to the
// accepted keys (checker.Check). st may be nil to skip the store's checks
// (a store only the process under test can reach), rdb nil to skip the PEL
// check. The stream is unpartitioned; Pipeline.Check reads a partitioned one.
func Check(ctx context.Context, st store.Store, pool *pgxpool.Pool, rdb redis.UniversalClient, stream, group string, accepted []string) (Verdict, error) {
	return Pipeline{Store: st, Pool: pool, Redis: rdb, Stream: stream, Group: group}.Check(ctx, accepted)
}

// Check counts what happened to the accepted keys in p (checker.Check),
// the pending entries of every partition of its stream included.
func (p Pipeline) Check(ctx context.Context, accepted []string) (Verdict, error) {
	in := checker.Input{Store: p.Store, Pool: p.Pool, Accepted: accepted}
	if p.Redis != nil {
		rc, err := streampkg.NewClient(p.Redis, nil)
		if err != nil {
			return Verdict{}, err
		}
		keys := streampkg.NewKeys(p.Stream, p.Group).Split(p.Partitions)
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
