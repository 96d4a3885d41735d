package testkit

import (
	"context"
	"fmt"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"
	"github.com/stretchr/testify/require"

	"github.com/outboxd/outboxd/internal/redisproc"
)

// RedisServer is a redis-server process of the test's own on a spare port,
// so a test can take Redis away and bring it back (empty: it keeps nothing
// on disk, like the production setup without persistence).
type RedisServer struct {
	t    testing.TB
	Port int
	srv  *redisproc.Server
}

// NewRedisServer starts a private redis-server and stops it at cleanup.
func NewRedisServer(t testing.TB) *RedisServer {
	t.Helper()
	port, err := redisproc.SparePort()
	require.NoError(t, err)
	s := &RedisServer{t: t, Port: port, srv: &redisproc.Server{Port: port, Dir: t.TempDir()}}
	s.Start()
	t.Cleanup(s.Stop)
	return s
}

// URL returns the redis:// URL of the server.
func (s *RedisServer) URL() string { return s.srv.URL() }

// Client returns a new client for the server, closed at cleanup. Its short
// timeouts let tests see an outage quickly.
func (s *RedisServer) Client() *redis.Client {
	c := redis.NewClient(&redis.Options{
		Addr: fmt.Sprintf("127.0.0.1:%d", s.Port), DialTimeout: 500 * time.Millisecond,
		ReadTimeout: time.Second, WriteTimeout: time.Second, MaxRetries: -1,
	})
	s.t.Cleanup(func() { _ = c.Close() })
	return c
}

// Start starts the server (again, empty) and waits until it answers.
func (s *RedisServer) Start() {
	s.t.Helper()
	require.NoError(s.t, s.srv.Start(10*time.Second))
}

// Stop kills the server (SIGKILL: whatever it held is gone).
func (s *RedisServer) Stop() { s.srv.Kill() }

// quietLogger drops go-redis's own log lines.
type quietLogger struct{}

func (quietLogger) Printf(context.Context, string, ...any) {}

// quietRedisLogs silences go-redis's pool messages ("failed to dial …"),
// which tests that take Redis away on purpose would otherwise print by the
// dozen. Main calls it.
func quietRedisLogs() { redis.SetLogger(quietLogger{}) }
