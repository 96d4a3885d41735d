package reconciler_test

import (
	"context"
	"fmt"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/outboxd/outboxd/internal/clock"
	"github.com/outboxd/outboxd/internal/stream"
	"github.com/outboxd/outboxd/internal/testkit"
	"github.com/outboxd/outboxd/outbox"
	"github.com/outboxd/outboxd/reconciler"
	"github.com/outboxd/outboxd/store"
	"github.com/outboxd/outboxd/worker"
)

// TestEndToEndRedisRestartedEmpty: originals were dispatched into the
// stream, then Redis restarted empty before the workers consumed them. Once
// the worker has recreated the group (recording the reset in the store) the
// reconciler re-publishes them, younger than MinAge as they are, and through
// the normal worker path every original ends synced with exactly one row
// and one count in PostgreSQL; the ones synced before the restart are left
// alone.
func TestEndToEndRedisRestartedEmpty(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	const half = 25

	st := testkit.NewStore(t)
	pg := testkit.NewPostgres(t)
	srv := testkit.NewRedisServer(t)
	name, group := testkit.Name("e2e")+":"+outbox.StreamDefault, stream.GroupDefault
	clk := clock.NewFake(t0)
	writer := outbox.NewWriter(st, &outbox.WriterConfig{Now: clk.Now, Stream: name})

	var keys []string
	write := func(from int) []string {
		inputs := make([]outbox.Input, half)
		for i := range inputs {
			inputs[i] = outbox.Input{SourceKey: "src", DeviceKey: fmt.Sprintf("d%d", (from+i)%3),
				OccurredAt: t0.Add(-time.Duration(from+i) * time.Minute).Format(time.RFC3339)}
		}
		res, err := writer.Write(ctx, inputs)
		require.NoError(t, err)
		ids := make([]string, len(res))
		for i, r := range res {
			keys = append(keys, r.IdempotencyKey)
			ids[i] = r.ID
		}
		return ids
	}
	// dispatch does the dispatcher's job for the undispatched entries: XADD
	// their message, mark them dispatched.
	lease, err := st.AcquireLease(ctx, name, "test", time.Now(), time.Hour)
	require.NoError(t, err)
	dispatch := func(rdb redis.UniversalClient) {
		entries, err := st.Undispatched(ctx, name, store.Partition{}, "", 1000)
		require.NoError(t, err)
		var ids []string
		for _, e := range entries {
			require.NoError(t, rdb.XAdd(ctx, &redis.XAddArgs{Stream: e.Stream, Values: map[string]any{outbox.PayloadField: e.Message}}).Err())
			ids = append(ids, e.ID)
		}
		require.NoError(t, st.MarkDispatched(ctx, lease, ids, clk.Now()))
	}
	startWorker := func(rdb redis.UniversalClient) *worker.Worker {
		w, err := worker.New(st, rdb, pg.Pool, &worker.Config{
			Stream: name, Group: group, Consumer: testkit.Name("c"), Now: clk.Now,
			Block: 50 * time.Millisecond, BackoffMax: 200 * time.Millisecond,
		}, testkit.Logger(t))
		require.NoError(t, err)
		require.NoError(t, w.Start(ctx))
		t.Cleanup(func() { require.NoError(t, w.Stop(context.Background())) })
		return w
	}
	// unsynced is safe inside Eventually (no require): -1 on error.
	unsynced := func() int64 {
		c, err := st.Counts(ctx)
		if err != nil {
			return -1
		}
		return c.Pending
	}

	// The first half flows normally.
	rdb := srv.Client()
	write(0)
	w := startWorker(rdb)
	dispatch(rdb)
	require.Eventually(t, func() bool { return unsynced() == 0 }, 20*time.Second, 20*time.Millisecond)
	require.NoError(t, w.Stop(ctx))

	// The second half is dispatched while no worker runs, then Redis
	// restarts empty: the entries, and the consumer group, are gone.
	clk.Advance(time.Minute)
	write(half)
	dispatch(rdb)
	clk.Advance(time.Second)
	srv.Stop()
	srv.Start()
	rdb = srv.Client() // the old client's pooled connections are dead
	startWorker(rdb)
	require.Equal(t, int64(half), unsynced())

	cfg := &reconciler.Config{Stream: name, Now: clk.Now, MinAge: time.Minute, RequeueAfter: 10 * time.Minute}
	r, err := reconciler.New(st, rdb, cfg, testkit.Logger(t))
	require.NoError(t, err)
	// The worker recreated the group and recorded the reset: the lost
	// half is taken at once, younger than MinAge as it is.
	reset, err := store.LastReset(ctx, st, name)
	require.NoError(t, err)
	require.NotNil(t, reset)
	rep, err := r.Sweep(ctx)
	require.NoError(t, err)
	require.Equal(t, half, rep.Published, "only the lost half: the synced half is no candidate")
	require.False(t, rep.Failed())
	require.Eventually(t, func() bool { return unsynced() == 0 }, 20*time.Second, 20*time.Millisecond)

	require.EventuallyWithT(t, func(c *assert.CollectT) {
		v, err := testkit.Check(ctx, st, pg.Pool, rdb, name, group, keys)
		if assert.NoError(c, err) {
			assert.True(c, v.OK(), "checker: %s", v)
		}
	}, 20*time.Second, 20*time.Millisecond)

	var rows, distinct, counted int64
	require.NoError(t, pg.Pool.QueryRow(ctx, `SELECT count(*), count(DISTINCT event_id), (SELECT coalesce(sum(event_count), 0) FROM device_daily_stats) FROM events`).
		Scan(&rows, &distinct, &counted))
	require.Equal(t, []int64{2 * half, 2 * half, 2 * half}, []int64{rows, distinct, counted})

	// Converged: later sweeps find nothing to do.
	clk.Advance(time.Hour)
	rep, err = r.Sweep(ctx)
	require.NoError(t, err)
	require.Zero(t, rep.Scanned)
	require.Zero(t, rep.OldestUnsyncedAge)
}
