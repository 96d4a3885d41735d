package operator_test

import (
	"context"
	"fmt"
	"sync/atomic"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/prometheus/client_golang/prometheus"
	"github.com/redis/go-redis/v9"
	"github.com/stretchr/testify/require"

	"github.com/outboxd/outboxd/dispatcher"
	"github.com/outboxd/outboxd/internal/operator"
	"github.com/outboxd/outboxd/internal/readmodel"
	"github.com/outboxd/outboxd/internal/stream"
	"github.com/outboxd/outboxd/internal/testkit"
	"github.com/outboxd/outboxd/outbox"
	"github.com/outboxd/outboxd/store"
	"github.com/outboxd/outboxd/worker"
)

// pipelineBundle is a pipeline (a dispatcher and a worker) on real stores
// with an Operator over them, for the tests of the actions end to end.
type pipelineBundle struct {
	st      store.Store
	rdb     *redis.Client
	rc      *stream.Client
	pg      *testkit.Postgres
	keys    stream.Keys
	writer  *outbox.Writer
	op      *operator.Operator
	breaker atomic.Pointer[func(ev *outbox.Event) error] // the worker's projection fails while it returns an error
}

// setupPipeline builds an Operator over st, the test's own Redis keys and
// PostgreSQL database; start runs the pipeline.
func setupPipeline(t *testing.T, st store.Store) *pipelineBundle {
	t.Helper()
	rdb, prefix := testkit.NewRedis(t)
	rc, err := stream.NewClient(rdb, nil)
	require.NoError(t, err)
	b := &pipelineBundle{st: st, rdb: rdb, rc: rc, pg: testkit.NewPostgres(t), keys: stream.NewKeys(prefix+":stream", "read-model")}
	b.writer = outbox.NewWriter(st, &outbox.WriterConfig{Stream: b.keys.Name()})
	b.op, err = operator.New(&operator.Config{Store: st, Redis: rc, ReadModel: readmodel.New(b.pg.Pool), Stream: b.keys.Name(),
		Group: b.keys.Group(), Registerer: prometheus.NewRegistry()}, testkit.Logger(t))
	require.NoError(t, err)
	return b
}

// bothStores open a fresh store of each kind: SQLite, and MongoDB on lungo
// (or the replica set of OUTBOXD_TEST_MONGO_URI).
var bothStores = map[string]func(testing.TB) store.Store{
	"SQLite":  func(t testing.TB) store.Store { return testkit.NewSQLite(t) },
	"MongoDB": func(t testing.TB) store.Store { return testkit.NewMongo(t, nil) },
}

// onBothStores runs test in parallel subtests, on a pipeline bundle over
// each of bothStores.
func onBothStores(t *testing.T, test func(t *testing.T, b *pipelineBundle)) {
	t.Helper()
	for name, open := range bothStores {
		t.Run(name, func(t *testing.T) {
			t.Parallel()
			test(t, setupPipeline(t, open(t)))
		})
	}
}

// day0 is the first occurrence time of the pipeline tests' originals.
var day0 = time.Date(2026, 10, 1, 0, 0, 0, 0, time.UTC)

// hours returns n times an hour apart from day0.
func hours(n int) []time.Time {
	out := make([]time.Time, n)
	for i := range out {
		out[i] = day0.Add(time.Duration(i) * time.Hour)
	}
	return out
}

// start runs a dispatcher and a worker until the test ends. The worker's
// projection goes through b.breaker, so a test can break a record's
// projection and fix it again; project defaults to the demo read model's.
func (b *pipelineBundle) start(t *testing.T, project worker.Projector) {
	t.Helper()
	ctx := context.Background()
	d, err := dispatcher.New(b.st, b.rdb, &dispatcher.Config{Stream: b.keys.Name(), LeaseTTL: time.Second}, testkit.Logger(t))
	require.NoError(t, err)
	require.NoError(t, d.Start(ctx))
	t.Cleanup(func() { require.NoError(t, d.Stop(context.Background())) })
	if project == nil {
		project = readmodel.NewProjector()
	}
	w, err := worker.New(b.st, b.rdb, b.pg.Pool, &worker.Config{Stream: b.keys.Name(), Group: b.keys.Group(), Consumer: "c",
		Block: 50 * time.Millisecond, BackoffMax: 200 * time.Millisecond, ClaimIdle: 50 * time.Millisecond,
		ClaimInterval: 20 * time.Millisecond, MaxDeliveries: 2,
		Projector: worker.ProjectorFunc(func(ctx context.Context, tx pgx.Tx, events []*outbox.Event) error {
			if f := b.breaker.Load(); f != nil {
				for _, ev := range events {
					if err := (*f)(ev); err != nil {
						return err
					}
				}
			}
			return project.Project(ctx, tx, events)
		})}, testkit.Logger(t))
	require.NoError(t, err)
	require.NoError(t, w.Start(ctx))
	t.Cleanup(func() { require.NoError(t, w.Stop(context.Background())) })
}

// startPoisoning starts the pipeline with a projection that fails for bad
// (a bug), and waits until bad is parked and dead-lettered and everything
// else is drained; b.breaker.Store(nil) fixes the bug.
func (b *pipelineBundle) startPoisoning(t *testing.T, bad *outbox.Event) {
	t.Helper()
	fail := func(ev *outbox.Event) error {
		if ev.ID == bad.ID {
			return fmt.Errorf("%w: a projection bug", worker.ErrRecord)
		}
		return nil
	}
	b.breaker.Store(&fail)
	b.start(t, nil)
	require.Eventually(t, func() bool {
		return b.drained(t) && testkit.Event(t, b.st, bad.ID).State() == outbox.StateFailed &&
			b.rdb.XLen(context.Background(), b.keys.DLQ()).Val() == 1
	}, waitFor, 10*time.Millisecond)
}

// write stores one original of device per occurrence time and returns
// them.
func (b *pipelineBundle) write(t *testing.T, device string, occurred ...time.Time) []*outbox.Event {
	t.Helper()
	return testkit.WriteOccurred(t, b.writer, b.st, device, occurred...)
}

// drained reports that the group read the whole stream and acknowledged
// everything, and the outbox is relayed.
func (b *pipelineBundle) drained(t *testing.T) bool {
	t.Helper()
	ctx := context.Background()
	c, err := b.st.Counts(ctx)
	if err != nil || c.Undispatched > 0 {
		return false
	}
	return testkit.Drained(ctx, b.rdb, b.keys.Name(), b.keys.Group())
}

// waitDrained waits until the pipeline is drained and every one of events
// is synced.
func (b *pipelineBundle) waitDrained(t *testing.T, events ...*outbox.Event) {
	t.Helper()
	require.Eventually(t, func() bool {
		if !b.drained(t) {
			return false
		}
		for _, ev := range events {
			if got := testkit.Event(t, b.st, ev.ID); got.State() != outbox.StateSynced {
				return false
			}
		}
		return true
	}, waitFor, 10*time.Millisecond)
}

// check runs the checker of docs/reliability.md over events: one row each,
// the statistics equal to the rows, nothing left over.
func (b *pipelineBundle) check(t *testing.T, events []*outbox.Event) {
	t.Helper()
	keys := make([]string, len(events))
	for i, ev := range events {
		keys[i] = ev.IdempotencyKey
	}
	v, err := testkit.Check(context.Background(), b.st, b.pg.Pool, b.rdb, b.keys.Name(), b.keys.Group(), keys)
	require.NoError(t, err)
	require.True(t, v.OK(), v.String())
}

// readModel returns the rows (with their projection time) and the
// statistics rows, as text, for comparisons.
func (b *pipelineBundle) readModel(t *testing.T) (rows, stats []string) {
	t.Helper()
	ctx := context.Background()
	r, err := b.pg.Pool.Query(ctx, `SELECT event_id || ' ' || device_key || ' ' || projected_at::text FROM events ORDER BY event_id`)
	require.NoError(t, err)
	rows, err = pgx.CollectRows(r, pgx.RowTo[string])
	require.NoError(t, err)
	s, err := b.pg.Pool.Query(ctx, `SELECT source_key || ' ' || device_key || ' ' || day::text || ' ' || event_count::text || ' ' ||
		first_occurred_at::text || ' ' || last_occurred_at::text FROM device_daily_stats ORDER BY 1`)
	require.NoError(t, err)
	stats, err = pgx.CollectRows(s, pgx.RowTo[string])
	require.NoError(t, err)
	return rows, stats
}

// rowCount counts the read-model rows of the original id.
func (b *pipelineBundle) rowCount(t *testing.T, id string) int {
	t.Helper()
	var n int
	require.NoError(t, b.pg.Pool.QueryRow(context.Background(), `SELECT count(*) FROM events WHERE event_id = $1`, id).Scan(&n))
	return n
}

// laneSince returns the messages of the replay lane, where replays go,
// after id.
func (b *pipelineBundle) laneSince(t *testing.T, id string) []outbox.Message {
	t.Helper()
	msgs, err := b.rdb.XRange(context.Background(), b.keys.Replay(), "("+id, "+").Result()
	require.NoError(t, err)
	out := make([]outbox.Message, len(msgs))
	for i, m := range msgs {
		out[i], err = outbox.DecodeMessage(m.Values)
		require.NoError(t, err)
	}
	return out
}

// laneLastID is the last id added to the replay lane (which the worker
// creates when it starts).
func (b *pipelineBundle) laneLastID(t *testing.T) string {
	t.Helper()
	info, err := b.rdb.XInfoStream(context.Background(), b.keys.Replay()).Result()
	require.NoError(t, err)
	return info.LastGeneratedID
}
