package reconciler_test

import (
	"context"
	"fmt"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/stretchr/testify/require"

	"github.com/outboxd/outboxd/internal/stream"
	"github.com/outboxd/outboxd/internal/testkit"
	"github.com/outboxd/outboxd/reconciler"
	"github.com/outboxd/outboxd/store"
	"github.com/outboxd/outboxd/worker"
)

// TestEveryReplicaSweepsWithoutTheLease: the service's default. Two
// replicas of reconcile --every (no whole-job lease) sweep the same
// originals at the same time, every 20 ms, while a worker projects what
// they publish: both sweep, each original is published exactly once (the
// per-document claim decides), and the checker of docs/reliability.md finds the
// read model exact: nothing lost, nothing counted twice, nothing left over.
func TestEveryReplicaSweepsWithoutTheLease(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	b := setup(t)
	pg := testkit.NewPostgres(t)
	const n = 300
	ids := b.writeAged(t, n) // stamped at t0 by the fake clock: old by the real one
	// The dispatcher relayed them, and Redis lost them: only the
	// reconciler brings them back.
	lease, err := b.st.AcquireLease(ctx, b.stream, "dispatcher", time.Now(), time.Hour)
	require.NoError(t, err)
	entries, err := b.st.Undispatched(ctx, b.stream, store.Partition{}, "", n)
	require.NoError(t, err)
	require.Len(t, entries, n)
	relayed := make([]string, len(entries))
	for i, e := range entries {
		relayed[i] = e.ID
	}
	require.NoError(t, b.st.MarkDispatched(ctx, lease, relayed, time.Now()))

	group := stream.GroupDefault
	workerMetrics := prometheus.NewRegistry()
	w, err := worker.New(b.st, b.rdb, pg.Pool, &worker.Config{
		Stream: b.stream, Group: group, Consumer: testkit.Name("c"), Block: 50 * time.Millisecond, Registerer: workerMetrics,
	}, testkit.Logger(t))
	require.NoError(t, err)
	require.NoError(t, w.Start(ctx))
	t.Cleanup(func() { require.NoError(t, w.Stop(context.Background())) })

	var rs []*reconciler.Reconciler
	for i := range 2 {
		cfg := b.config()
		// The real clock: RequeueAfter (30 minutes) is then longer than the
		// test, so a document published once is never a candidate again
		// unless the claims let two replicas take it.
		cfg.Every, cfg.Now, cfg.Registerer, cfg.Limit = 20*time.Millisecond, time.Now, nil, 50
		cfg.Owner = fmt.Sprintf("replica-%d", i)
		r := b.reconciler(t, cfg)
		require.NoError(t, r.Start(ctx))
		t.Cleanup(func() { require.NoError(t, r.Stop(context.Background())) })
		rs = append(rs, r)
	}

	testkit.RequireConverged(t, testkit.Pipeline{Store: b.st, Pool: pg.Pool, Redis: b.rdb, Stream: b.stream, Group: group},
		b.keys, 60*time.Second)
	for i, r := range rs {
		require.NotNil(t, r.LastReport(), "replica %d swept: no lease holds it back", i)
	}
	counts := map[string]int{}
	for _, id := range b.published(t) {
		counts[id]++
	}
	for _, id := range ids {
		require.Equal(t, 1, counts[id], "event %s published once", id)
		require.Equal(t, int64(1), b.event(t, id).RequeueCount)
	}
	require.Len(t, counts, n)

	// The worker timed each from its requeue (lastRequeuedAt) to syncedAt.
	count, sum := histogram(t, workerMetrics, "outboxd_reconciler_requeue_to_synced_seconds")
	require.Equal(t, uint64(n), count)
	require.Positive(t, sum)
	require.Less(t, sum/float64(n), 60.0, "mean requeue → syncedAt within the test's minute")
	at, err := store.LastSweep(ctx, b.st, b.stream)
	require.NoError(t, err)
	require.NotNil(t, at, "the sweeps are recorded for the status")
}
