package testkit

import (
	"bytes"
	"context"
	"crypto/tls"
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
	// TLS, when set, are the certificates of a server that speaks TLS only
	// (NewTLSRedisServer).
	TLS *Certs
	cmd *exec.Cmd
	// exited is closed when the process has ended.
	exited chan struct{}
}

// NewRedisServer starts a private redis-server and stops it at cleanup.
func NewRedisServer(t testing.TB) *RedisServer {
	t.Helper()
	s := &RedisServer{t: t, Port: freePort(t)}
	s.Start()
	t.Cleanup(s.Stop)
	return s
}

// NewTLSRedisServer starts a private redis-server that speaks TLS only
// (its --tls-port), with a certificate for 127.0.0.1 signed by an
// authority of the test's own (s.TLS.CAFile), and stops it at cleanup. The
// test is skipped when this redis-server was built without TLS.
func NewTLSRedisServer(t testing.TB) *RedisServer {
	t.Helper()
	s := &RedisServer{t: t, Port: freePort(t), TLS: NewCerts(t, "127.0.0.1")}
	s.Start()
	t.Cleanup(s.Stop)
	return s
}

func freePort(t testing.TB) int {
	l, err := net.Listen("tcp", "127.0.0.1:0")
	require.NoError(t, err)
	port := l.Addr().(*net.TCPAddr).Port
	require.NoError(t, l.Close())
	return port
}

// URL returns the redis:// URL of the server (rediss:// with TLS).
func (s *RedisServer) URL() string {
	if s.TLS != nil {
		return fmt.Sprintf("rediss://127.0.0.1:%d/0", s.Port)
	}
	return fmt.Sprintf("redis://127.0.0.1:%d/0", s.Port)
}

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
	if s.cmd != nil {
		return
	}
	args := []string{"--port", strconv.Itoa(s.Port), "--bind", "127.0.0.1",
		"--save", "", "--appendonly", "no", "--dir", s.t.TempDir(), "--loglevel", "warning"}
	if s.TLS != nil {
		args = append(args, "--port", "0", "--tls-port", strconv.Itoa(s.Port), "--tls-cert-file", s.TLS.CertFile,
			"--tls-key-file", s.TLS.KeyFile, "--tls-ca-cert-file", s.TLS.CAFile, "--tls-auth-clients", "no")
	}
	var out bytes.Buffer
	cmd := exec.Command("redis-server", args...)
	cmd.Stdout, cmd.Stderr = &out, &out
	require.NoError(s.t, cmd.Start())
	s.cmd = cmd
	exited := make(chan struct{})
	go func() {
		_ = cmd.Wait()
		close(exited)
	}()
	c := redis.NewClient(s.options())
	defer c.Close()
	up := func() bool {
		select {
		case <-exited:
			return true
		default:
		}
		return c.Ping(context.Background()).Err() == nil
	}
	require.Eventually(s.t, up, 10*time.Second, 20*time.Millisecond, "redis-server on port %d did not start", s.Port)
	select {
	case <-exited:
		s.cmd = nil
		if s.TLS != nil && bytes.Contains(bytes.ToLower(out.Bytes()), []byte("tls")) {
			s.t.Skipf("skipped: this redis-server cannot serve TLS (built without it?): %s", bytes.TrimSpace(out.Bytes()))
		}
		s.t.Fatalf("redis-server on port %d exited: %s", s.Port, out.Bytes())
	default:
	}
	s.exited = exited
}

// Stop kills the server (SIGKILL: whatever it held is gone).
func (s *RedisServer) Stop() {
	if s.cmd == nil {
		return
	}
	_ = s.cmd.Process.Kill()
	<-s.exited
	s.cmd = nil
}

// quietLogger drops go-redis's own log lines.
type quietLogger struct{}

func (quietLogger) Printf(context.Context, string, ...any) {}

// quietRedisLogs silences go-redis's pool messages ("failed to dial …"),
// which tests that take Redis away on purpose would otherwise print by the
// dozen. Main calls it.
func quietRedisLogs() { redis.SetLogger(quietLogger{}) }
