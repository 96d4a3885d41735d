package worker_test

import (
	"context"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/outboxd/outboxd/internal/testkit"
	"github.com/outboxd/outboxd/projection"
)

// TestSeveralReadModels: two groups on one stream, each with its own
// projector (the default one, and a SQL projection into a table of the
// test's own), each keep their read model exactly once through a
// redelivery of every entry; only the group that owns syncedAt sets it
// (Config.LeavesSynced on the other).
func TestSeveralReadModels(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	b := setup(t)
	_, err := b.pg.Pool.Exec(ctx, `CREATE TABLE device_counts (device text PRIMARY KEY, n bigint NOT NULL);
		CREATE TABLE seen (event_id text PRIMARY KEY, device text NOT NULL)`)
	require.NoError(t, err)
	file, err := projection.Parse("seen.sql", `-- key: seen.event_id
WITH ins AS (INSERT INTO seen VALUES (:eventId, :deviceKey) ON CONFLICT DO NOTHING RETURNING device)
INSERT INTO device_counts AS c SELECT device, count(*) FROM ins GROUP BY 1 ORDER BY 1
ON CONFLICT (device) DO UPDATE SET n = c.n + EXCLUDED.n`)
	require.NoError(t, err)

	other := b.config("o")
	other.Group, other.Projector, other.LeavesSynced = "orders", file, true
	b.start(t, other)
	events := append(b.write(t, "a", 10), b.write(t, "b", 10)...)
	b.publish(t, events...)
	b.publish(t, events...) // every entry again: a redelivery

	require.Eventually(t, func() bool { return testkit.Drained(ctx, b.rdb, b.stream, "orders") }, 30*time.Second, 10*time.Millisecond)
	var seen, counted int64
	require.NoError(t, b.pg.Pool.QueryRow(ctx, `SELECT (SELECT count(*) FROM seen), (SELECT coalesce(sum(n), 0) FROM device_counts)`).Scan(&seen, &counted))
	require.Equal(t, int64(20), seen)
	require.Equal(t, int64(20), counted, "counted once")
	for _, ev := range events {
		require.Nil(t, b.event(t, ev.ID).SyncedAt, "a group that leaves syncedAt does not set it")
	}

	b.start(t, b.config("owner")) // the owning group, the default projector
	b.waitConverged(t)            // every original synced, its rows and stats once
	require.NoError(t, b.pg.Pool.QueryRow(ctx, `SELECT (SELECT count(*) FROM seen), (SELECT coalesce(sum(n), 0) FROM device_counts)`).Scan(&seen, &counted))
	require.Equal(t, []int64{20, 20}, []int64{seen, counted})
}
