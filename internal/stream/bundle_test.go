package stream_test

import (
	"context"
	"testing"

	"github.com/redis/go-redis/v9"
	"github.com/stretchr/testify/require"

	"github.com/outboxd/outboxd/internal/stream"
	"github.com/outboxd/outboxd/internal/testkit"
)

// testBundle is one test's Redis client and key names.
type testBundle struct {
	rdb  *redis.Client
	c    *stream.Client
	keys stream.Keys
}

func setup(t *testing.T, cfg *stream.Config) *testBundle {
	t.Helper()
	rdb, prefix := testkit.NewRedis(t)
	c, err := stream.NewClient(rdb, cfg)
	require.NoError(t, err)
	return &testBundle{rdb: rdb, c: c, keys: stream.NewKeys(prefix+":stream", "g")}
}

// add XADDs n entries with payload p and returns their ids.
func (b *testBundle) add(t *testing.T, key, p string, n int) []string {
	t.Helper()
	ids := make([]string, n)
	for i := range ids {
		id, err := b.rdb.XAdd(context.Background(), &redis.XAddArgs{Stream: key, Values: map[string]any{"payload": p}}).Result()
		require.NoError(t, err)
		ids[i] = id
	}
	return ids
}
