package testkit

import (
	"context"
	"crypto/tls"
	"errors"
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
	// TLS, when set, are the certificates of a server that speaks TLS only
	// (NewTLSRedisServer).
	TLS *Certs
	srv *redisproc.Server
}

// NewRedisServer starts a private redis-server and stops it at cleanup.
func NewRedisServer(t testing.TB) *RedisServer {
	t.Helper()
	return newRedisServer(t, nil)
}

// NewTLSRedisServer starts a private redis-server that speaks TLS only
// (its --tls-port), with a certificate for 127.0.0.1 signed by an
// authority of the test's own (s.TLS.CAFile), and stops it at cleanup. The
// test is skipped when this redis-server was built without TLS.
func NewTLSRedisServer(t testing.TB) *RedisServer {
	t.Helper()
	return newRedisServer(t, NewCerts(t, "127.0.0.1"))
}

func newRedisServer(t testing.TB, certs *Certs) *RedisServer {
	t.Helper()
	port, err := redisproc.SparePort()
	require.NoError(t, err)
	s := &RedisServer{t: t, Port: port, TLS: certs, srv: &redisproc.Server{Port: port, Dir: t.TempDir()}}
	if certs != nil {
		s.srv.TLS = &redisproc.TLS{CAFile: certs.CAFile, CertFile: certs.CertFile, KeyFile: certs.KeyFile}
	}
	s.Start()
	t.Cleanup(s.Stop)
	return s
}

// URL returns the redis:// URL of the server (rediss:// with TLS).
func (s *RedisServer) URL() string { return s.srv.URL() }

// options are the client options of the server.
func (s *RedisServer) options() *redis.Options {
	o := &redis.Options{Addr: fmt.Sprintf("127.0.0.1:%d", s.Port)}
	if s.TLS != nil {
		o.TLSConfig = &tls.Config{RootCAs: s.TLS.Pool, ServerName: "127.0.0.1", MinVersion: tls.VersionTLS12}
	}
	return o
}

// Client returns a new client for the server, closed at cleanup. Its short
// timeouts let tests see an outage quickly.
func (s *RedisServer) Client() *redis.Client {
	o := s.options()
	o.DialTimeout, o.ReadTimeout, o.WriteTimeout, o.MaxRetries = 500*time.Millisecond, time.Second, time.Second, -1
	c := redis.NewClient(o)
	s.t.Cleanup(func() { _ = c.Close() })
	return c
}

// Start starts the server (again, empty) and waits until it answers.
func (s *RedisServer) Start() {
	s.t.Helper()
	err := s.srv.Start(10 * time.Second)
	if errors.Is(err, redisproc.ErrNoTLS) {
		s.t.Skipf("skipped: %v", err)
	}
	require.NoError(s.t, err)
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
