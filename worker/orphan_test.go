package worker_test

import (
	"context"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/redis/go-redis/v9"
	"github.com/stretchr/testify/require"

	"github.com/outboxd/outboxd/internal/testkit"
	"github.com/outboxd/outboxd/outbox"
)

// TestWorkerRecoversEntriesItsReadLost: Redis ran an XREADGROUP of this
// worker's consumer whose reply the worker never got (a read that timed
// out while Redis was stopped, then ran when it resumed): the entries are
// pending to the consumer, unknown to the worker. The worker's touch keeps
// every entry of its consumer from going idle, so no XAUTOCLAIM would take
// them while it lives; it must find them in its own pending entries and
// project them. (Found by the soak, seed 209493633: two entries pending for
// three minutes after the faults stopped.)
func TestWorkerRecoversEntriesItsReadLost(t *testing.T) {
	t.Parallel()
	b := setup(t)
	ctx := context.Background()
	reg := prometheus.NewRegistry()
	cfg := b.config("c1")
	cfg.ClaimIdle = 400 * time.Millisecond
	cfg.Registerer = reg
	b.start(t, cfg)

	b.publish(t, b.write(t, "dev", 2)...)
	b.waitConverged(t)

	// The lost read: the entries are added and read as c1 in one
	// transaction, so the worker's own blocked read is not served them.
	orphans := b.write(t, "dev", 3)
	_, err := b.rdb.TxPipelined(ctx, func(p redis.Pipeliner) error {
		for _, ev := range orphans {
			p.XAdd(ctx, &redis.XAddArgs{Stream: b.stream, Values: ev.Message(outbox.OriginOutbox).Values()})
		}
		p.XReadGroup(ctx, &redis.XReadGroupArgs{Group: b.group, Consumer: "c1", Streams: []string{b.stream, ">"}, Count: 10, Block: -1})
		return nil
	})
	require.NoError(t, err)
	require.Equal(t, int64(3), b.pending(t), "the orphans are pending to c1")

	b.waitConverged(t)
	require.Equal(t, 3.0, testkit.Metric(t, reg, "outboxd_worker_recovered_total"))
	require.Zero(t, testkit.Metric(t, reg, "outboxd_worker_claimed_total"), "recovered by the owner, not taken over")
}
