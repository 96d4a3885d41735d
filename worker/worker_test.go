package worker_test

import (
	"context"
	"fmt"
	"strconv"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgxpool"
	"github.com/prometheus/client_golang/prometheus"
	"github.com/redis/go-redis/v9"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/outboxd/outboxd/internal/fault"
	"github.com/outboxd/outboxd/internal/readmodel"
	"github.com/outboxd/outboxd/internal/startstop"
	"github.com/outboxd/outboxd/internal/stream"
	"github.com/outboxd/outboxd/internal/testkit"
	"github.com/outboxd/outboxd/outbox"
	"github.com/outboxd/outboxd/store"
	"github.com/outboxd/outboxd/worker"
)

var _ worker.Projector = worker.ProjectorFunc(nil)

const waitFor = 20 * time.Second

type testBundle struct {
	st     store.Store
	rdb    redis.UniversalClient
	rc     *stream.Client
	pg     *testkit.Postgres
	stream string
	group  string
	writer *outbox.Writer
	events []*outbox.Event // written so far, in order
	// Originals the checker must not count: parked ones (not in events), and
	// unsynced ones whose entry was lost (the reconciler's job).
	parked, lost int
}

func setup(t *testing.T) *testBundle {
	t.Helper()
	rdb, prefix := testkit.NewRedis(t)
	return setupWith(t, rdb, prefix)
}

func setupWith(t *testing.T, rdb redis.UniversalClient, prefix string) *testBundle {
	t.Helper()
	return setupOn(t, testkit.NewStore(t), rdb, prefix)
}

// setupOn is setup on the store st.
func setupOn(t *testing.T, st store.Store, rdb redis.UniversalClient, prefix string) *testBundle {
	t.Helper()
	rc, err := stream.NewClient(rdb, nil)
	require.NoError(t, err)
	return &testBundle{
		st: st, rdb: rdb, rc: rc, pg: testkit.NewPostgres(t),
		stream: prefix + ":stream", group: "read-model",
		writer: outbox.NewWriter(st, nil),
	}
}

// keys names the bundle's stream, dead-letter stream and budgets.
func (b *testBundle) keys() stream.Keys { return stream.NewKeys(b.stream, b.group) }

// config returns a fast test configuration: short blocks, backoffs and
// breaker timeouts; callers adjust it.
func (b *testBundle) config(consumer string) *worker.Config {
	return &worker.Config{
		Stream: b.stream, Group: b.group, Consumer: consumer,
		Block: 50 * time.Millisecond, BackoffMax: 200 * time.Millisecond,
		RecordBackoff: 20 * time.Millisecond, BreakerTimeout: 200 * time.Millisecond,
	}
}

// start starts a worker and stops it at cleanup.
func (b *testBundle) start(t *testing.T, cfg *worker.Config) *worker.Worker {
	t.Helper()
	return b.startOn(t, b.pg.Pool, cfg)
}

// startOn starts a worker on pool (a proxied one, say) and stops it at
// cleanup.
func (b *testBundle) startOn(t *testing.T, pool *pgxpool.Pool, cfg *worker.Config) *worker.Worker {
	t.Helper()
	w, err := worker.New(b.st, b.rdb, pool, cfg, testkit.Logger(t))
	require.NoError(t, err)
	require.NoError(t, w.Start(context.Background()))
	t.Cleanup(func() { require.NoError(t, w.Stop(context.Background())) })
	return w
}

// write stores n originals on device (spread over two UTC days) and returns
// them; nothing goes into the stream.
func (b *testBundle) write(t *testing.T, device string, n int) []*outbox.Event {
	t.Helper()
	ctx := context.Background()
	inputs := make([]outbox.Input, n)
	base := time.Date(2026, 3, 1, 23, 59, 0, 0, time.UTC)
	for i := range inputs {
		inputs[i] = outbox.Input{
			SourceKey: "src", DeviceKey: device,
			OccurredAt: base.Add(time.Duration(len(b.events)+i) * time.Second).Format(time.RFC3339Nano),
		}
	}
	res, err := b.writer.Write(ctx, inputs)
	require.NoError(t, err)
	var out []*outbox.Event
	for _, r := range res {
		out = append(out, b.event(t, r.ID))
	}
	b.events = append(b.events, out...)
	return out
}

// publish XADDs one entry per event.
func (b *testBundle) publish(t *testing.T, events ...*outbox.Event) {
	t.Helper()
	_, err := b.rdb.Pipelined(context.Background(), func(p redis.Pipeliner) error {
		for _, ev := range events {
			p.XAdd(context.Background(), &redis.XAddArgs{Stream: b.stream, Values: ev.Message(outbox.OriginOutbox).Values()})
		}
		return nil
	})
	require.NoError(t, err)
}

func (b *testBundle) pending(t *testing.T) int64 {
	t.Helper()
	p, err := b.rdb.XPending(context.Background(), b.stream, b.group).Result()
	require.NoError(t, err)
	return p.Count
}

// drained reports that the group has read the whole stream and acknowledged
// everything.
func (b *testBundle) drained(t *testing.T) bool {
	t.Helper()
	return testkit.Drained(context.Background(), b.rdb, b.stream, b.group)
}

func (b *testBundle) rows(t *testing.T) (rows, stats int64) {
	t.Helper()
	ctx := context.Background()
	require.NoError(t, b.pg.Pool.QueryRow(ctx, `SELECT count(*) FROM events`).Scan(&rows))
	require.NoError(t, b.pg.Pool.QueryRow(ctx, `SELECT coalesce(sum(event_count), 0) FROM device_daily_stats`).Scan(&stats))
	return rows, stats
}

// unsynced counts the originals with no syncedAt (pending or parked).
func (b *testBundle) unsynced(t *testing.T) int64 {
	t.Helper()
	c, err := b.st.Counts(context.Background())
	require.NoError(t, err)
	return c.Pending + c.Failed
}

// event reads an original.
func (b *testBundle) event(t *testing.T, id string) *outbox.Event {
	t.Helper()
	return testkit.Event(t, b.st, id)
}

// waitConverged waits until the stream is drained and every written
// original is projected once and synced, then runs the checker of docs/reliability.md.
func (b *testBundle) waitConverged(t *testing.T) {
	t.Helper()
	want := int64(len(b.events))
	require.Eventually(t, func() bool {
		rows, _ := b.rows(t)
		return b.drained(t) && rows == want && b.unsynced(t) == 0
	}, waitFor, 10*time.Millisecond)
	b.check(t)
}

func (b *testBundle) check(t *testing.T) {
	t.Helper()
	keys := make([]string, len(b.events))
	for i, ev := range b.events {
		keys[i] = ev.IdempotencyKey
	}
	v, err := testkit.Check(context.Background(), b.st, b.pg.Pool, b.rdb, b.stream, b.group, keys)
	require.NoError(t, err)
	v.Undispatched = 0 // no dispatcher here: the tests publish themselves
	v.Duplicated -= b.parked + b.lost
	v.Unsynced -= int64(b.lost)
	require.True(t, v.OK(), v.String())
	rows, stats := b.rows(t)
	require.Equal(t, rows, stats, "sum(event_count) == count(*)")
	require.Zero(t, b.pending(t))
}

func TestWorker(t *testing.T) {
	t.Parallel()
	ctx := context.Background()

	t.Run("Defaults", func(t *testing.T) {
		t.Parallel()
		b := setup(t)
		w, err := worker.New(b.st, b.rdb, b.pg.Pool, nil, nil)
		require.NoError(t, err)
		require.NotEmpty(t, w.Consumer())
		require.NoError(t, w.Stop(ctx)) // before Start: a no-op that closes Stopped
		<-w.Stopped()
	})

	t.Run("InvalidConfigNamesField", func(t *testing.T) {
		t.Parallel()
		b := setup(t)
		for field, cfg := range map[string]*worker.Config{
			"BatchSize":        {BatchSize: -1},
			"Block":            {Block: -time.Second},
			"ClaimIdle":        {ClaimIdle: -time.Second},
			"MaxDeliveries":    {MaxDeliveries: -1},
			"RecordBackoff":    {RecordBackoff: -time.Second},
			"BreakerFailures":  {BreakerFailures: -1},
			"BreakerTimeout":   {BreakerTimeout: -time.Second},
			"StreakLimit":      {StreakLimit: -1},
			"ConsumerExpiry":   {ConsumerExpiry: -time.Second},
			"ProjectionTarget": {ProjectionTarget: time.Hour},
			"LockTimeout":      {LockTimeout: -time.Second},
			"StatementTimeout": {StatementTimeout: time.Microsecond},
			"ReplayRate":       {ReplayRate: -1},
		} {
			_, err := worker.New(b.st, b.rdb, b.pg.Pool, cfg, nil)
			require.ErrorContains(t, err, field)
		}
	})

	t.Run("StartFailsFast", func(t *testing.T) {
		t.Parallel()
		b := setup(t)
		bad := redis.NewClient(&redis.Options{Addr: "127.0.0.1:1", MaxRetries: -1})
		defer bad.Close()
		w, err := worker.New(b.st, bad, b.pg.Pool, b.config("c"), nil)
		require.NoError(t, err)
		require.ErrorContains(t, w.Start(ctx), "Redis")
	})

	t.Run("StartStopStress", func(t *testing.T) {
		t.Parallel()
		b := setup(t)
		var n atomic.Int64
		testkit.StartStopStress(t, 1, 5, func() startstop.Service {
			w, err := worker.New(b.st, b.rdb, b.pg.Pool, b.config(fmt.Sprint("c", n.Add(1))), nil)
			if !assert.NoError(t, err) {
				return nil
			}
			return w
		})
	})

	t.Run("RespectsContextCancellation", func(t *testing.T) {
		t.Parallel()
		b := setup(t)
		w, err := worker.New(b.st, b.rdb, b.pg.Pool, b.config("c"), nil)
		require.NoError(t, err)
		cctx, cancel := context.WithCancel(ctx)
		require.NoError(t, w.Start(cctx))
		cancel()
		select {
		case <-w.Stopped():
		case <-time.After(waitFor):
			t.Fatal("worker did not stop after its context was cancelled")
		}
	})

	t.Run("ProjectsBatch", func(t *testing.T) {
		t.Parallel()
		b := setup(t)
		b.publish(t, b.write(t, "d1", 30)...)
		b.publish(t, b.write(t, "d2", 7)...)
		b.start(t, b.config("c"))
		b.waitConverged(t)

		// 2026-03-01 23:59:00 + i seconds: the first 60 seconds fall on
		// March 1 and the rest on March 2 (UTC).
		type stat struct {
			device string
			day    string
			n      int64
			first  time.Time
		}
		rows, err := b.pg.Pool.Query(ctx, `SELECT device_key, day::text, event_count, first_occurred_at FROM device_daily_stats ORDER BY 1, 2`)
		require.NoError(t, err)
		got, err := pgx.CollectRows(rows, func(r pgx.CollectableRow) (stat, error) {
			var s stat
			return s, r.Scan(&s.device, &s.day, &s.n, &s.first)
		})
		require.NoError(t, err)
		base := time.Date(2026, 3, 1, 23, 59, 0, 0, time.UTC)
		require.Len(t, got, 2)
		require.Equal(t, stat{"d1", "2026-03-01", 30, base}, stat{got[0].device, got[0].day, got[0].n, got[0].first.UTC()})
		require.Equal(t, stat{"d2", "2026-03-01", 7, base.Add(30 * time.Second)}, stat{got[1].device, got[1].day, got[1].n, got[1].first.UTC()})
	})

	t.Run("PipelineLatencyCountsFirstSyncOnly", func(t *testing.T) {
		t.Parallel()
		b := setup(t)
		reg := prometheus.NewRegistry()
		cfg := b.config("c")
		cfg.Registerer = reg
		evs := b.write(t, "d1", 12)
		b.publish(t, evs...)
		b.start(t, cfg)
		b.waitConverged(t)
		b.publish(t, evs...) // redelivery: already synced, not a new latency
		require.Eventually(t, func() bool {
			return testkit.Metric(t, reg, "outboxd_worker_processed_total", "result", "synced") >= 24
		}, waitFor, 10*time.Millisecond)
		require.Equal(t, 12.0, testkit.Metric(t, reg, "outboxd_pipeline_latency_seconds", "origin", "outbox"))

		// An original the reconciler re-published is counted under its
		// origin.
		late := b.write(t, "d1", 1)[0]
		require.NoError(t, b.rdb.XAdd(ctx, &redis.XAddArgs{Stream: b.stream, Values: late.Message(outbox.OriginReconciler).Values()}).Err())
		b.waitConverged(t)
		require.Equal(t, 1.0, testkit.Metric(t, reg, "outboxd_pipeline_latency_seconds", "origin", "reconciler"))
		require.Equal(t, 12.0, testkit.Metric(t, reg, "outboxd_pipeline_latency_seconds", "origin", "outbox"))
	})

	t.Run("DuplicatesWithinBatch", func(t *testing.T) {
		t.Parallel()
		b := setup(t)
		evs := b.write(t, "d1", 50)
		for range 3 {
			b.publish(t, evs...) // every event three times, all in one batch
		}
		b.start(t, b.config("c"))
		b.waitConverged(t)
		_, stats := b.rows(t)
		require.Equal(t, int64(50), stats)
	})

	t.Run("SameEntryDeliveredTwice", func(t *testing.T) {
		t.Parallel()
		b := setup(t)
		evs := b.write(t, "d1", 20)
		b.publish(t, evs...)
		b.start(t, b.config("c"))
		b.waitConverged(t)
		first := b.event(t, evs[0].ID)

		// The same messages again, as a replay or a duplicate XADD would.
		b.publish(t, evs...)
		b.waitConverged(t)
		rows, stats := b.rows(t)
		require.Equal(t, int64(20), rows)
		require.Equal(t, int64(20), stats)
		again := b.event(t, evs[0].ID)
		require.Equal(t, first.SyncedAt, again.SyncedAt, "syncedAt is set once")
	})

	t.Run("SameEventToTwoWorkersAtOnce", func(t *testing.T) {
		t.Parallel()
		b := setup(t)
		evs := append(b.write(t, "d1", 150), b.write(t, "d2", 150)...)
		for _, ev := range evs { // each event twice in a row: with batches
			b.publish(t, ev, ev) // of 7 the copies often go to both workers
		}
		for _, c := range []string{"a", "b"} {
			cfg := b.config(c)
			cfg.BatchSize = 7
			b.start(t, cfg)
		}
		b.waitConverged(t)
		_, stats := b.rows(t)
		require.Equal(t, int64(300), stats)
	})

	// The batch being written and the one read ahead are both finished.
	t.Run("GracefulStopAcknowledgesInFlight", func(t *testing.T) {
		t.Parallel()
		b := setup(t)
		b.publish(t, b.write(t, "d1", 40)...)
		cfg := b.config("c")
		cfg.BatchSize = 7 // a backlog: the next batch is read ahead
		w, err := worker.New(b.st, b.rdb, b.pg.Pool, cfg, nil)
		require.NoError(t, err)
		require.NoError(t, w.Start(ctx))
		require.Eventually(t, func() bool { rows, _ := b.rows(t); return rows > 0 }, waitFor, time.Millisecond)
		require.NoError(t, w.Stop(ctx))
		require.NoError(t, w.Err())
		// Whatever was projected is also synced and acknowledged.
		rows, _ := b.rows(t)
		require.Equal(t, int64(40)-rows, b.unsynced(t))
		require.Zero(t, b.pending(t))
	})
}

func TestWorkerCrashPoints(t *testing.T) {
	t.Parallel()
	ctx := context.Background()

	for _, point := range []string{worker.FaultAfterCommit, worker.FaultAfterSyncedAt} {
		for _, recovery := range []string{"OwnPendingDrainOnRestart", "XAutoClaimByAnother"} {
			t.Run(point+"/"+recovery, func(t *testing.T) {
				t.Parallel()
				b := setup(t)
				b.publish(t, b.write(t, "d1", 25)...)
				faults := &fault.Set{}
				faults.Arm(point, 1)
				cfg := b.config("crashing")
				worker.SetFaults(cfg, faults)
				w, err := worker.New(b.st, b.rdb, b.pg.Pool, cfg, nil)
				require.NoError(t, err)
				require.NoError(t, w.Start(ctx))
				select {
				case <-w.Stopped():
				case <-time.After(waitFor):
					t.Fatal("fault point did not stop the worker")
				}
				require.ErrorIs(t, w.Err(), fault.ErrInjected)
				require.NoError(t, w.Stop(ctx))

				// Crashed after the commit: rows and stats are in, the
				// entries are still pending.
				rows, stats := b.rows(t)
				require.Equal(t, int64(25), rows)
				require.Equal(t, int64(25), stats)
				require.Equal(t, int64(25), b.pending(t))
				if point == worker.FaultAfterCommit {
					require.Equal(t, int64(25), b.unsynced(t))
				} else {
					require.Zero(t, b.unsynced(t))
				}

				next := b.config("crashing") // same name: drains its own PEL
				if recovery == "XAutoClaimByAnother" {
					next = b.config("rescuer")
					next.ClaimIdle = 100 * time.Millisecond
				}
				b.start(t, next)
				b.waitConverged(t)
				rows, stats = b.rows(t)
				require.Equal(t, int64(25), rows)
				require.Equal(t, int64(25), stats, "stats unchanged by the redelivery")
			})
		}
	}

	t.Run("KilledConsumerEntriesReclaimed", func(t *testing.T) {
		t.Parallel()
		b := setup(t)
		b.publish(t, b.write(t, "d1", 30)...)
		require.NoError(t, b.rdb.XGroupCreateMkStream(ctx, b.stream, b.group, "0").Err())
		// A consumer reads everything and dies before doing anything.
		res, err := b.rdb.XReadGroup(ctx, &redis.XReadGroupArgs{Group: b.group, Consumer: "dead", Streams: []string{b.stream, ">"}, Count: 100, Block: -1}).Result()
		require.NoError(t, err)
		require.Len(t, res[0].Messages, 30)
		require.Equal(t, int64(30), b.pending(t))

		cfg := b.config("alive")
		cfg.ClaimIdle = 200 * time.Millisecond
		b.start(t, cfg)
		b.waitConverged(t)
	})
}

func TestWorkerRedisRestartedEmpty(t *testing.T) {
	t.Parallel()
	srv := testkit.NewRedisServer(t)
	b := setupWith(t, srv.Client(), testkit.Name("t"))
	b.publish(t, b.write(t, "d1", 10)...)
	b.start(t, b.config("c"))
	b.waitConverged(t)

	srv.Stop()
	srv.Start() // empty: no stream, no group
	b.publish(t, b.write(t, "d1", 10)...)
	// The worker meets NOGROUP, recreates the group at the start of the new
	// stream and projects the new entries.
	b.waitConverged(t)
	rows, stats := b.rows(t)
	require.Equal(t, int64(20), rows)
	require.Equal(t, int64(20), stats)
}

func TestWorkerDeadLetters(t *testing.T) {
	t.Parallel()
	ctx := context.Background()

	t.Run("NonRetryableRecords", func(t *testing.T) {
		t.Parallel()
		b := setup(t)
		good := b.write(t, "d1", 5)
		b.publish(t, good[:2]...)
		// A malformed message, a message whose original does not exist, and
		// an original without a deviceKey.
		require.NoError(t, b.rdb.XAdd(ctx, &redis.XAddArgs{Stream: b.stream, Values: map[string]any{outbox.PayloadField: "{not json"}}).Err())
		ghost := *good[0]
		ghost.ID = outbox.NewEventID()
		b.publish(t, &ghost)
		// An original that a writer other than ingest stored without a
		// deviceKey (the store's insert does not validate).
		broken := *good[0]
		broken.ID, broken.IdempotencyKey, broken.DeviceKey = outbox.NewEventID(), "broken", ""
		require.NoError(t, b.st.WriteTx(ctx, func(ctx context.Context, tx outbox.Tx) error {
			return tx.InsertEvents(ctx, []outbox.Event{broken})
		}))
		b.publish(t, &broken)
		b.publish(t, good[2:]...)

		b.start(t, b.config("c"))
		require.Eventually(t, func() bool { return b.drained(t) }, waitFor, 10*time.Millisecond)

		dlq, err := b.rdb.XRange(ctx, b.keys().DLQ(), "-", "+").Result()
		require.NoError(t, err)
		var reasons []string
		for _, m := range dlq {
			reasons = append(reasons, m.Values["code"].(string))
		}
		require.ElementsMatch(t, []string{"bad_message", "original_missing", "invalid_original"}, reasons)

		parked := b.event(t, broken.ID)
		require.NotNil(t, parked.SyncFailure)
		require.Equal(t, outbox.CategoryNonRetryable, parked.SyncFailure.Category)
		require.Equal(t, "failed", parked.State())

		// The other events kept flowing.
		b.events, b.parked = good, 1
		rows, _ := b.rows(t)
		require.Equal(t, int64(5), rows)
		b.check(t)
	})

	t.Run("TrimmedEntry", func(t *testing.T) {
		t.Parallel()
		b := setup(t)
		reg := prometheus.NewRegistry()
		evs := b.write(t, "d1", 4)
		b.publish(t, evs...)
		require.NoError(t, b.rdb.XGroupCreateMkStream(ctx, b.stream, b.group, "0").Err())
		// "c" reads two entries, "dead" one; then all three are trimmed
		// while pending.
		for consumer, n := range map[string]int64{"c": 2, "dead": 1} {
			res, err := b.rdb.XReadGroup(ctx, &redis.XReadGroupArgs{Group: b.group, Consumer: consumer, Streams: []string{b.stream, ">"}, Count: n, Block: -1}).Result()
			require.NoError(t, err)
			require.Len(t, res[0].Messages, int(n))
		}
		require.NoError(t, b.rdb.XTrimMaxLen(ctx, b.stream, 1).Err())

		// "c" drains its own PEL (entries with nil values), and claims the
		// dead one's (XAUTOCLAIM returns it as deleted).
		cfg := b.config("c")
		cfg.Registerer, cfg.ClaimIdle = reg, 100*time.Millisecond
		b.start(t, cfg)
		for _, m := range b.waitDeadLetters(t, 3) {
			require.Equal(t, "trimmed", m.Values["code"])
			require.Equal(t, outbox.CategoryInfrastructure, m.Values["category"])
		}
		requireMetric(t, 3.0, func() float64 { return testkit.Metric(t, reg, "outboxd_worker_trimmed_total") })
		requireMetric(t, 3.0, func() float64 {
			return testkit.Metric(t, reg, "outboxd_worker_dead_letters_total", "category", outbox.CategoryInfrastructure, "code", "trimmed")
		})
		// Their originals stay pending, not parked: the reconciler's
		// backstop (reconciler.TestReconcilerFaults/StreamTrimmed shows it).
		for _, ev := range evs[:3] {
			require.Nil(t, b.event(t, ev.ID).SyncFailure)
		}
		b.events, b.lost = evs[3:], 3
		b.check(t)
	})

	t.Run("PoisonAfterMaxDeliveries", func(t *testing.T) {
		t.Parallel()
		b := setup(t)
		reg := prometheus.NewRegistry()
		evs := b.write(t, "d1", 6)
		bad := evs[3].ID
		var mu sync.Mutex
		var tries []time.Time // deliveries of bad alone (the batch's own try splits first)
		cfg := b.config("c")
		cfg.MaxDeliveries, cfg.RecordBackoff, cfg.Registerer = 3, 100*time.Millisecond, reg
		cfg.Projector = failOn(func(ev *outbox.Event, alone bool) error {
			if ev.ID != bad {
				return nil
			}
			if alone {
				mu.Lock()
				tries = append(tries, time.Now())
				mu.Unlock()
			}
			return fmt.Errorf("%w: this one never works", worker.ErrRecord)
		})
		b.publish(t, evs...)
		b.start(t, cfg)
		dl := b.waitDeadLetters(t, 1)
		requireDeadLetter(t, reg, dl[0], bad, outbox.CategoryPoison, "projection_failed", 3)
		parked := b.event(t, bad)
		require.Equal(t, outbox.CategoryPoison, parked.SyncFailure.Category)
		require.Equal(t, int64(3), parked.SyncFailure.Deliveries)
		require.Zero(t, b.rdb.HLen(ctx, b.keys().Failures()).Val(), "the budget leaves with the entry")

		// Three deliveries spaced by the backoff: about 100ms, then 200ms
		// (±25% jitter).
		mu.Lock()
		require.Len(t, tries, 3)
		gap1, gap2 := tries[1].Sub(tries[0]), tries[2].Sub(tries[1])
		mu.Unlock()
		t.Logf("deliveries %s and %s apart", gap1, gap2)
		require.GreaterOrEqual(t, gap1, 75*time.Millisecond)
		require.GreaterOrEqual(t, gap2, 150*time.Millisecond)

		b.events, b.parked = append(evs[:3:3], evs[4:]...), 1
		b.check(t)
	})
}

// requireMetric waits until value() is want: the worker counts a batch
// after it is acknowledged, so a test that saw the acknowledgement may look
// a moment too early.
func requireMetric(t *testing.T, want float64, value func() float64) {
	t.Helper()
	require.Eventually(t, func() bool { return value() == want }, waitFor, 5*time.Millisecond, "metric never reached %v (last %v)", want, value())
}

// failOn is the default projector, except that a transaction holding an
// event for which fail returns an error fails with it; alone tells that the
// event is the transaction's only one (a delivery of its own, or the
// worker's split of a failed batch).
func failOn(fail func(ev *outbox.Event, alone bool) error) worker.Projector {
	projector := readmodel.NewProjector()
	return worker.ProjectorFunc(func(ctx context.Context, tx pgx.Tx, events []*outbox.Event) error {
		for _, ev := range events {
			if err := fail(ev, len(events) == 1); err != nil {
				return err
			}
		}
		return projector.Project(ctx, tx, events)
	})
}

// waitDeadLetters waits until the stream is drained with n dead letters,
// and returns them.
func (b *testBundle) waitDeadLetters(t *testing.T, n int64) []redis.XMessage {
	t.Helper()
	ctx := context.Background()
	require.Eventually(t, func() bool {
		return b.drained(t) && b.rdb.XLen(ctx, b.keys().DLQ()).Val() == n
	}, waitFor, 10*time.Millisecond)
	dl, err := b.rdb.XRange(ctx, b.keys().DLQ(), "-", "+").Result()
	require.NoError(t, err)
	return dl
}

// requireDeadLetter checks a dead letter's event, category, reason and
// deliveries, and that the worker counted it in
// outboxd_worker_dead_letters_total.
func requireDeadLetter(t *testing.T, reg *prometheus.Registry, dl redis.XMessage, eventID, category, reason string, deliveries int) {
	t.Helper()
	require.Equal(t, eventID, dl.Values["eventId"])
	require.Equal(t, category, dl.Values["category"])
	require.Equal(t, reason, dl.Values["code"])
	require.Equal(t, strconv.Itoa(deliveries), dl.Values["deliveries"])
	requireMetric(t, 1, func() float64 {
		return testkit.Metric(t, reg, "outboxd_worker_dead_letters_total", "category", category, "code", reason)
	})
}
