package testkit_test

import (
	"context"
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/outboxd/outboxd/internal/testkit"
)

func TestRedisServerRestartsEmpty(t *testing.T) {
	t.Parallel()
	s := testkit.NewRedisServer(t)
	c := s.Client()
	ctx := context.Background()
	require.NoError(t, c.Set(ctx, "k", "v", 0).Err())
	s.Stop()
	require.Error(t, c.Ping(ctx).Err())
	s.Start()
	require.Equal(t, int64(0), c.Exists(ctx, "k").Val())
}
