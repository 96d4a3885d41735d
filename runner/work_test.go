package runner

import (
	"context"
	"path/filepath"
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/outboxd/outboxd/internal/config"
	"github.com/outboxd/outboxd/internal/testkit"
	"github.com/outboxd/outboxd/worker"
)

// openWork parses args as the work role's flags and opens its backends.
func openWork(t *testing.T, args ...string) *app {
	t.Helper()
	r, _, ok := lookupRole([]string{"work"})
	require.True(t, ok)
	fs, o := newFlagSet(r)
	require.NoError(t, config.Parse(fs, args, func(string) (string, bool) { return "", false }))
	require.NoError(t, o.validate())
	a := &app{o: o, role: r, log: testkit.Logger(t), set: &settings{}}
	t.Cleanup(a.close)
	require.NoError(t, a.open(context.Background()))
	return a
}

// TestWorkConcurrency: --concurrency N runs N batch loops, each a consumer
// of the group (--consumer, then --consumer-2, …), sharing one PostgreSQL
// pool of N + 2 connections unless the URL sizes it.
func TestWorkConcurrency(t *testing.T) {
	t.Parallel()
	pg := testkit.NewPostgres(t)
	_, prefix := testkit.NewRedis(t)
	common := []string{"--store", "sqlite:" + filepath.Join(t.TempDir(), "outboxd.db"), "--postgres-url", pg.URL,
		"--redis-url", testkit.RedisURL(), "--stream", prefix + "-stream"}

	a := openWork(t, append(common, "--concurrency", "7", "--consumer", "w", "--batch-size", "auto")...)
	require.Equal(t, int32(7+poolSpare), a.pg.Config().MaxConns)
	s, err := a.newWorker()
	require.NoError(t, err)
	loops, ok := s.(serviceGroup)
	require.True(t, ok)
	require.Len(t, loops, 7)
	var names []string
	for _, l := range loops {
		names = append(names, l.(*worker.Worker).Consumer())
	}
	require.Equal(t, []string{"w", "w-2", "w-3", "w-4", "w-5", "w-6", "w-7"}, names)

	a = openWork(t, append(common[:2:2], "--postgres-url", pg.URL+"&pool_max_conns=3", "--redis-url", testkit.RedisURL(), "--concurrency", "7")...)
	require.Equal(t, int32(3), a.pg.Config().MaxConns, "the URL's pool size stands")

	a = openWork(t, common...)
	s, err = a.newWorker()
	require.NoError(t, err)
	_, ok = s.(*worker.Worker)
	require.True(t, ok, "one loop is one worker")
	require.GreaterOrEqual(t, a.pg.Config().MaxConns, int32(1+poolSpare))
}
