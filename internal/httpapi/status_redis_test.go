package httpapi_test

import (
	"context"
	"fmt"
	"testing"

	"github.com/redis/go-redis/v9"
	"github.com/stretchr/testify/require"

	ostatus "github.com/outboxd/outboxd/internal/status"
	"github.com/outboxd/outboxd/internal/stream"
	"github.com/outboxd/outboxd/internal/testkit"
)

// TestStatusRedisMemory: the status shows every consumer group's lag,
// Redis's memory and policy, flags an evicting policy, and names a full
// Redis as a stall; the redis readiness check (Client.Writable) fails
// while it is full.
func TestStatusRedisMemory(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	srv := testkit.NewRedisServer(t)
	rdb := srv.Client()
	rc, err := stream.NewClient(rdb, nil)
	require.NoError(t, err)
	keys := stream.NewKeys(testkit.Name("s"), "g")
	for range 10 {
		require.NoError(t, rdb.XAdd(ctx, &redis.XAddArgs{Stream: keys.Stream(), Values: map[string]any{"payload": "{}"}}).Err())
	}
	_, err = rc.Group(keys, "c").Ensure(ctx)
	require.NoError(t, err)
	require.NoError(t, rdb.XGroupCreate(ctx, keys.Stream(), "audit", "0").Err())
	_, err = rc.Group(keys, "c").Read(ctx, ">", 4, -1)
	require.NoError(t, err)
	status := &ostatus.Status{Store: testkit.NewStore(t), Redis: rc, Stream: keys.Name(), Group: keys.Group()}

	snap := status.Snapshot(ctx)
	require.Equal(t, []ostatus.GroupCounts{
		{Name: "audit", Lag: ptr(int64(10))},
		{Name: "g", Pending: 4, Lag: ptr(int64(6)), EntriesRead: 4},
	}, snap.Stream.Groups)
	require.NotNil(t, snap.Redis)
	require.Positive(t, snap.Redis.UsedMemoryBytes)
	require.Equal(t, "noeviction", snap.Redis.MaxMemoryPolicy)
	require.False(t, snap.Redis.EvictionMisconfigured)
	require.Empty(t, snap.Stalled)
	require.NoError(t, rc.Writable(ctx))

	require.NoError(t, rdb.ConfigSet(ctx, "maxmemory-policy", "allkeys-lru").Err())
	snap = status.Snapshot(ctx)
	require.True(t, snap.Redis.EvictionMisconfigured)

	require.NoError(t, rdb.ConfigSet(ctx, "maxmemory-policy", "noeviction").Err())
	require.NoError(t, rdb.ConfigSet(ctx, "maxmemory", fmt.Sprint(snap.Redis.UsedMemoryBytes/2)).Err())
	snap = status.Snapshot(ctx)
	require.True(t, snap.Redis.Full)
	require.Equal(t, []string{"redis refuses writes (used_memory at maxmemory)"}, snap.Stalled)
	require.ErrorIs(t, rc.Writable(ctx), stream.ErrFull)
}

// TestStatusRoutedStreams: the status shows the lag of every consumer
// group of each routed stream, by partition.
func TestStatusRoutedStreams(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	rdb, prefix := testkit.NewRedis(t)
	rc, err := stream.NewClient(rdb, nil)
	require.NoError(t, err)
	keys := stream.NewKeys(prefix+":main", "g")
	routed := stream.NewKeys(prefix+":routed", "g").Split(2)
	for i, k := range routed.AllPartitions() {
		for range 3 + i {
			require.NoError(t, rdb.XAdd(ctx, &redis.XAddArgs{Stream: k.Stream(), Values: map[string]any{"payload": "{}"}}).Err())
		}
		require.NoError(t, rdb.XGroupCreate(ctx, k.Stream(), "py", "0").Err())
	}
	_, err = rc.Group(routed, "c").Ensure(ctx)
	require.NoError(t, err)
	_, err = rc.Group(routed, "c").Read(ctx, ">", 2, -1)
	require.NoError(t, err)
	status := &ostatus.Status{Store: testkit.NewStore(t), Redis: rc, Stream: keys.Name(), Group: keys.Group(),
		RoutedStreams: []string{routed.Name()}, PartitionLeases: []string{"l0", "l1"}}

	snap := status.Snapshot(ctx)
	require.Equal(t, []ostatus.RoutedStreamCounts{
		{Name: routed.Stream(), Groups: []ostatus.GroupCounts{
			{Name: "g", Pending: 2, Lag: ptr(int64(1)), EntriesRead: 2},
			{Name: "py", Lag: ptr(int64(3))},
		}},
		{Name: routed.Partition(1, 2).Stream(), Groups: []ostatus.GroupCounts{{Name: "py", Lag: ptr(int64(4))}}},
	}, snap.RoutedStreams)
}
