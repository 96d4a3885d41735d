package testkit

import (
	"context"
	"errors"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"
	"github.com/stretchr/testify/require"

	"github.com/outboxd/outboxd/internal/redisproc"
)

// RedisCluster is a Redis Cluster of the test's own: three masters
// (redis-server --cluster-enabled yes on spare ports, nothing on disk)
// joined with `redis-cli --cluster create`.
type RedisCluster struct {
	t testing.TB
	c *redisproc.Cluster
}

// NewRedisCluster starts a three-master Redis Cluster, waits until every
// node says cluster_state:ok, and stops it at cleanup. The test is skipped
// when redis-cli is not installed.
func NewRedisCluster(t testing.TB) *RedisCluster {
	t.Helper()
	c := &redisproc.Cluster{}
	for range 3 {
		port, err := redisproc.SparePort()
		require.NoError(t, err)
		c.Servers = append(c.Servers, &redisproc.Server{Port: port, Dir: t.TempDir()})
	}
	t.Cleanup(c.Kill)
	err := c.Start(30 * time.Second)
	if errors.Is(err, redisproc.ErrNoCLI) {
		t.Skipf("skipped: %v", err)
	}
	require.NoError(t, err)
	return &RedisCluster{t: t, c: c}
}

// URL returns the cluster's seed list, the --redis-url of --redis-cluster
// (redis://h1:p1?addr=h2:p2&addr=h3:p3).
func (rc *RedisCluster) URL() string { return rc.c.Seeds() }

// Client returns a new cluster client, closed at cleanup.
func (rc *RedisCluster) Client() *redis.ClusterClient {
	opt, err := redis.ParseClusterURL(rc.URL())
	require.NoError(rc.t, err)
	c := redis.NewClusterClient(opt)
	rc.t.Cleanup(func() { _ = c.Close() })
	return c
}

// KeySlot returns the slot of key and the node that serves it now.
func (rc *RedisCluster) KeySlot(key string) redisproc.Slot {
	rc.t.Helper()
	s, err := rc.c.KeySlot(context.Background(), key)
	require.NoError(rc.t, err)
	return s
}

// MoveSlot moves the slot of key (with the slots before it in its
// owner's range: redis-cli takes a source's slots in order) to another
// master with `redis-cli --cluster reshard`, and fails the test unless
// that master serves the slot afterwards. It returns the slot as it was.
func (rc *RedisCluster) MoveSlot(ctx context.Context, key string) redisproc.Slot {
	rc.t.Helper()
	s := rc.KeySlot(key)
	to := rc.c.Servers[0]
	if to == s.Owner {
		to = rc.c.Servers[1]
	}
	require.NoError(rc.t, rc.c.Reshard(ctx, s, to))
	require.Equal(rc.t, to.Port, rc.KeySlot(key).Owner.Port, "the slot of %q moved", key)
	return s
}
