package worker_test

import (
	"context"
	"errors"
	"fmt"
	"sync/atomic"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgconn"
	"github.com/prometheus/client_golang/prometheus"
	"github.com/redis/go-redis/v9"
	"github.com/stretchr/testify/require"

	"github.com/outboxd/outboxd/internal/fault"
	"github.com/outboxd/outboxd/internal/readmodel"
	"github.com/outboxd/outboxd/internal/testkit"
	"github.com/outboxd/outboxd/outbox"
	"github.com/outboxd/outboxd/store"
	"github.com/outboxd/outboxd/worker"
)

// Breaker states as exported in outboxd_worker_breaker_state.
const (
	breakerClosed = 0.0
	breakerOpen   = 2.0
)

// TestWorkerFaults holds the rows of the fault matrix of docs/reliability.md that the
// worker answers for; each ends with the checker (b.waitConverged or
// b.check).
func TestWorkerFaults(t *testing.T) {
	t.Parallel()
	ctx := context.Background()

	// Row "PostgreSQL down or restarting": consumption pauses (circuit
	// open), no XACK, no DLQ; drains afterwards.
	t.Run("PostgresDownBreakerOpensAndCloses", func(t *testing.T) {
		t.Parallel()
		b := setup(t)
		pool, proxy := testkit.ProxiedPool(t, b.pg)
		reg := prometheus.NewRegistry()
		cfg := b.config("c")
		cfg.Registerer, cfg.BreakerFailures, cfg.BreakerTimeout = reg, 3, 300*time.Millisecond
		b.startOn(t, pool, cfg)
		b.publish(t, b.write(t, "d1", 10)...)
		b.waitConverged(t)
		require.Equal(t, breakerClosed, testkit.Metric(t, reg, "outboxd_worker_breaker_state", "breaker", "postgres"))

		proxy.Down()
		b.publish(t, b.write(t, "d1", 10)...)
		require.Eventually(t, func() bool {
			return testkit.Metric(t, reg, "outboxd_worker_breaker_state", "breaker", "postgres") == breakerOpen
		}, waitFor, 5*time.Millisecond, "the circuit opens")
		// Paused: entries read but not acknowledged, nothing dead-lettered,
		// marked or charged.
		require.Positive(t, b.pending(t))
		require.Equal(t, int64(10), b.unsynced(t))
		require.Zero(t, b.rdb.XLen(ctx, b.keys().DLQ()).Val())
		require.Zero(t, b.rdb.HLen(ctx, b.keys().Failures()).Val())
		require.Equal(t, breakerClosed, testkit.Metric(t, reg, "outboxd_worker_breaker_state", "breaker", "store"))

		proxy.Up(t)
		b.waitConverged(t)
		require.Equal(t, breakerClosed, testkit.Metric(t, reg, "outboxd_worker_breaker_state", "breaker", "postgres"), "the probe closed it")
		require.Zero(t, b.rdb.XLen(ctx, b.keys().DLQ()).Val())
		require.Positive(t, testkit.Metric(t, reg, "outboxd_worker_retries_total", "reason", "infrastructure"))
	})

	// Row "a long PostgreSQL outage with two or more workers": no record
	// reaches the DLQ because of it; delivery budgets untouched. One worker
	// holds the paused entry; the other has nothing to do and runs
	// XAUTOCLAIM every 30ms. The holder touches its entry, so the other
	// never takes it however long the outage lasts (here ten times
	// ClaimIdle; without the touch it is handed over after one ClaimIdle
	// and its delivery count rises), and Redis's delivery count stays 1.
	t.Run("LongPostgresOutageTwoWorkers", func(t *testing.T) {
		t.Parallel()
		b := setup(t)
		pool, proxy := testkit.ProxiedPool(t, b.pg)
		reg := prometheus.NewRegistry()
		const claimIdle = 300 * time.Millisecond
		for _, name := range []string{"a", "b"} {
			cfg := b.config(name)
			cfg.Registerer, cfg.MaxDeliveries = reg, 2
			cfg.ClaimIdle, cfg.ClaimInterval, cfg.BreakerTimeout = claimIdle, 30*time.Millisecond, 100*time.Millisecond
			b.startOn(t, pool, cfg)
		}
		b.publish(t, b.write(t, "d1", 10)...)
		b.waitConverged(t)

		proxy.Down()
		b.publish(t, b.write(t, "d2", 1)...)
		require.Eventually(t, func() bool { return b.pending(t) == 1 }, waitFor, 5*time.Millisecond)
		burnt := func() bool {
			pending, err := b.rdb.XPendingExt(ctx, &redis.XPendingExtArgs{Stream: b.stream, Group: b.group, Start: "-", End: "+", Count: 100}).Result()
			require.NoError(t, err)
			for _, p := range pending {
				if p.RetryCount > 1 {
					t.Logf("entry %s delivered %d times (now on %s)", p.ID, p.RetryCount, p.Consumer)
					return true
				}
			}
			return b.rdb.XLen(ctx, b.keys().DLQ()).Val() > 0 ||
				b.rdb.HLen(ctx, b.keys().Failures()).Val() > 0
		}
		testkit.Never(t, burnt, 10*claimIdle, 20*time.Millisecond, "the outage burnt delivery budget")
		require.Zero(t, testkit.Metric(t, reg, "outboxd_worker_claimed_total"), "no hand-over between live workers")

		b.publish(t, b.write(t, "d2", 20)...) // more work during the outage
		proxy.Up(t)
		b.waitConverged(t)
		require.Zero(t, b.rdb.XLen(ctx, b.keys().DLQ()).Val())
		require.Zero(t, b.rdb.HLen(ctx, b.keys().Failures()).Val())
	})

	// Row "deadlock or serialization failure on hot stats rows": a real
	// 40P01. The worker's transaction locks A's stats row, then waits for
	// B's, which another transaction holds and which then waits for A's.
	// PostgreSQL aborts the worker's transaction (it waited first, so its
	// deadlock check runs first); the worker runs it again; totals exact.
	t.Run("DeadlockRetried", func(t *testing.T) {
		t.Parallel()
		b := setup(t)
		reg := prometheus.NewRegistry()
		projector := readmodel.NewProjector()
		var armed atomic.Bool
		locked := make(chan struct{})
		var deadlocks atomic.Int64
		lockRow := func(ctx context.Context, tx pgx.Tx, device string) error {
			_, err := tx.Exec(ctx, `UPDATE device_daily_stats SET event_count = event_count WHERE device_key = $1`, device)
			return err
		}
		cfg := b.config("c")
		cfg.Registerer = reg
		cfg.Projector = worker.ProjectorFunc(func(ctx context.Context, tx pgx.Tx, events []*outbox.Event) error {
			if armed.CompareAndSwap(true, false) {
				if err := lockRow(ctx, tx, "A"); err != nil {
					return err
				}
				close(locked)
				if err := lockRow(ctx, tx, "B"); err != nil {
					var pgErr *pgconn.PgError
					if errors.As(err, &pgErr) && pgErr.Code == "40P01" {
						deadlocks.Add(1)
					}
					return err
				}
			}
			return projector.Project(ctx, tx, events)
		})
		b.start(t, cfg)
		b.publish(t, append(b.write(t, "A", 1), b.write(t, "B", 1)...)...)
		b.waitConverged(t)

		other, err := b.pg.Pool.Begin(ctx)
		require.NoError(t, err)
		defer other.Rollback(ctx)
		require.NoError(t, lockRow(ctx, other, "B"))
		armed.Store(true)
		b.publish(t, b.write(t, "C", 1)...)
		select {
		case <-locked:
		case <-time.After(waitFor):
			t.Fatal("the worker never locked A")
		}
		require.Eventually(t, func() bool {
			var waiting int
			require.NoError(t, b.pg.Pool.QueryRow(ctx, `SELECT count(*) FROM pg_stat_activity
				WHERE datname = current_database() AND wait_event_type = 'Lock'`).Scan(&waiting))
			return waiting == 1
		}, waitFor, 5*time.Millisecond, "the worker waits for B")
		require.NoError(t, lockRow(ctx, other, "A"), "the worker's transaction is the deadlock's victim")
		require.NoError(t, other.Commit(ctx))

		b.waitConverged(t)
		require.Equal(t, int64(1), deadlocks.Load())
		require.GreaterOrEqual(t, testkit.Metric(t, reg, "outboxd_worker_retries_total", "reason", "transaction"), 1.0)
		require.Zero(t, b.rdb.XLen(ctx, b.keys().DLQ()).Val())
	})

	// Row "original missing or structurally invalid", the missing half: an
	// original the worker cannot find yet (a secondary behind, a commit not
	// visible) stays pending for a few deliveries, and is projected once it
	// appears; one that never appears is dead-lettered as infrastructure
	// after MaxDeliveries. On both stores: the lag is MongoDB's.
	t.Run("MissingOriginalRetriedBeforeDeadLetter", func(t *testing.T) {
		t.Parallel()
		for kind, newStore := range map[string]func(testing.TB) store.Store{
			"SQLite": testkit.NewStore,
			"Mongo":  func(t testing.TB) store.Store { return testkit.NewMongo(t, nil) },
		} {
			t.Run(kind, func(t *testing.T) {
				t.Parallel()
				rdb, prefix := testkit.NewRedis(t)
				b := setupOn(t, newStore(t), rdb, prefix)
				reg := prometheus.NewRegistry()
				late, ghost := b.records(t, "late"), b.records(t, "ghost")
				b.publish(t, &late, &ghost)
				cfg := b.config("c")
				cfg.Registerer, cfg.MaxDeliveries, cfg.RecordBackoff = reg, 3, 150*time.Millisecond
				b.start(t, cfg)
				require.Eventually(t, func() bool {
					return b.rdb.HLen(ctx, b.keys().Failures()).Val() == 2
				}, waitFor, 2*time.Millisecond, "both failed their first delivery")
				require.NoError(t, b.st.WriteTx(ctx, func(ctx context.Context, tx outbox.Tx) error {
					return tx.InsertEvents(ctx, []outbox.Event{late})
				}))
				dl := b.waitDeadLetters(t, 1)
				requireDeadLetter(t, reg, dl[0], ghost.ID, outbox.CategoryInfrastructure, "original_missing", 3)
				b.events = append(b.events, b.event(t, late.ID))
				b.waitConverged(t)
			})
		}
	})

	// Row "a record that keeps failing (poison)", when the error is one no
	// rule recognises: bounded like a record's failure (MaxDeliveries),
	// counted under its code, the other events keep flowing.
	t.Run("UnknownErrorBoundedThenParked", func(t *testing.T) {
		t.Parallel()
		b := setup(t)
		reg := prometheus.NewRegistry()
		evs := b.write(t, "d1", 5)
		odd := evs[2].ID
		cfg := b.config("c")
		cfg.Registerer = reg
		cfg.Projector = failOn(func(ev *outbox.Event, _ bool) error {
			if ev.ID == odd {
				return errors.New("something nobody classified")
			}
			return nil
		})
		b.publish(t, evs...)
		b.start(t, cfg)
		requireDeadLetter(t, reg, b.waitDeadLetters(t, 1)[0], odd, outbox.CategoryPoison, "postgres_unknown", 3)
		require.Equal(t, "postgres_unknown", b.event(t, odd).SyncFailure.Code)
		b.events, b.parked = append(evs[:2:2], evs[3:]...), 1
		b.check(t)
	})

	// A crash after syncFailure is set and before the dead letter and the
	// XACK (one MULTI/EXEC): the redelivery dead-letters the entry once.
	t.Run("DeadLetterWrittenOnceAcrossCrash", func(t *testing.T) {
		t.Parallel()
		b := setup(t)
		good := b.write(t, "d1", 3)
		broken := *good[0]
		broken.ID, broken.IdempotencyKey, broken.DeviceKey = outbox.NewEventID(), "broken", ""
		require.NoError(t, b.st.WriteTx(ctx, func(ctx context.Context, tx outbox.Tx) error {
			return tx.InsertEvents(ctx, []outbox.Event{broken})
		}))
		b.publish(t, append(good, &broken)...)
		faults := &fault.Set{}
		faults.Arm(worker.FaultAfterSyncedAt, 1)
		cfg := b.config("crashing")
		worker.SetFaults(cfg, faults)
		w, err := worker.New(b.st, b.rdb, b.pg.Pool, cfg, testkit.Logger(t))
		require.NoError(t, err)
		require.NoError(t, w.Start(ctx))
		select {
		case <-w.Stopped():
		case <-time.After(waitFor):
			t.Fatal("fault point did not stop the worker")
		}
		require.ErrorIs(t, w.Err(), fault.ErrInjected)
		require.NotNil(t, b.event(t, broken.ID).SyncFailure, "parked before the crash")
		require.Zero(t, b.rdb.XLen(ctx, b.keys().DLQ()).Val())

		b.start(t, b.config("crashing"))
		require.Eventually(t, func() bool { return b.drained(t) }, waitFor, 10*time.Millisecond)
		require.Equal(t, int64(1), b.rdb.XLen(ctx, b.keys().DLQ()).Val())
		b.events, b.parked = good, 1
		b.check(t)
	})
}

// TestWorkerErrorStreak: the same unknown code StreakLimit times in a row
// halts automatic retries of its class (held, never charged again, never
// dead-lettered because of it; one probe per BreakerTimeout) and raises
// the alarm; a success of the class or the operator clears it.
func TestWorkerErrorStreak(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	// setupBroken starts a worker whose projector fails with an unknown
	// error until broken is cleared, with a delivery budget of maxDeliveries.
	setupBroken := func(t *testing.T, probe time.Duration, batch, maxDeliveries int) (*testBundle, *prometheus.Registry, *atomic.Bool, *worker.Worker) {
		b := setup(t)
		reg := prometheus.NewRegistry()
		broken := &atomic.Bool{}
		broken.Store(true)
		cfg := b.config("c")
		cfg.Registerer, cfg.StreakLimit, cfg.MaxDeliveries, cfg.BreakerTimeout, cfg.BatchSize = reg, 5, maxDeliveries, probe, batch
		cfg.Projector = failOn(func(*outbox.Event, bool) error {
			if broken.Load() {
				return errors.New("something nobody recognises")
			}
			return nil
		})
		b.publish(t, b.write(t, "d1", 8)...)
		w := b.start(t, cfg)
		require.Eventually(t, func() bool {
			return testkit.Metric(t, reg, "outboxd_retries_halted", "component", "worker", "class", "unknown") == 1
		}, waitFor, 5*time.Millisecond, "retries of the unknown class halt")
		require.GreaterOrEqual(t, testkit.Metric(t, reg, "outboxd_error_streak", "component", "worker", "code", "postgres_unknown"), 5.0)
		return b, reg, broken, w
	}
	budgets := func(t *testing.T, b *testBundle) map[string]string {
		got, err := b.rdb.HGetAll(ctx, b.keys().Failures()).Result()
		require.NoError(t, err)
		return got
	}

	t.Run("HaltsThenClearsOnSuccess", func(t *testing.T) {
		t.Parallel()
		b, reg, broken, _ := setupBroken(t, 100*time.Millisecond, 0, 3)
		// Held and probed for ten probe intervals: nothing dead-lettered,
		// nothing charged beyond the deliveries before the halt.
		testkit.Never(t, func() bool { return b.rdb.XLen(ctx, b.keys().DLQ()).Val() > 0 },
			time.Second, 20*time.Millisecond)
		for id, n := range budgets(t, b) {
			require.Equal(t, "1", n, "entry %s charged after the halt", id)
		}
		require.Equal(t, int64(8), b.pending(t))

		broken.Store(false) // the fix is deployed: the next probe goes through
		b.waitConverged(t)
		requireMetric(t, 0, func() float64 {
			return testkit.Metric(t, reg, "outboxd_retries_halted", "component", "worker", "class", "unknown")
		})
		require.Zero(t, b.rdb.XLen(ctx, b.keys().DLQ()).Val())
		require.Empty(t, budgets(t, b))
	})

	// Batches of 2 fill up, so each is read ahead while the one before
	// fails: the batch read ahead when retries halt is held with the
	// others, not left unread (and untouched) until they resume. How many
	// entries were read by then depends on how failures and reads
	// interleave (on a loaded machine the halt may come before the last
	// batch is read, and then it is not read): every entry read is held,
	// and nothing more is read.
	t.Run("BatchReadAheadIsHeld", func(t *testing.T) {
		t.Parallel()
		// A budget no entry can spend before the streak of 5 halts: with
		// batches of 2 read ahead, the first batch may be retried while the
		// next fails, so a budget of 3 could dead-letter it first.
		b, reg, broken, _ := setupBroken(t, time.Hour, 2, 20)
		heldAll := func() bool {
			p, err := b.rdb.XPending(ctx, b.stream, b.group).Result()
			return err == nil && p.Count > 0 && testkit.Metric(t, reg, "outboxd_worker_held_entries") == float64(p.Count)
		}
		require.Eventually(t, heldAll, waitFor, 5*time.Millisecond, "every pending entry is held")
		read := b.pending(t)
		testkit.Never(t, func() bool { return b.pending(t) != read }, 500*time.Millisecond, 20*time.Millisecond,
			"nothing more read while halted")
		require.Eventually(t, heldAll, waitFor, 5*time.Millisecond, "all of it held")
		broken.Store(false)
	})

	t.Run("OperatorResumes", func(t *testing.T) {
		t.Parallel()
		b, reg, broken, w := setupBroken(t, time.Hour, 0, 3) // no probe within the test
		broken.Store(false)
		w.ResumeRetries()
		require.Zero(t, testkit.Metric(t, reg, "outboxd_retries_halted", "component", "worker", "class", "unknown"))
		b.waitConverged(t) // at once, not after the hour
		require.Zero(t, b.rdb.XLen(ctx, b.keys().DLQ()).Val())
	})
}

// TestWorkerRecordStreakGoesOn: a streak of one record code (a client's
// events the read model refuses) pages (outboxd_retries_halted{class=
// "record"}) and sends each record failing with it to the dead-letter
// stream at once, without waiting for its delivery budget; every other
// record is projected meanwhile, and nothing is held.
func TestWorkerRecordStreakGoesOn(t *testing.T) {
	t.Parallel()
	b := setup(t)
	reg := prometheus.NewRegistry()
	cfg := b.config("c")
	// A budget no test run reaches: only the streak rule dead-letters.
	cfg.Registerer, cfg.StreakLimit, cfg.MaxDeliveries, cfg.BatchSize = reg, 5, 1000, 4
	cfg.RecordBackoff = 10 * time.Millisecond
	cfg.Projector = failOn(func(ev *outbox.Event, _ bool) error {
		if ev.DeviceKey == "poison" {
			return fmt.Errorf("%w: numeric field overflow", worker.ErrRecord)
		}
		return nil
	})
	// The poison first, the others behind it in the stream.
	evs := b.write(t, "poison", 30)
	for i := range 6 {
		evs = append(evs, b.write(t, fmt.Sprintf("good-%d", i), 3)...)
	}
	b.publish(t, evs...)
	b.start(t, cfg)
	dead := b.waitDeadLetters(t, 30)
	require.Len(t, dead, 30, "every poison event dead-lettered once")
	rows, _ := b.rows(t)
	require.Equal(t, int64(18), rows, "every other record projected")
	require.Zero(t, testkit.Metric(t, reg, "outboxd_worker_held_entries"))
}

// TestWorkerExpiredConsumersRemoved: consumers idle longer than
// ConsumerExpiry with nothing pending leave the group; one with pending
// entries stays.
func TestWorkerExpiredConsumersRemoved(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	b := setup(t)
	reg := prometheus.NewRegistry()
	require.NoError(t, b.rdb.XGroupCreateMkStream(ctx, b.stream, b.group, "0").Err())
	require.NoError(t, b.rdb.XGroupCreateConsumer(ctx, b.stream, b.group, "gone").Err())
	b.publish(t, b.write(t, "d1", 1)...)
	_, err := b.rdb.XReadGroup(ctx, &redis.XReadGroupArgs{Group: b.group, Consumer: "holder", Streams: []string{b.stream, ">"}, Count: 1, Block: -1}).Result()
	require.NoError(t, err)

	cfg := b.config("c")
	cfg.Registerer, cfg.ConsumerExpiry, cfg.ClaimIdle = reg, 100*time.Millisecond, time.Hour
	b.start(t, cfg)
	require.Eventually(t, func() bool {
		return testkit.Metric(t, reg, "outboxd_worker_consumers_deleted_total") == 1
	}, waitFor, 10*time.Millisecond)
	consumers, err := b.rdb.XInfoConsumers(ctx, b.stream, b.group).Result()
	require.NoError(t, err)
	var names []string
	for _, c := range consumers {
		names = append(names, c.Name)
	}
	require.ElementsMatch(t, []string{"c", "holder"}, names)
}

// records returns an original for device that is not stored (and no
// outbox entry), for a test to store later or never.
func (b *testBundle) records(t *testing.T, device string) outbox.Event {
	t.Helper()
	evs, _, err := b.writer.Records([]outbox.Input{{SourceKey: "src", DeviceKey: device, OccurredAt: "2026-03-01T10:00:00Z"}})
	require.NoError(t, err)
	return evs[0]
}

// TestWorkerDeadLettersAnEventOnce: two entries of one event that its
// record's fault fails (the reconciler's copy of one held) reach the
// dead-letter stream once: the copy is acknowledged, and the held event is
// marked for the reconciler (stream.Keys.Held) while it waits.
func TestWorkerDeadLettersAnEventOnce(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	b := setup(t)
	cfg := b.config("c")
	cfg.MaxDeliveries, cfg.RecordBackoff = 2, 300*time.Millisecond
	cfg.Projector = failOn(func(*outbox.Event, bool) error { return fmt.Errorf("%w: out of range", worker.ErrRecord) })
	evs := b.write(t, "poison", 1)
	b.publish(t, evs[0])
	b.start(t, cfg)
	require.Eventually(t, func() bool {
		return b.rdb.HExists(ctx, b.keys().Held(), evs[0].ID).Val()
	}, waitFor, 5*time.Millisecond, "the held event is marked for the reconciler")
	b.publish(t, evs[0]) // a copy, as a reconciler without the mark would publish
	require.Eventually(t, func() bool { return b.drained(t) }, waitFor, 10*time.Millisecond)
	testkit.Never(t, func() bool { return b.rdb.XLen(ctx, b.keys().DLQ()).Val() > 1 }, 500*time.Millisecond, 20*time.Millisecond)
	require.Equal(t, int64(1), b.rdb.XLen(ctx, b.keys().DLQ()).Val(), "the event is dead-lettered once")
}
