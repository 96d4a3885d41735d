package runner

import (
	"bytes"
	"context"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/outboxd/outboxd/internal/stream"
	"github.com/outboxd/outboxd/internal/testkit"
)

// TestPipelineOnRedisCluster runs the pipeline on a local three-master
// Redis Cluster (--redis-cluster, a seed list as --redis-url) with four
// partitions: an ingest, two dispatchers sharing the partitions and a
// worker, each its own process as far as the stores go. While clients
// write events, `redis-cli --cluster reshard` moves the slot of one
// partition's keys (its stream, dead-letter stream and failure hash share
// it) to another master: its keys migrate one by one, the clients of the
// pipeline are sent ASK and then MOVED. The checker ends it: every
// accepted event synced once, nothing pending in any partition.
func TestPipelineOnRedisCluster(t *testing.T) {
	t.Parallel()
	ctx, cancel := context.WithTimeout(context.Background(), 4*time.Minute)
	defer cancel()
	cluster := testkit.NewRedisCluster(t)
	b := newPipelineBundle(t)
	p := b.pipeline(t) // the store and the read model; Redis is the cluster's
	p.Redis, p.Partitions = cluster.Client(), 4
	b.redisURL = cluster.URL()
	const partitions = "4"
	var out bytes.Buffer
	require.Equal(t, ExitOK, run(ctx, b.args("migrate"), &out, &out), out.String())
	ingest := freeAddr(t)
	start(t, ingest, b.args("ingest", "--http-addr", ingest, "--stream", b.stream, "--partitions", partitions))
	var dispatchers []string
	for range 2 {
		addr := freeAddr(t)
		dispatchers = append(dispatchers, addr)
		start(t, addr, b.args("dispatch", "--http-addr", addr, "--redis-cluster", "--partitions", partitions))
	}
	work := freeAddr(t)
	start(t, work, b.args("work", "--http-addr", work, "--redis-cluster", "--partitions", partitions))

	const events = 1500
	c := &loadClient{}
	sent := make(chan struct{})
	go func() {
		defer close(sent)
		c.send(ctx, func(int) string { return "http://" + ingest }, 0, events, 6)
	}()
	require.Eventually(t, func() bool { return c.n.Load() >= events/5 }, time.Minute, 5*time.Millisecond)

	// The partition whose slot is nearest the start of its master's range
	// moves with the fewest slots before it (redis-cli takes a master's
	// slots in order).
	all := stream.NewKeys(b.stream, b.group).Split(4).AllPartitions()
	key := all[0].Stream()
	for _, k := range all[1:] {
		s, best := cluster.KeySlot(k.Stream()), cluster.KeySlot(key)
		if s.Slot-s.RangeStart < best.Slot-best.RangeStart {
			key = k.Stream()
		}
	}
	began, before := time.Now(), c.n.Load()
	moved := cluster.MoveSlot(ctx, key)
	t.Logf("moved slot %d (%s) and the %d before it in %s; %d events accepted meanwhile",
		moved.Slot, key, moved.Slot-moved.RangeStart, time.Since(began).Round(time.Millisecond), c.n.Load()-before)

	<-sent
	require.NoError(t, ctx.Err(), "clients did not finish")
	require.Empty(t, c.failures, "requests dropped or refused by the server")
	require.Len(t, c.keys(), events)
	testkit.RequireConverged(t, p, c.keys(), 2*time.Minute)
	// The two dispatchers share the four partitions, two each.
	require.Eventually(t, func() bool {
		s, err := (&devBundle{base: "http://" + dispatchers[0]}).status()
		if err != nil || s.Dispatcher == nil || len(s.Dispatcher.Partitions) != 4 {
			return false
		}
		held := map[string]int{}
		for _, ps := range s.Dispatcher.Partitions {
			if !ps.LeaderAlive {
				return false
			}
			held[ps.Leader]++
		}
		return len(held) == 2
	}, time.Minute, 50*time.Millisecond, "two dispatchers share the four partitions")
	for _, k := range all {
		n, err := p.Redis.XLen(ctx, k.Stream()).Result()
		require.NoError(t, err)
		require.Positive(t, n, "partition stream %s holds events", k.Stream())
	}
}

// TestRedisTopologyFlags: --redis-cluster with --redis-sentinel-master, or
// with one partition, is a usage error (exit 2) that says why.
func TestRedisTopologyFlags(t *testing.T) {
	t.Parallel()
	for _, tc := range []struct {
		args []string
		want string
	}{
		{[]string{"dispatch", "--redis-cluster", "--redis-sentinel-master", "m", "--partitions", "4"}, "Sentinel"},
		{[]string{"work", "--redis-cluster"}, "--partitions 2 or more"},
	} {
		var out bytes.Buffer
		code := run(context.Background(), tc.args, &out, &out)
		require.Equal(t, ExitUsage, code, out.String())
		require.Contains(t, out.String(), tc.want)
	}
}
