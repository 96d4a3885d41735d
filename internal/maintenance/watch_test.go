package maintenance_test

import (
	"context"
	"fmt"
	"sync/atomic"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/redis/go-redis/v9"
	"github.com/stretchr/testify/require"

	"github.com/outboxd/outboxd/internal/maintenance"
	"github.com/outboxd/outboxd/internal/stream"
	"github.com/outboxd/outboxd/internal/testkit"
)

// TestWatchVerdict runs the watch on a Redis of the test's own: its
// verdict is high while used_memory is at or above MemoryHigh % of
// maxmemory, and not with room (or without a maxmemory); it trims what the
// group acknowledged and exports the group's lag; once stopped it says
// nothing is high and exports none of it.
func TestWatchVerdict(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	srv := testkit.NewRedisServer(t)
	rdb := srv.Client()
	rc, err := stream.NewClient(rdb, nil)
	require.NoError(t, err)
	keys := stream.NewKeys(testkit.Name("stream"), stream.GroupDefault)
	require.NoError(t, rdb.XGroupCreateMkStream(ctx, keys.Stream(), keys.Group(), "0").Err())
	for i := range 5 {
		require.NoError(t, rdb.XAdd(ctx, &redis.XAddArgs{Stream: keys.Stream(), Values: []string{"n", fmt.Sprint(i)}}).Err())
	}
	read, err := rdb.XReadGroup(ctx, &redis.XReadGroupArgs{Group: keys.Group(), Consumer: "c", Streams: []string{keys.Stream(), ">"}, Count: 3}).Result()
	require.NoError(t, err)
	for _, m := range read[0].Messages {
		require.NoError(t, rdb.XAck(ctx, keys.Stream(), keys.Group(), m.ID).Err())
	}

	watch := func(memoryHigh int) (*maintenance.Watch, *prometheus.Registry, *atomic.Int64) {
		reg := prometheus.NewRegistry()
		m, err := maintenance.NewWatchMetrics(reg, keys.Stream())
		require.NoError(t, err)
		verdicts := &atomic.Int64{}
		w := maintenance.NewWatch(maintenance.WatchConfig{Client: rc, Keys: keys, Interval: 5 * time.Millisecond,
			StreamRetention: time.Millisecond, MemoryHigh: memoryHigh, Metrics: m, Verdict: func() { verdicts.Add(1) }})
		return w, reg, verdicts
	}
	mem, err := rc.Memory(ctx)
	require.NoError(t, err)
	require.NoError(t, rdb.ConfigSet(ctx, "maxmemory", fmt.Sprint(2*mem.Used)).Err())

	high, reg, verdicts := watch(10) // used is about half of maxmemory
	roomy, _, _ := watch(99)
	stop := maintenance.StartAll(ctx, high, roomy)
	require.Eventually(t, func() bool {
		return high.High() && verdicts.Load() > 0 && high.Trimmed()+roomy.Trimmed() == 3 &&
			testkit.Metric(t, reg, "outboxd_stream_lag", "group", keys.Group()) == 2
	}, 10*time.Second, 5*time.Millisecond, "the verdict, the trim of the acknowledged entries, the lag")
	require.False(t, roomy.High(), "room below the mark")
	require.Equal(t, float64(2*mem.Used), testkit.Metric(t, reg, "outboxd_redis_maxmemory_bytes"))
	n, err := rdb.XLen(ctx, keys.Stream()).Result()
	require.NoError(t, err)
	require.Equal(t, int64(2), n, "what the group has not acknowledged stays")

	require.NoError(t, rdb.ConfigSet(ctx, "maxmemory", "0").Err())
	require.Eventually(t, func() bool { return !high.High() }, 10*time.Second, 5*time.Millisecond, "no maxmemory: never high")
	require.NoError(t, rdb.ConfigSet(ctx, "maxmemory", fmt.Sprint(2*mem.Used)).Err())
	require.Eventually(t, high.High, 10*time.Second, 5*time.Millisecond)

	stop()
	require.False(t, high.High(), "a stopped watch gives no verdict")
	require.Zero(t, testkit.Metric(t, reg, "outboxd_redis_used_memory_bytes"))
	require.Zero(t, testkit.Metric(t, reg, "outboxd_redis_maxmemory_bytes"))
	require.Zero(t, testkit.Series(t, reg, "outboxd_stream_lag"), "nor a lag")
	require.NoError(t, rdb.ConfigSet(ctx, "maxmemory", "0").Err())
}
