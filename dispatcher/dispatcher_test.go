package dispatcher_test

import (
	"context"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/stretchr/testify/require"
	"go.mongodb.org/mongo-driver/bson"

	"github.com/outboxd/outboxd/dispatcher"
	"github.com/outboxd/outboxd/internal/fault"
	"github.com/outboxd/outboxd/internal/mongoseam"
	"github.com/outboxd/outboxd/internal/startstop"
	"github.com/outboxd/outboxd/internal/testkit"
	"github.com/outboxd/outboxd/outbox"
	"github.com/outboxd/outboxd/store/mongostore"
	"github.com/outboxd/outboxd/store/sqlitestore"
)

// TestDispatcher runs on both stores: the relay algorithm is written once,
// above the port, and must hold on either feed.
func TestDispatcher(t *testing.T) {
	t.Parallel()
	for _, kind := range kinds {
		t.Run(kind, func(t *testing.T) {
			t.Parallel()
			testDispatcher(t, kind)
		})
	}
}

func testDispatcher(t *testing.T, kind string) {
	ctx := context.Background()
	setup := func(t *testing.T, o *setupOpts) *testBundle {
		if o == nil {
			o = &setupOpts{}
		}
		o.kind = kind
		return setup(t, o)
	}

	t.Run("RelaysEveryEntryInCommitOrder", func(t *testing.T) {
		t.Parallel()
		b := setup(t, nil)
		before := b.write(30, 7) // caught up at start
		cfg := b.config()
		cfg.BatchSize = 16
		d := b.start(cfg)
		var after []string
		for range 40 { // a single writer while the dispatcher streams
			after = append(after, b.write(3, 3)...)
		}
		all := append(before, after...)
		b.waitRelayed(all, 30*time.Second)
		require.Equal(t, all, b.streamIDs(), "one entry per event, in commit order")

		st := b.state()
		require.NotNil(t, st.CheckpointAt)
		require.Equal(t, d.Config().Owner, st.Owner)
		stats := d.Stats()
		require.True(t, stats.Leader)
		require.Equal(t, int64(len(all)), stats.Relayed)
		require.GreaterOrEqual(t, stats.CaughtUp, int64(len(before)))

		require.Zero(t, b.undispatched())
	})

	t.Run("SmallBatchesShareStoreWrites", func(t *testing.T) {
		t.Parallel()
		b := setup(t, nil)
		cfg := b.config()
		cfg.MarkInterval = time.Second
		// One leadership throughout: a lease lost on a loaded machine (the
		// test's 600 ms) fences the writes still merging, and the next
		// leader marks what they held as one batch.
		cfg.LeaseTTL = 30 * time.Second
		d := b.start(cfg)
		var all []string
		for range 30 { // one entry per batch: each is in the stream before the next is written
			id := b.write(1, 1)
			all = append(all, id...)
			require.Eventually(t, func() bool { return b.containsAll(id) }, 10*time.Second, 2*time.Millisecond)
		}
		b.waitRelayed(all, 30*time.Second)
		require.Equal(t, all, b.streamIDs(), "each entry once, in commit order")
		// The counters move after the store write returns, so a moment
		// after the store shows the marks.
		require.Eventually(t, func() bool { return d.Stats().Dispatched == int64(len(all)) }, 10*time.Second, 2*time.Millisecond)
		stats := d.Stats()
		require.Zero(t, stats.Fenced, "one leadership")
		require.Equal(t, int64(len(all)), stats.Dispatched)
		require.Equal(t, int64(len(all)), stats.Batches)
		require.LessOrEqual(t, stats.Writes, stats.Batches/3,
			"batches relayed within one MarkInterval share a store write (%d batches)", stats.Batches)
	})

	t.Run("OnlyItsOwnStream", func(t *testing.T) {
		t.Parallel()
		b := setup(t, nil)
		other := outbox.NewWriter(b.st, &outbox.WriterConfig{Stream: b.stream + ":other"})
		_, err := other.Write(ctx, []outbox.Input{{SourceKey: "s", DeviceKey: "x", OccurredAt: "2026-11-01T10:00:00Z"}})
		require.NoError(t, err)
		d := b.start(b.config())
		ids := b.write(5, 1)
		b.waitRelayedOwn(ids)
		require.Equal(t, ids, b.streamIDs())
		require.Eventually(t, func() bool { return d.Stats().Dispatched == 5 }, 10*time.Second, 5*time.Millisecond)
		require.Equal(t, int64(5), d.Stats().Relayed)
		require.Equal(t, int64(1), b.undispatched(), "the other stream's entry is not ours to relay")
	})

	t.Run("FaultAfterXAddThenRestartLosesNothing", func(t *testing.T) {
		t.Parallel()
		b := setup(t, nil)
		first := b.write(20, 10)
		b.faults.Arm(dispatcher.FaultAfterXAdd, 1)
		cfg := b.config()
		cfg.BatchSize = 8
		d1 := b.start(cfg)
		waitStopped(t, d1)
		require.ErrorIs(t, d1.Err(), fault.ErrInjected)
		require.Equal(t, 1, b.faults.Hits(dispatcher.FaultAfterXAdd))
		st := b.state()
		require.Equal(t, d1.Config().Owner, st.Owner, "a crash releases nothing")
		require.Equal(t, int64(20), b.undispatched(), "the crashed batch was not marked")
		require.Len(t, b.streamIDs(), 8, "the crashed batch reached the stream")

		second := b.write(10, 10)
		cfg2 := b.config()
		d2 := b.start(cfg2)
		stoppedAt := time.Now()
		require.Eventually(t, func() bool { return d2.Stats().Leader }, 5*time.Second, 10*time.Millisecond)
		require.Less(t, time.Since(stoppedAt), cfg.LeaseTTL+cfg.LeaseTTL/3+time.Second, "takeover within the lease TTL")
		all := append(first, second...)
		b.waitRelayed(all, 30*time.Second)
		got := b.streamIDs()
		require.Equal(t, all, unique(got), "nothing missing, order kept apart from duplicates")
		require.Len(t, got, len(all)+8, "exactly the crashed batch is duplicated")
		require.Greater(t, b.state().Term, st.Term)
		// Row "dispatcher stops after XADD, before checkpoint": a duplicate
		// stream entry, no duplicate effect.
		b.requireConverged(b.startWorker())
	})

	t.Run("FaultAfterMarkThenRestartLosesNothing", func(t *testing.T) {
		t.Parallel()
		b := setup(t, nil)
		b.faults.Arm(dispatcher.FaultAfterMark, 1)
		d1 := b.start(b.config())
		ids := b.write(12, 4)
		waitStopped(t, d1)
		require.ErrorIs(t, d1.Err(), fault.ErrInjected)
		b.start(b.config())
		b.waitRelayed(ids, 30*time.Second)
		require.Equal(t, ids, unique(b.streamIDs()))
		b.requireConverged(b.startWorker())
	})

	t.Run("CorruptTokenCountsAsLost", func(t *testing.T) {
		t.Parallel()
		tokens := []any{bson.M{"_data": "00"}, "not-a-document"}
		if kind == kindSQLite {
			tokens = []any{"not-a-number", "-7x"}
		}
		for _, tok := range tokens {
			b := setup(t, nil)
			reg := prometheus.NewRegistry()
			cfg := b.config()
			cfg.Registerer = reg
			d := b.start(cfg)
			first := b.write(3, 3)
			b.waitRelayed(first, 10*time.Second)
			stop(t, d)
			b.corruptPosition(tok)
			second := b.write(4, 2)

			cfg2 := b.config()
			cfg2.Registerer = reg
			d2 := b.start(cfg2)
			all := append(first, second...)
			b.waitRelayed(all, 10*time.Second)
			require.Equal(t, all, b.streamIDs())
			require.Equal(t, int64(1), d2.Stats().HistoryLost)
			require.Equal(t, 1.0, counterValue(t, reg, "outboxd_dispatcher_history_lost_total"))
			// The dead token was dropped (or replaced): no second loss.
			third := b.write(2, 2)
			b.waitRelayed(third, 10*time.Second)
			stop(t, d2)
			d3 := b.start(b.config())
			fourth := b.write(2, 2)
			b.waitRelayed(fourth, 10*time.Second)
			require.Equal(t, int64(0), d3.Stats().HistoryLost)
			// Row "resume token missing, corrupt or out of the oplog".
			b.requireConverged(b.startWorker())
		}
	})

	t.Run("TwoDispatchersOneRelays", func(t *testing.T) {
		t.Parallel()
		b := setup(t, nil)
		cfg := b.config()
		d1 := b.start(cfg)
		d2 := b.start(b.config())
		require.Eventually(t, func() bool { return d1.Stats().Leader || d2.Stats().Leader }, 5*time.Second, 5*time.Millisecond)
		leader, standby := d1, d2
		if d2.Stats().Leader {
			leader, standby = d2, d1
		}
		first := b.write(50, 10)
		b.waitRelayed(first, 10*time.Second)
		require.Equal(t, first, b.streamIDs())
		require.False(t, standby.Stats().Leader)
		require.Equal(t, int64(0), standby.Stats().Relayed, "the standby relays nothing")
		require.Equal(t, int64(50), leader.Stats().Relayed)
		term := leader.Stats().Term

		stop(t, leader)
		stoppedAt := time.Now()
		require.Eventually(t, func() bool { return standby.Stats().Leader }, cfg.LeaseTTL, 5*time.Millisecond,
			"the standby takes over within the lease TTL")
		t.Logf("takeover after %s", time.Since(stoppedAt))
		require.Equal(t, term+1, standby.Stats().Term)
		second := b.write(30, 10)
		all := append(first, second...)
		b.waitRelayed(all, 10*time.Second)
		require.Equal(t, all, b.streamIDs())
		require.Equal(t, standby.Config().Owner, b.state().Owner)
		// Row "two dispatchers for one stream".
		b.requireConverged(b.startWorker())
	})

	t.Run("StaleLeaderIsFenced", func(t *testing.T) {
		t.Parallel()
		b := setup(t, nil)
		cfg := b.config()
		cfg.LeaseTTL = time.Minute // it never expires by itself here
		d := b.start(cfg)
		first := b.write(3, 3)
		b.waitRelayed(first, 10*time.Second)
		old := b.state()

		// Another dispatcher takes over while d is "paused" (its clock says
		// the lease expired).
		usurper, err := b.st.AcquireLease(ctx, dispatcher.LeaseName(b.stream), "usurper", time.Now().Add(2*time.Minute), time.Hour)
		require.NoError(t, err)
		require.True(t, usurper.Held())
		usurped := b.state()
		b.write(2, 2) // d relays it (a duplicate at worst), then its checkpoint is fenced
		require.Eventually(t, func() bool { return !d.Stats().Leader && d.Stats().Fenced == 1 }, 10*time.Second, 5*time.Millisecond)
		st := b.state()
		require.Equal(t, "usurper", st.Owner)
		require.Equal(t, old.Term+1, st.Term)
		require.Equal(t, usurped.CheckpointAt, st.CheckpointAt, "the stale leader's checkpoint was rejected")
		require.Equal(t, usurped.Position, st.Position)

		// The usurper goes away; another dispatcher (the fenced one polls
		// only every LeaseTTL/3, a minute here) takes the lease and relays
		// what the fenced one could not mark.
		released, err := b.st.ReleaseLease(ctx, usurper)
		require.NoError(t, err)
		require.True(t, released)
		next := b.start(b.config())
		require.Eventually(t, func() bool { return next.Stats().Leader }, 10*time.Second, 5*time.Millisecond)
		require.Greater(t, b.state().Term, st.Term)
		b.requireConverged(b.startWorker())
	})

	t.Run("IdleCheckpointKeepsMoving", func(t *testing.T) {
		t.Parallel()
		b := setup(t, nil)
		d := b.start(b.config()) // IdleCheckpointMax 50ms
		b.waitRelayed(b.write(1, 1), 10*time.Second)
		first := b.state()
		require.NotNil(t, first.CheckpointAt)
		require.Eventually(t, func() bool {
			st := b.state()
			return st.CheckpointAt.After(first.CheckpointAt.Add(100 * time.Millisecond))
		}, 5*time.Second, 10*time.Millisecond, "checkpointAt advances while idle")
		if kind == kindMongo && testkit.RealMongo() {
			// A replica set hands out a post-batch resume token while idle.
			require.Eventually(t, func() bool { return !bytesEqual(b.state().Position, first.Position) },
				30*time.Second, 50*time.Millisecond, "the resume token advances while idle")
		}
		require.Equal(t, int64(1), d.Stats().Relayed)
	})

	t.Run("IdleCheckpointOnlyEveryIdleCheckpointMax", func(t *testing.T) {
		t.Parallel()
		b := setup(t, nil)
		cfg := b.config()
		cfg.IdleCheckpointMax = time.Minute
		d := b.start(cfg)
		// The first entry may come from the catch-up and then the feed too,
		// which moves the checkpoint past it once more (IdleCheckpoint); the
		// second comes from the feed alone, with its checkpoint.
		b.waitRelayed(b.write(1, 1), 10*time.Second)
		b.waitRelayed(b.write(1, 1), 10*time.Second)
		first := b.state()
		require.NotNil(t, first.CheckpointAt)
		require.Never(t, func() bool { return !b.state().CheckpointAt.Equal(*first.CheckpointAt) },
			20*cfg.IdleCheckpoint, 10*time.Millisecond, "an idle feed writes no checkpoint before IdleCheckpointMax")
		more := b.write(1, 1)
		b.waitRelayed(more, 10*time.Second)
		require.True(t, b.state().CheckpointAt.After(*first.CheckpointAt), "a relayed batch checkpoints at once")
		require.Equal(t, int64(3), d.Stats().Relayed)
	})

	t.Run("StopIsGracefulAndIdempotent", func(t *testing.T) {
		t.Parallel()
		b := setup(t, nil)
		d := b.start(b.config())
		ids := b.write(10, 5)
		b.waitRelayed(ids, 10*time.Second)
		stop(t, d)
		stop(t, d)
		st := b.state()
		require.Empty(t, st.Owner, "the lease is released")
		require.NoError(t, d.Err())
		require.NoError(t, d.Start(ctx), "a stopped dispatcher starts again")
		more := b.write(3, 3)
		b.waitRelayed(more, 10*time.Second)
		stop(t, d)

		never := b.newDispatcher(b.config())
		stop(t, never) // before Start
		waitStopped(t, never)
	})

	t.Run("StartStopStress", func(t *testing.T) {
		t.Parallel()
		b := setup(t, nil)
		testkit.StartStopStress(t, 5, 3, func() startstop.Service {
			d, err := dispatcher.New(b.st, b.rdb, b.config(), testkit.Logger(t))
			if err != nil {
				t.Error(err)
				return nil
			}
			return d
		})
		ids := b.write(5, 5)
		b.start(b.config())
		b.waitRelayed(ids, 10*time.Second)
		require.Equal(t, ids, b.streamIDs())
	})

	t.Run("RespectsContextCancellation", func(t *testing.T) {
		t.Parallel()
		b := setup(t, nil)
		d := b.newDispatcher(b.config())
		runCtx, cancel := context.WithCancel(ctx)
		require.NoError(t, d.Start(runCtx))
		require.Eventually(t, func() bool { return d.Stats().Leader }, 5*time.Second, 5*time.Millisecond)
		cancel()
		waitStopped(t, d)
		require.Empty(t, b.state().Owner)
	})

	t.Run("StartFailsFastWithoutRedis", func(t *testing.T) {
		t.Parallel()
		srv := testkit.NewRedisServer(t)
		rdb := srv.Client()
		srv.Stop()
		b := setup(t, &setupOpts{redis: rdb})
		d := b.newDispatcher(b.config())
		require.ErrorContains(t, d.Start(ctx), "error reaching Redis")
	})
}

func stop(t *testing.T, d *dispatcher.Dispatcher) {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	require.NoError(t, d.Stop(ctx))
	select {
	case <-d.Stopped():
	default:
		t.Fatal("Stopped not closed after Stop")
	}
}

// waitStopped waits until d has stopped by itself.
func waitStopped(t *testing.T, d *dispatcher.Dispatcher) {
	t.Helper()
	select {
	case <-d.Stopped():
	case <-time.After(30 * time.Second):
		t.Fatal("dispatcher did not stop")
	}
}

// counterValue returns the value of the counter name in reg.
func counterValue(t *testing.T, reg *prometheus.Registry, name string) float64 {
	t.Helper()
	mfs, err := reg.Gather()
	require.NoError(t, err)
	for _, mf := range mfs {
		if mf.GetName() == name {
			return mf.GetMetric()[0].GetCounter().GetValue()
		}
	}
	t.Fatalf("metric %s not registered", name)
	return 0
}

func bytesEqual(a, b []byte) bool { return string(a) == string(b) }

// waitRelayedOwn waits until ids are in the stream (other streams' entries
// may stay undispatched).
func (b *testBundle) waitRelayedOwn(ids []string) {
	b.t.Helper()
	require.Eventually(b.t, func() bool { return b.containsAll(ids) }, 10*time.Second, 10*time.Millisecond)
}

// corruptPosition overwrites the saved feed position with tok, as a bad
// restore or a bug would.
func (b *testBundle) corruptPosition(tok any) {
	b.t.Helper()
	ctx := context.Background()
	switch st := b.st.(type) {
	case *mongostore.Store:
		_, err := mongoseam.Database(st).Collection(mongostore.LeasesCollection).UpdateOne(ctx,
			bson.M{"_id": dispatcher.LeaseName(b.stream)}, bson.M{"$set": bson.M{"resumeToken": tok}})
		require.NoError(b.t, err)
	case *sqlitestore.Store:
		_, err := st.DB().ExecContext(ctx, `UPDATE leases SET position = ? WHERE name = ?`, tok, dispatcher.LeaseName(b.stream))
		require.NoError(b.t, err)
	default:
		b.t.Fatalf("no way to corrupt the position of %T", b.st)
	}
}
