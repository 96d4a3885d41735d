package worker_test

import (
	"context"
	"fmt"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/prometheus/client_golang/prometheus"
	"github.com/stretchr/testify/require"
	"golang.org/x/time/rate"

	"github.com/outboxd/outboxd/internal/failpolicy"
	"github.com/outboxd/outboxd/internal/operator"
	"github.com/outboxd/outboxd/internal/readmodel"
	"github.com/outboxd/outboxd/internal/stream"
	"github.com/outboxd/outboxd/internal/testkit"
	"github.com/outboxd/outboxd/outbox"
	"github.com/outboxd/outboxd/worker"
)

// publishLane XADDs one entry per event to the replay lane, with origin
// replay, as the operator's replays do.
func (b *testBundle) publishLane(t *testing.T, events ...*outbox.Event) {
	t.Helper()
	require.NoError(t, b.rc.Publisher(b.keys().ReplayLane(), nil, nil).PublishEvents(context.Background(), events, outbox.OriginReplay))
}

// recorder is the default projector that records the event ids it
// projected, in order.
type recorder struct {
	mu  sync.Mutex
	ids []string
}

func (r *recorder) Project(ctx context.Context, tx pgx.Tx, events []*outbox.Event) error {
	if err := readmodel.NewProjector().Project(ctx, tx, events); err != nil {
		return err
	}
	r.mu.Lock()
	defer r.mu.Unlock()
	for _, ev := range events {
		r.ids = append(r.ids, ev.ID)
	}
	return nil
}

func (r *recorder) projected() []string {
	r.mu.Lock()
	defer r.mu.Unlock()
	return append([]string(nil), r.ids...)
}

func ids(events []*outbox.Event) []string {
	out := make([]string, len(events))
	for i, ev := range events {
		out[i] = ev.ID
	}
	return out
}

// TestWorkerReplayLane: replays go into the replay lane, which the worker
// reads only when the stream has nothing for it, at most at its rate; the
// lane's records keep budgets of their own and share the dead-letter
// stream.
func TestWorkerReplayLane(t *testing.T) {
	t.Parallel()
	ctx := context.Background()

	t.Run("TheStreamFirst", func(t *testing.T) {
		t.Parallel()
		b := setup(t)
		live := b.write(t, "live", 6)
		replayed := b.write(t, "replayed", 6)
		b.publish(t, live...)
		b.publishLane(t, replayed...)
		rec := &recorder{}
		reg := prometheus.NewRegistry()
		cfg := b.config("c")
		cfg.BatchSize, cfg.Projector, cfg.Registerer, cfg.ReplayRate = 2, rec, reg, rate.Inf
		b.start(t, cfg)
		b.waitConverged(t)
		got := rec.projected()
		require.ElementsMatch(t, ids(live), got[:6], "every live entry before any of the lane")
		require.ElementsMatch(t, ids(replayed), got[6:])
		requireMetric(t, 6, func() float64 { return testkit.Metric(t, reg, "outboxd_worker_replay_acked_total") })
		require.Zero(t, testkit.Metric(t, reg, "outboxd_worker_replay_rate_limit"), "no bound")
	})

	// A worker idle on its stream wakes for the lane too: its read waits on
	// both (with a block of a minute and no reclaim due, the entry would
	// wait longer than the test).
	t.Run("AnIdleWorkerWakesForTheLane", func(t *testing.T) {
		t.Parallel()
		b := setup(t)
		reg := prometheus.NewRegistry()
		cfg := b.config("c")
		cfg.Registerer, cfg.Block, cfg.ClaimInterval, cfg.ReplayRate = reg, time.Minute, time.Hour, rate.Inf
		b.start(t, cfg)
		replayed := b.write(t, "replayed", 1)
		b.publishLane(t, replayed...)
		b.waitConverged(t)
	})

	// The lane is read at most at the rate: 30 entries at 20 a second
	// (bursts of 2) take at least (30 - 2) / 20 seconds, however fast the
	// machine.
	t.Run("AtMostTheRate", func(t *testing.T) {
		t.Parallel()
		b := setup(t)
		replayed := b.write(t, "replayed", 30)
		b.publishLane(t, replayed...)
		reg := prometheus.NewRegistry()
		cfg := b.config("c")
		cfg.Registerer, cfg.ReplayRate = reg, 20
		started := time.Now()
		b.start(t, cfg)
		b.waitConverged(t)
		require.GreaterOrEqual(t, time.Since(started), 1400*time.Millisecond, "the lane was read faster than its rate")
		require.Equal(t, 20.0, testkit.Metric(t, reg, "outboxd_worker_replay_rate_limit"))
	})

	t.Run("LaneRecordsKeepTheirBudgets", func(t *testing.T) {
		t.Parallel()
		b := setup(t)
		evs := b.write(t, "d", 2)
		bad := evs[1]
		reg := prometheus.NewRegistry()
		cfg := b.config("c")
		cfg.Registerer, cfg.ReplayRate, cfg.MaxDeliveries, cfg.RecordBackoff = reg, rate.Inf, 2, time.Hour
		cfg.Projector = failOn(func(ev *outbox.Event, _ bool) error {
			if ev.ID == bad.ID {
				return fmt.Errorf("%w: bad", worker.ErrRecord)
			}
			return nil
		})
		w := b.start(t, cfg)
		b.publishLane(t, evs...)
		lane := b.keys().ReplayLane()
		requireMetric(t, 1, func() float64 { return testkit.Metric(t, reg, "outboxd_worker_held_entries") })
		budgets, err := b.rdb.HGetAll(ctx, lane.Failures()).Result()
		require.NoError(t, err)
		require.Len(t, budgets, 1, "the failure is charged in the lane's budgets")
		require.Zero(t, b.rdb.HLen(ctx, b.keys().Failures()).Val(), "not the stream's")
		w.ResumeRetries() // the held entry is due now: its second failure parks it
		dls := b.waitDeadLetters(t, 1)
		requireDeadLetter(t, reg, dls[0], bad.ID, outbox.CategoryPoison, "projection_failed", 2)
		require.Equal(t, lane.Stream(), dls[0].Values["stream"], "the dead letter names the lane")
		b.parked = 1
		b.events = evs[:1]
		b.check(t)
	})
}

// TestWorkerErrorStreakAcrossWorkers: the error-streak rule counts for the
// whole group (in Redis). Two workers each fail four records, fewer than
// the limit of six: the group's run reaches it and both halt; the
// operator's resume (operator.ResumeRetries, the admin API's) clears the
// halt in both.
func TestWorkerErrorStreakAcrossWorkers(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	b := setup(t)
	var broken atomic.Bool
	broken.Store(true)
	projector := failOn(func(*outbox.Event, bool) error {
		if broken.Load() {
			return fmt.Errorf("%w: the schema drifted", worker.ErrRecord)
		}
		return nil
	})
	halted := func(reg *prometheus.Registry) float64 {
		return testkit.Metric(t, reg, "outboxd_retries_halted", "component", "worker", "class", failpolicy.ClassRecord)
	}
	start := func(name string) *prometheus.Registry {
		reg := prometheus.NewRegistry()
		cfg := b.config(name)
		cfg.Registerer, cfg.StreakLimit, cfg.MaxDeliveries, cfg.Projector, cfg.BreakerTimeout = reg, 6, 1, projector, time.Hour
		b.start(t, cfg)
		return reg
	}

	first := b.write(t, "d1", 4)
	b.publish(t, first...)
	regA := start("a")
	b.waitDeadLetters(t, 4)
	require.Zero(t, halted(regA), "four in a row: under the limit")
	// The dead letters are written before the batch's failures are counted.
	requireMetric(t, 4, func() float64 { return testkit.Metric(t, regA, "outboxd_error_streak", "code", "projection_failed") })

	second := b.write(t, "d2", 4)
	regB := start("b")
	b.publish(t, second...)
	b.waitDeadLetters(t, 8)
	requireMetric(t, 1, func() float64 { return halted(regB) })
	requireMetric(t, 1, func() float64 { return halted(regA) }) // a halt of the group, seen by a worker that failed nothing since
	streak, err := b.rdb.HGetAll(ctx, b.keys().Streak(stream.ComponentWorker)).Result()
	require.NoError(t, err)
	require.Equal(t, "projection_failed|postgres", streak["halt:record"])

	op, err := operator.New(&operator.Config{Store: b.st, Redis: b.rc, Stream: b.stream, Group: b.group}, nil)
	require.NoError(t, err)
	_, err = op.ResumeRetries(ctx, operator.RetriesQuery{Class: "none"})
	require.ErrorIs(t, err, operator.ErrInvalid)
	res, err := op.ResumeRetries(ctx, operator.RetriesQuery{Class: failpolicy.ClassRecord})
	require.NoError(t, err)
	require.Equal(t, []operator.ResumedHalt{{Component: stream.ComponentWorker, Code: "projection_failed", Source: failpolicy.SourcePostgres}}, res.Resumed)
	requireMetric(t, 0, func() float64 { return halted(regA) })
	requireMetric(t, 0, func() float64 { return halted(regB) })

	broken.Store(false)
	b.events, b.parked = nil, 8
	b.publish(t, b.write(t, "d3", 2)...)
	require.Eventually(t, func() bool {
		rows, _ := b.rows(t)
		return b.drained(t) && rows == 2
	}, waitFor, 10*time.Millisecond)
	b.check(t)
}

// TestWorkerPostgresTimeouts: the worker's transactions carry
// lock_timeout and statement_timeout; one that ends on either is counted
// and retried as an infrastructure failure (nothing charged, nothing
// dead-lettered), and with AutoBatch it halves the batch at once.
func TestWorkerPostgresTimeouts(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	timeouts := func(reg *prometheus.Registry, kind string) float64 {
		return testkit.Metric(t, reg, "outboxd_worker_pg_timeouts_total", "kind", kind)
	}

	t.Run("Lock", func(t *testing.T) {
		t.Parallel()
		b := setup(t)
		reg := prometheus.NewRegistry()
		cfg := b.config("c")
		cfg.Registerer, cfg.LockTimeout, cfg.AutoBatch = reg, 50*time.Millisecond, true
		// Another transaction holds the events table: the projection
		// waits for its lock no longer than lock_timeout.
		locker, err := b.pg.Pool.Begin(ctx)
		require.NoError(t, err)
		defer func() { _ = locker.Rollback(ctx) }()
		_, err = locker.Exec(ctx, `LOCK TABLE events IN EXCLUSIVE MODE`)
		require.NoError(t, err)
		b.publish(t, b.write(t, "d", 3)...)
		b.start(t, cfg)
		require.Eventually(t, func() bool { return timeouts(reg, "lock") >= 2 }, waitFor, 10*time.Millisecond)
		require.Equal(t, float64(worker.AutoBatchMin), testkit.Metric(t, reg, "outboxd_worker_batch_size", "consumer", "c"),
			"halved at each timeout: 2000, 1000, 500")
		require.Zero(t, b.rdb.HLen(ctx, b.keys().Failures()).Val(), "never charged to the records")
		require.NoError(t, locker.Commit(ctx))
		b.waitConverged(t)
		require.Zero(t, b.rdb.XLen(ctx, b.keys().DLQ()).Val())
		require.InDelta(t, 0.05*timeouts(reg, "lock"), testkit.Metric(t, reg, "outboxd_worker_lock_wait_seconds_total"), 1e-9,
			"each lock timeout waited lock_timeout")
	})

	t.Run("Statement", func(t *testing.T) {
		t.Parallel()
		b := setup(t)
		reg := prometheus.NewRegistry()
		var slow atomic.Bool
		slow.Store(true)
		cfg := b.config("c")
		cfg.Registerer, cfg.StatementTimeout = reg, 50*time.Millisecond
		cfg.Projector = worker.ProjectorFunc(func(ctx context.Context, tx pgx.Tx, events []*outbox.Event) error {
			if slow.Load() {
				if _, err := tx.Exec(ctx, `SELECT pg_sleep(5)`); err != nil {
					return err
				}
			}
			return readmodel.NewProjector().Project(ctx, tx, events)
		})
		b.publish(t, b.write(t, "d", 2)...)
		b.start(t, cfg)
		require.Eventually(t, func() bool { return timeouts(reg, "statement") >= 1 }, waitFor, 10*time.Millisecond)
		require.Equal(t, float64(worker.BatchSizeDefault), testkit.Metric(t, reg, "outboxd_worker_batch_size", "consumer", "c"), "a fixed batch size")
		slow.Store(false)
		b.waitConverged(t)
		require.Zero(t, timeouts(reg, "lock"))
		require.Zero(t, b.rdb.XLen(ctx, b.keys().DLQ()).Val())
	})

	t.Run("OffLeavesTheServersSetting", func(t *testing.T) {
		t.Parallel()
		b := setup(t)
		var got [2]string
		cfg := b.config("c")
		cfg.LockTimeout, cfg.StatementTimeout = worker.TimeoutOff, 1500*time.Millisecond
		cfg.Projector = worker.ProjectorFunc(func(ctx context.Context, tx pgx.Tx, events []*outbox.Event) error {
			if err := tx.QueryRow(ctx, `SELECT current_setting('lock_timeout'), current_setting('statement_timeout')`).Scan(&got[0], &got[1]); err != nil {
				return err
			}
			return readmodel.NewProjector().Project(ctx, tx, events)
		})
		b.publish(t, b.write(t, "d", 1)...)
		b.start(t, cfg)
		b.waitConverged(t)
		require.Equal(t, [2]string{"0", "1500ms"}, got)
		var after string
		require.NoError(t, b.pg.Pool.QueryRow(ctx, `SELECT current_setting('statement_timeout')`).Scan(&after))
		require.Equal(t, "0", after, "SET LOCAL: the pool's connections keep the server's setting")
	})
}
