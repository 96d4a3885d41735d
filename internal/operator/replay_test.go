package operator_test

import (
	"context"
	"slices"
	"sync/atomic"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/stretchr/testify/require"

	"github.com/outboxd/outboxd/internal/operator"
	"github.com/outboxd/outboxd/internal/readmodel"
	"github.com/outboxd/outboxd/internal/testkit"
	"github.com/outboxd/outboxd/outbox"
	"github.com/outboxd/outboxd/worker"
)

// TestReplayWindow: a replay by boundary re-publishes the window's
// originals only (the count and the stream entries), with origin replay and
// their own idempotency keys, in chunks, and leaves the read model as it
// was. On both stores.
func TestReplayWindow(t *testing.T) {
	t.Parallel()
	onBothStores(t, func(t *testing.T, b *pipelineBundle) {
		ctx := context.Background()
		events := b.write(t, "d1", hours(8)...)
		other := b.write(t, "d2", hours(8)...)
		b.start(t, nil)
		all := append(slices.Clone(events), other...)
		b.waitDrained(t, all...)
		rows, stats := b.readModel(t)
		mark := b.laneLastID(t)

		q := operator.ReplayQuery{EventsQuery: operator.EventsQuery{From: day0.Add(2 * time.Hour), To: day0.Add(5 * time.Hour),
			SourceKey: "src", DeviceKey: "d1"}, DryRun: true}
		res, err := b.op.Replay(ctx, q)
		require.NoError(t, err)
		require.Equal(t, int64(3), *res.Count)
		require.Equal(t, mark, b.laneLastID(t), "a dry run publishes nothing")

		q.DryRun, q.Limit = false, 2
		published, chunks := 0, 0
		for {
			res, err = b.op.Replay(ctx, q)
			require.NoError(t, err)
			published += res.Published
			chunks++
			if res.Done {
				break
			}
			q.After = res.Next
		}
		require.Equal(t, 3, published)
		require.Equal(t, 2, chunks)
		msgs := b.laneSince(t, mark)
		require.Len(t, msgs, 3, "only the window's originals")
		for i, m := range msgs {
			require.Equal(t, events[2+i].ID, m.EventID)
			require.Equal(t, events[2+i].IdempotencyKey, m.IdempotencyKey)
			require.Equal(t, outbox.OriginReplay, m.Origin)
		}
		b.waitDrained(t, all...)
		rows2, stats2 := b.readModel(t)
		require.Equal(t, rows, rows2, "no row projected again")
		require.Equal(t, stats, stats2, "nothing counted twice")
		b.check(t, all)
	})
}

// TestReplayRebuild: after a projection bug (rows of the wrong device) is
// fixed, a replay with rebuild removes the window's rows and their counts
// and re-projects them through the normal path: correct rows and
// statistics, the rows outside the window untouched.
func TestReplayRebuild(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	b := setupPipeline(t, testkit.NewStore(t))
	right := readmodel.NewProjector()
	var fixed atomic.Bool
	b.start(t, worker.ProjectorFunc(func(ctx context.Context, tx pgx.Tx, events []*outbox.Event) error {
		if fixed.Load() {
			return right.Project(ctx, tx, events)
		}
		wrong := make([]*outbox.Event, len(events))
		for i, ev := range events {
			c := *ev
			c.DeviceKey = "wrong"
			wrong[i] = &c
		}
		return right.Project(ctx, tx, wrong)
	}))
	events := b.write(t, "d1", hours(6)...)
	b.waitDrained(t, events...)
	deviceRows := func(device string) (rows, counted int64) {
		require.NoError(t, b.pg.Pool.QueryRow(ctx, `SELECT count(*) FROM events WHERE device_key = $1`, device).Scan(&rows))
		require.NoError(t, b.pg.Pool.QueryRow(ctx, `SELECT coalesce(sum(event_count), 0) FROM device_daily_stats WHERE device_key = $1`, device).Scan(&counted))
		return rows, counted
	}
	rows, counted := deviceRows("wrong")
	require.Equal(t, [2]int64{6, 6}, [2]int64{rows, counted}, "the bug at work")

	fixed.Store(true)
	q := operator.ReplayQuery{EventsQuery: operator.EventsQuery{From: day0, To: day0.Add(4 * time.Hour), Limit: 3}, Rebuild: true}
	var removed int64
	for {
		res, err := b.op.Replay(ctx, q)
		require.NoError(t, err)
		removed += res.RemovedRows
		if res.Done {
			break
		}
		q.After = res.Next
	}
	require.Equal(t, int64(4), removed)
	b.waitDrained(t, events...)
	rows, counted = deviceRows("d1")
	require.Equal(t, [2]int64{4, 4}, [2]int64{rows, counted}, "the window recomputed")
	rows, counted = deviceRows("wrong")
	require.Equal(t, [2]int64{2, 2}, [2]int64{rows, counted}, "outside the window untouched")

	_, err := b.op.Replay(ctx, operator.ReplayQuery{EventsQuery: operator.EventsQuery{From: day0, To: day0.Add(24 * time.Hour)}, Rebuild: true})
	require.NoError(t, err)
	b.waitDrained(t, events...)
	rows, counted = deviceRows("d1")
	require.Equal(t, [2]int64{6, 6}, [2]int64{rows, counted})
	rows, _ = deviceRows("wrong")
	require.Zero(t, rows)
	var wrongStats int
	require.NoError(t, b.pg.Pool.QueryRow(ctx, `SELECT count(*) FROM device_daily_stats WHERE device_key = 'wrong'`).Scan(&wrongStats))
	require.Zero(t, wrongStats, "the wrong statistics rows are gone")
	var first, last time.Time
	require.NoError(t, b.pg.Pool.QueryRow(ctx, `SELECT first_occurred_at, last_occurred_at FROM device_daily_stats WHERE device_key = 'd1'`).Scan(&first, &last))
	require.True(t, day0.Equal(first))
	require.True(t, day0.Add(5*time.Hour).Equal(last))
	b.check(t, events)
}
