package reconciler_test

import (
	"context"
	"sync"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/redis/go-redis/v9"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/outboxd/outboxd/internal/fault"
	"github.com/outboxd/outboxd/internal/stream"
	"github.com/outboxd/outboxd/internal/testkit"
	"github.com/outboxd/outboxd/outbox"
	"github.com/outboxd/outboxd/reconciler"
	"github.com/outboxd/outboxd/store"
	"github.com/outboxd/outboxd/worker"
)

// TestReconcilerFaults holds the rows of the fault matrix of docs/reliability.md
// that the reconciler answers for, through the whole path: the originals'
// outbox entries were relayed but their stream entries are gone (lost or
// trimmed), a worker consumes what the reconciler re-publishes, and each
// test ends with the checker.
func TestReconcilerFaults(t *testing.T) {
	t.Parallel()
	ctx := context.Background()

	// Row "two reconcilers at once": each document claimed by one
	// (conditional update on lastRequeuedAt); effects exact.
	t.Run("TwoReconcilersAtOnce", func(t *testing.T) {
		t.Parallel()
		b := setup(t)
		const n = 40
		ids := b.writeAged(t, n)
		b.relayedAndLost(t)
		p := b.startWorker(t, b.rdb)
		var wg sync.WaitGroup
		reports := make([]reconciler.Report, 2)
		for i := range reports {
			r := b.reconciler(t, nil)
			wg.Go(func() {
				rep, err := r.Sweep(ctx)
				assert.NoError(t, err)
				reports[i] = rep
			})
		}
		wg.Wait()
		require.False(t, t.Failed())
		require.Equal(t, n, reports[0].Published+reports[1].Published)
		require.Len(t, b.published(t), n, "each document published once")
		for _, id := range ids {
			require.Equal(t, int64(1), b.event(t, id).RequeueCount)
		}
		b.requireConverged(t, p)
	})

	// Row "reconciler publish fails after claim": the claim is rolled back
	// only while lastRequeuedAt still holds this run's stamp; the sweep
	// reports the failure (the reconcile job exits 1: cmd/outboxd
	// TestReconcileExitsOneAfterFailedPublish); the next sweep publishes.
	t.Run("PublishFailsAfterClaim", func(t *testing.T) {
		t.Parallel()
		b := setup(t)
		srv := testkit.NewRedisServer(t)
		rdb := srv.Client()
		ids := b.writeAged(t, 3)
		b.relayedAndLost(t)
		cfg := b.config()
		// While the publish of ids[0] fails, another run claims it anew:
		// that newer claim must survive this run's rollback.
		reconciler.SetBeforeRollback(cfg, func(id string) {
			if id == ids[0] {
				b.claimAt(t, id, b.clock.Now().Add(time.Millisecond))
			}
		})
		r, err := reconciler.New(b.st, rdb, cfg, testkit.Logger(t))
		require.NoError(t, err)
		srv.Stop()
		rep, err := r.Sweep(ctx)
		require.NoError(t, err)
		require.True(t, rep.Failed())
		require.Equal(t, 3, rep.PublishFailed)
		require.Equal(t, 2, rep.RolledBack)
		require.Equal(t, 1, rep.RollbackSkipped)
		require.NotNil(t, b.event(t, ids[0]).LastRequeuedAt, "the newer claim stays")
		for _, id := range ids[1:] {
			require.Nil(t, b.event(t, id).LastRequeuedAt, "rolled back")
		}

		srv.Start()
		p := b.startWorker(t, rdb)
		rep, err = r.Sweep(ctx)
		require.NoError(t, err)
		require.False(t, rep.Failed())
		require.Equal(t, 2, rep.Published, "the rolled-back ones at once")
		require.Eventually(t, func() bool {
			c, err := b.st.Counts(ctx)
			require.NoError(t, err)
			return c.Pending == 1
		}, 20*time.Second, 10*time.Millisecond, "the worker syncs them")
		b.clock.Advance(requeueAfter + time.Second)
		rep, err = r.Sweep(ctx)
		require.NoError(t, err)
		require.Equal(t, 1, rep.Published, "the one claimed anew after RequeueAfter")
		b.requireConverged(t, p)
	})

	// The reconciler crashes after a claim, before the publish: the claim
	// holds until RequeueAfter, then the document is published.
	t.Run("CrashAfterClaim", func(t *testing.T) {
		t.Parallel()
		b := setup(t)
		b.writeAged(t, 2)
		b.relayedAndLost(t)
		p := b.startWorker(t, b.rdb)
		b.faults.Arm(reconciler.FaultAfterClaim, 1)
		_, err := b.reconciler(t, nil).Sweep(ctx)
		require.ErrorIs(t, err, fault.ErrInjected)
		r := b.reconciler(t, nil)
		_, err = r.Sweep(ctx)
		require.NoError(t, err)
		b.clock.Advance(requeueAfter + time.Second)
		_, err = r.Sweep(ctx)
		require.NoError(t, err)
		b.requireConverged(t, p)
	})

	// Row "stream trimmed past unacknowledged entries": the worker counts
	// them (outboxd_worker_trimmed_total, dead letters with reason
	// trimmed) and leaves their originals pending; the reconciler
	// re-publishes them.
	t.Run("StreamTrimmed", func(t *testing.T) {
		t.Parallel()
		b := setup(t)
		ids := b.writeAged(t, 5)
		b.relay(t)
		// A consumer that died took three entries; then the stream was
		// trimmed below them.
		require.NoError(t, b.rdb.XGroupCreateMkStream(ctx, b.stream, stream.GroupDefault, "0").Err())
		_, err := b.rdb.XReadGroup(ctx, &redis.XReadGroupArgs{Group: stream.GroupDefault, Consumer: "dead",
			Streams: []string{b.stream, ">"}, Count: 3, Block: -1}).Result()
		require.NoError(t, err)
		require.NoError(t, b.rdb.XTrimMaxLen(ctx, b.stream, 2).Err())

		reg := prometheus.NewRegistry()
		p := b.startWorkerWith(t, b.rdb, func(c *worker.Config) { c.Registerer, c.ClaimIdle = reg, 100*time.Millisecond })
		require.Eventually(t, func() bool {
			c, err := b.st.Counts(ctx)
			require.NoError(t, err)
			return testkit.Metric(t, reg, "outboxd_worker_trimmed_total") == 3 && c.Pending == 3
		}, 20*time.Second, 10*time.Millisecond, "the trimmed entries are counted, the others synced")
		require.Equal(t, int64(3), b.rdb.XLen(ctx, stream.NewKeys(b.stream, "").DLQ()).Val())
		for _, id := range ids[:3] {
			require.Nil(t, b.event(t, id).SyncFailure, "not parked: the reconciler's")
		}

		rep, err := b.reconciler(t, nil).Sweep(ctx)
		require.NoError(t, err)
		require.Equal(t, 3, rep.Published, "the trimmed ones, and only those")
		b.requireConverged(t, p)
	})
}

// relay does the dispatcher's job for every undispatched entry: XADD its
// message to the stream, mark it dispatched.
func (b *testBundle) relay(t *testing.T) {
	t.Helper()
	ctx := context.Background()
	entries, err := b.st.Undispatched(ctx, b.stream, store.Partition{}, "", 10_000)
	require.NoError(t, err)
	for _, e := range entries {
		require.NoError(t, b.rdb.XAdd(ctx, &redis.XAddArgs{Stream: b.stream, Values: map[string]any{outbox.PayloadField: e.Message}}).Err())
	}
	b.markDispatched(t, entries)
}

// relayedAndLost marks every undispatched entry dispatched without adding
// it to the stream: the dispatcher relayed them, then Redis lost them.
func (b *testBundle) relayedAndLost(t *testing.T) {
	t.Helper()
	entries, err := b.st.Undispatched(context.Background(), b.stream, store.Partition{}, "", 10_000)
	require.NoError(t, err)
	b.markDispatched(t, entries)
}

func (b *testBundle) markDispatched(t *testing.T, entries []outbox.Entry) {
	t.Helper()
	ctx := context.Background()
	lease, err := b.st.AcquireLease(ctx, b.stream, "test", time.Now(), time.Hour)
	require.NoError(t, err)
	ids := make([]string, len(entries))
	for i, e := range entries {
		ids[i] = e.ID
	}
	require.NoError(t, b.st.MarkDispatched(ctx, lease, ids, b.clock.Now()))
}

// startWorker starts a worker on the bundle's stream, reading through rdb,
// with a PostgreSQL database of its own, and returns what the checker
// reads.
func (b *testBundle) startWorker(t *testing.T, rdb redis.UniversalClient) testkit.Pipeline {
	t.Helper()
	return b.startWorkerWith(t, rdb, nil)
}

func (b *testBundle) startWorkerWith(t *testing.T, rdb redis.UniversalClient, adjust func(*worker.Config)) testkit.Pipeline {
	t.Helper()
	pg := testkit.NewPostgres(t)
	cfg := &worker.Config{
		Stream: b.stream, Group: stream.GroupDefault, Consumer: testkit.Name("c"),
		Block: 50 * time.Millisecond, BackoffMax: 200 * time.Millisecond, BreakerTimeout: 200 * time.Millisecond,
	}
	if adjust != nil {
		adjust(cfg)
	}
	w, err := worker.New(b.st, rdb, pg.Pool, cfg, testkit.Logger(t))
	require.NoError(t, err)
	require.NoError(t, w.Start(context.Background()))
	t.Cleanup(func() { require.NoError(t, w.Stop(context.Background())) })
	return testkit.Pipeline{Store: b.st, Pool: pg.Pool, Redis: rdb, Stream: b.stream, Group: stream.GroupDefault}
}

// requireConverged ends a fault test with the checker over every original
// the bundle wrote.
func (b *testBundle) requireConverged(t *testing.T, p testkit.Pipeline) {
	t.Helper()
	testkit.RequireConverged(t, p, b.keys, 30*time.Second)
}
