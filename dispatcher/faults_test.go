package dispatcher_test

import (
	"context"
	"database/sql"
	"errors"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/stretchr/testify/require"
	"go.mongodb.org/mongo-driver/bson"
	"go.mongodb.org/mongo-driver/mongo"

	"github.com/outboxd/outboxd/internal/mongoseam"
	"github.com/outboxd/outboxd/internal/testkit"
	"github.com/outboxd/outboxd/store"
	"github.com/outboxd/outboxd/store/mongostore"
	"github.com/outboxd/outboxd/store/sqlitestore"
)

// smallOplog makes lungo's oplog roll over after 50 entries.
var smallOplog = &mongostore.Options{OplogSize: 50}

func TestDispatcherFaults(t *testing.T) {
	t.Parallel()
	ctx := context.Background()

	t.Run("HistoryLostWhileStoppedCatchesUp", func(t *testing.T) {
		t.Parallel()
		b := setup(t, &setupOpts{kind: kindMongo, mongo: smallOplog})
		if testkit.RealMongo() {
			t.Skip("skipped: a test cannot roll a replica set's oplog over; CorruptTokenCountsAsLost covers the replica set")
		}
		reg := prometheus.NewRegistry()
		cfg := b.config()
		cfg.Registerer = reg
		d1 := b.start(cfg)
		first := b.write(5, 5)
		b.waitRelayed(first, 10*time.Second)
		require.Eventually(t, func() bool { return b.state().Position != nil }, 5*time.Second, 5*time.Millisecond)
		stop(t, d1)
		token := b.state().Position

		second := b.write(60, 10) // 120 oplog entries while stopped
		b.waitTokenForgotten(token)

		cfg2 := b.config()
		cfg2.Registerer = reg
		d2 := b.start(cfg2)
		all := append(first, second...)
		b.waitRelayed(all, 20*time.Second)
		require.Equal(t, all, b.streamIDs(), "all relayed once, in commit order")
		require.Equal(t, int64(1), d2.Stats().HistoryLost)
		require.Equal(t, 1.0, counterValue(t, reg, "outboxd_dispatcher_history_lost_total"))
		b.requireConverged(b.startWorker())
	})

	t.Run("HistoryLostWhileStreaming", func(t *testing.T) {
		t.Parallel()
		srv := testkit.NewRedisServer(t)
		b := setup(t, &setupOpts{kind: kindMongo, mongo: smallOplog, redis: srv.Client()})
		if testkit.RealMongo() {
			t.Skip("skipped: a test cannot roll a replica set's oplog over; CorruptTokenCountsAsLost covers the replica set")
		}
		d := b.start(b.config())
		p := b.startWorker()
		b.write(2, 2)
		b.requireConverged(p) // consumed before Redis restarts empty

		srv.Stop()
		stuck := b.write(1, 1) // read from the stream, then stuck in XADD back-off
		require.Eventually(t, func() bool { return d.Stats().RedisRetries > 0 }, 10*time.Second, 5*time.Millisecond)
		// A probe learns the token of the next entry: the dispatcher's
		// stream position is before it.
		probe, err := mongoseam.Database(b.mongo).Collection(mongostore.OutboxCollection).Watch(ctx, mongo.Pipeline{})
		require.NoError(t, err)
		later := b.write(1, 1)
		require.True(t, probe.TryNext(ctx))
		token := probe.ResumeToken()
		require.NoError(t, probe.Close(ctx))
		later = append(later, b.write(60, 10)...)
		b.waitTokenForgotten(store.Position(token))

		srv.Start() // empty
		all := append(stuck, later...)
		b.waitRelayed(all, 20*time.Second)
		require.Equal(t, all, b.streamIDs())
		require.Equal(t, int64(1), d.Stats().HistoryLost)
		b.requireConverged(p)
	})

	t.Run("RedisDownHoldsCheckpointAndResumes", func(t *testing.T) {
		t.Parallel()
		srv := testkit.NewRedisServer(t)
		b := setup(t, &setupOpts{redis: srv.Client()})
		reg := prometheus.NewRegistry()
		cfg := b.config()
		cfg.Registerer = reg
		d := b.start(cfg)
		p := b.startWorker()
		b.write(5, 5)
		b.requireConverged(p) // consumed before Redis restarts empty
		require.Equal(t, breakerClosed, testkit.Metric(t, reg, "outboxd_dispatcher_breaker_state"))

		srv.Stop()
		second := b.write(20, 5) // ingest does not need Redis
		// Nor does the HTTP API: a POST is answered 201 during the outage.
		second = append(second, b.postEvent())
		require.Eventually(t, func() bool { return d.Stats().RedisRetries >= 1 }, 10*time.Second, 5*time.Millisecond)
		held := b.state()
		require.Eventually(t, func() bool { return d.Stats().RedisRetries >= 4 }, 10*time.Second, 5*time.Millisecond,
			"XADD is retried with back-off")
		require.Equal(t, int64(len(second)), b.undispatched(), "nothing marked dispatched without XADD")
		st := b.state()
		require.Equal(t, held.Position, st.Position, "the checkpoint is held")
		require.Equal(t, held.CheckpointAt, st.CheckpointAt, "the checkpoint is held")
		require.True(t, d.Stats().Leader, "the lease is kept during the outage")
		require.Eventually(t, func() bool { return testkit.Metric(t, reg, "outboxd_dispatcher_breaker_state") == breakerOpen },
			10*time.Second, 5*time.Millisecond, "the circuit around Redis opens")

		srv.Start() // empty, like a Redis without persistence
		b.waitRelayed(second, 20*time.Second)
		require.Equal(t, second, b.streamIDs())
		require.GreaterOrEqual(t, counterValue(t, reg, "outboxd_dispatcher_redis_retries_total"), 4.0)
		require.Equal(t, breakerClosed, testkit.Metric(t, reg, "outboxd_dispatcher_breaker_state"), "the probe closed it")
		b.requireConverged(p)
	})

	t.Run("DispatchedEntriesExpire", func(t *testing.T) {
		t.Parallel()
		for _, kind := range kinds {
			t.Run(kind, func(t *testing.T) {
				t.Parallel()
				b := setup(t, &setupOpts{kind: kind})
				cfg := b.config()
				cfg.OutboxRetention, cfg.SweepInterval = 200*time.Millisecond, 50*time.Millisecond
				b.start(cfg)
				ids := b.write(3, 3)
				b.waitRelayed(ids, 10*time.Second)
				require.Eventually(t, func() bool {
					entries := 0
					switch st := b.st.(type) {
					case *mongostore.Store:
						n, err := mongoseam.Database(st).Collection(mongostore.OutboxCollection).CountDocuments(ctx, bson.M{})
						require.NoError(t, err)
						entries = int(n)
					default:
						require.NoError(t, sqliteDB(t, b).QueryRowContext(ctx, `SELECT count(*) FROM outbox`).Scan(&entries))
					}
					return entries == 0
				}, 10*time.Second, 20*time.Millisecond, "dispatched entries are deleted after the retention")
				c, err := b.st.Counts(ctx)
				require.NoError(t, err)
				require.Equal(t, int64(3), c.Total, "the originals stay")
			})
		}
	})

	t.Run("FeedInvalidatedReopensAndCatchesUp", func(t *testing.T) {
		t.Parallel()
		b := setup(t, &setupOpts{kind: kindMongo})
		reg := prometheus.NewRegistry()
		cfg := b.config()
		cfg.Registerer = reg
		d := b.start(cfg)
		first := b.write(3, 3)
		b.waitRelayed(first, 10*time.Second)
		// Dropping the outbox (or renaming it, or restoring it with
		// mongorestore --drop) ends the change stream with invalidate.
		require.NoError(t, mongoseam.Database(b.mongo).Collection(mongostore.OutboxCollection).Drop(ctx))
		second := b.write(2, 2)
		require.Eventually(t, func() bool { return b.containsAll(second) }, 10*time.Second, 10*time.Millisecond,
			"entries written after the drop are relayed")
		require.Eventually(t, func() bool { return d.Stats().Invalidated >= 1 }, 10*time.Second, 10*time.Millisecond)
		require.Equal(t, float64(d.Stats().Invalidated), counterValue(t, reg, "outboxd_dispatcher_feed_invalidated_total"))
		require.True(t, d.Stats().Leader, "the dispatcher keeps leading")
		third := b.write(2, 2)
		b.waitRelayed(third, 10*time.Second)
		b.requireConverged(b.startWorker())
	})
}

// Breaker states as exported in outboxd_dispatcher_breaker_state.
const (
	breakerClosed = 0.0
	breakerOpen   = 2.0
)

// waitTokenForgotten writes to a scratch collection until lungo's oplog no
// longer holds token (lungo drops entries in whole seconds).
func (b *testBundle) waitTokenForgotten(token store.Position) {
	b.t.Helper()
	ctx := context.Background()
	require.Eventually(b.t, func() bool {
		_, err := mongoseam.Database(b.mongo).Collection("scratch").InsertOne(ctx, bson.M{})
		require.NoError(b.t, err)
		f, err := b.st.OpenFeed(ctx, b.stream, token, store.FeedOptions{})
		if err == nil {
			_, err = f.Next(ctx, 1, 0)
			_ = f.Close(ctx)
		}
		return errors.Is(err, store.ErrPositionLost)
	}, 10*time.Second, 50*time.Millisecond, "the oplog did not roll over")
}

func sqliteDB(t *testing.T, b *testBundle) *sql.DB {
	t.Helper()
	st, ok := b.st.(*sqlitestore.Store)
	require.True(t, ok)
	return st.DB()
}
