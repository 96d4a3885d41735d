package testkit

import (
	"context"
	"fmt"
	"net"
	"os/exec"
	"strconv"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"
	"github.com/stretchr/testify/require"
)

// RedisServer is a redis-server process of the test's own on a spare port,
// so a test can take Redis away and bring it back (empty: it keeps nothing
// on disk, like the production setup without persistence).
type RedisServer struct {
	t    testing.TB
	Port int
	cmd  *exec.Cmd
}

// NewRedisServer starts a private redis-server and stops it at cleanup.
func NewRedisServer(t testing.TB) *RedisServer {
	t.Helper()
	l, err := net.Listen("tcp", "127.0.0.1:0")
	require.NoError(t, err)
	port := l.Addr().(*net.TCPAddr).Port
	require.NoError(t, l.Close())
	s := &RedisServer{t: t, Port: port}
	s.Start()
	t.Cleanup(s.Stop)
	return s
}

// URL returns the redis:// URL of the server.
func (s *RedisServer) URL() string { return fmt.Sprintf("redis://127.0.0.1:%d/0", s.Port) }

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
	if s.cmd != nil {
		return
	}
	cmd := exec.Command("redis-server", "--port", strconv.Itoa(s.Port), "--bind", "127.0.0.1",
		"--save", "", "--appendonly", "no", "--dir", s.t.TempDir(), "--loglevel", "warning")
	require.NoError(s.t, cmd.Start())
	s.cmd = cmd
	c := redis.NewClient(&redis.Options{Addr: fmt.Sprintf("127.0.0.1:%d", s.Port)})
	defer c.Close()
	require.Eventually(s.t, func() bool { return c.Ping(context.Background()).Err() == nil },
		10*time.Second, 20*time.Millisecond, "redis-server on port %d did not start", s.Port)
}

// Stop kills the server (SIGKILL: whatever it held is gone).
func (s *RedisServer) Stop() {
	if s.cmd == nil {
		return
	}
	_ = s.cmd.Process.Kill()
	_ = s.cmd.Wait()
	s.cmd = nil
}

// quietLogger drops go-redis's own log lines.
type quietLogger struct{}

func (quietLogger) Printf(context.Context, string, ...any) {}

// quietRedisLogs silences go-redis's pool messages ("failed to dial …"),
// which tests that take Redis away on purpose would otherwise print by the
// dozen. Main calls it.
func quietRedisLogs() { redis.SetLogger(quietLogger{}) }
