package stream_test

import (
	"context"
	"fmt"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/outboxd/outboxd/internal/failpolicy"
	"github.com/outboxd/outboxd/internal/stream"
	"github.com/outboxd/outboxd/internal/testkit"
	"github.com/outboxd/outboxd/outbox"
)

// TestClusterCommandPaths runs every kind of command the package sends on
// a real Redis Cluster, for each of four partitions (each in a slot of its
// own): a publish across partitions (a pipeline split by node), the
// group's reads, a Finish with dead letters and charges (MULTI/EXEC), an
// acknowledgement (ackScript), the streak's scripts, Touch, Trim (its
// script, INFO server on every master), Memory (INFO memory on every
// master) and the figures summed over partitions. Without one hash tag a
// partition's MULTI/EXEC and scripts would fail with CROSSSLOT.
func TestClusterCommandPaths(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	cluster := testkit.NewRedisCluster(t)
	rdb, err := stream.OpenRedis(cluster.URL(), stream.Topology{Cluster: true}, nil)
	require.NoError(t, err)
	t.Cleanup(func() { _ = rdb.Close() })
	c, err := stream.NewClient(rdb, nil)
	require.NoError(t, err)
	require.NoError(t, c.Ping(ctx))

	keys := stream.NewKeys(testkit.Name("cluster"), "g").Split(4)
	var events []*outbox.Event
	for i := range 40 {
		events = append(events, &outbox.Event{ID: fmt.Sprint("e-", i), SourceKey: "s", DeviceKey: fmt.Sprint("d-", i),
			OccurredAt: time.Now().UTC()})
	}
	require.NoError(t, c.Publisher(keys, nil, nil).PublishEvents(ctx, events, outbox.OriginOutbox))

	total := int64(0)
	for _, k := range keys.AllPartitions() {
		g := c.Group(k, "c")
		_, err := g.Ensure(ctx)
		require.NoError(t, err)
		got, err := g.Read(ctx, ">", 100, -1)
		require.NoError(t, err)
		require.NotEmpty(t, got, "partition %d holds events", k.PartitionIndex())
		total += int64(len(got))
		ids := make([]string, len(got))
		for i, e := range got {
			ids[i] = e.ID
		}
		require.NoError(t, g.Touch(ctx, 0, 100))
		if len(ids) >= 3 {
			acked, err := g.Finish(ctx, stream.Finish{
				DeadLetters: []stream.DeadLetter{{Category: outbox.CategoryNonRetryable, Code: "bad_message", EntryID: ids[0], Payload: "p"}},
				Ack:         ids[:1], Charge: map[string]int64{ids[1]: 1},
			})
			require.NoError(t, err, "MULTI/EXEC of one partition stays in its slot")
			require.Equal(t, int64(1), acked)
			ids = ids[1:]
		}
		acked, err := g.Finish(ctx, stream.Finish{Ack: ids})
		require.NoError(t, err, "the ack script's keys share a slot")
		require.Equal(t, int64(len(ids)), acked)

		s := c.Streak(k, stream.ComponentWorker)
		_, err = s.Fail(ctx, failpolicy.Failure{Code: "x", Class: failpolicy.ClassRecord, Source: failpolicy.SourcePostgres}, 3)
		require.NoError(t, err)
		_, err = s.Succeed(ctx, failpolicy.SourcePostgres)
		require.NoError(t, err)
		_, _, err = s.Resume(ctx, "")
		require.NoError(t, err)

		_, err = c.Trim(ctx, k, 0)
		require.NoError(t, err)
	}
	require.EqualValues(t, len(events), total, "every event read once")
	f := c.AllFigures(ctx, keys)
	require.NoError(t, f.StreamErr)
	require.NoError(t, f.DLQErr)
	require.NoError(t, f.HaltsErr)
	require.Zero(t, f.Pending)
	require.LessOrEqual(t, f.DLQLength, int64(4))
	require.Positive(t, f.DLQLength)
	m, err := c.Memory(ctx)
	require.NoError(t, err)
	require.Positive(t, m.Used)
	require.Equal(t, stream.PolicyNoEviction, m.Policy)
	require.NoError(t, c.Writable(ctx))
}

// TestOpenRedisTopologies: the three topologies open the client of their
// kind, a URL outside a topology's form is an error, and a Cluster with
// Sentinel is refused.
func TestOpenRedisTopologies(t *testing.T) {
	t.Parallel()
	for _, tc := range []struct {
		url  string
		topo stream.Topology
		kind string
	}{
		{"redis://127.0.0.1:6379/0", stream.Topology{}, "*redis.Client"},
		{"redis://127.0.0.1:7000?addr=127.0.0.1:7001", stream.Topology{Cluster: true}, "*redis.ClusterClient"},
		{"redis://127.0.0.1:26379/0?addr=127.0.0.1:26380", stream.Topology{SentinelMaster: "m"}, "*redis.Client"},
	} {
		rdb, err := stream.OpenRedis(tc.url, tc.topo, nil)
		require.NoError(t, err, tc.url)
		require.Equal(t, tc.kind, fmt.Sprintf("%T", rdb))
		_ = rdb.Close()
	}
	_, err := stream.OpenRedis("redis://127.0.0.1:6379/0", stream.Topology{Cluster: true, SentinelMaster: "m"}, nil)
	require.ErrorContains(t, err, "Sentinel")
	_, err = stream.OpenRedis("redis://127.0.0.1:7000?bogus=1", stream.Topology{Cluster: true}, nil)
	require.Error(t, err)
	_, err = stream.OpenRedis("redis://127.0.0.1:26379/0?addr=x:1&nope=2", stream.Topology{SentinelMaster: "m"}, nil)
	require.Error(t, err)
}
