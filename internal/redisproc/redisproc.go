// Package redisproc runs a redis-server process of its own on a loopback
// port, without persistence, so that a test or the soak can take Redis away
// and bring it back empty. The tests reach it through internal/testkit.
package redisproc

import (
	"bufio"
	"bytes"
	"context"
	"crypto/tls"
	"crypto/x509"
	"errors"
	"fmt"
	"net"
	"os"
	"os/exec"
	"strconv"
	"strings"
	"time"
)

// ErrNoTLS is returned by Start when the server was asked to speak TLS and
// this redis-server cannot (built without it).
var ErrNoTLS = errors.New("this redis-server cannot serve TLS (built without it?)")

// TLS are the PEM files of a server that speaks TLS only (on its Port).
type TLS struct {
	// CAFile is the authority's certificate, which clients trust;
	// CertFile and KeyFile the server's certificate and private key.
	CAFile, CertFile, KeyFile string
}

// Server is one redis-server process on 127.0.0.1:Port. Not safe for
// concurrent use.
type Server struct {
	Port int
	// Dir is the server's working folder (it writes nothing there).
	Dir string
	// TLS, when set, makes the server speak TLS only.
	TLS *TLS
	// Cluster makes the server a Redis Cluster node (--cluster-enabled,
	// its nodes file in Dir), not serving a slot until a Cluster assigns
	// it some.
	Cluster bool
	cmd     *exec.Cmd
	// exited is closed when the process has ended.
	exited chan struct{}
}

// SparePort returns a free loopback port.
func SparePort() (int, error) {
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		return 0, err
	}
	defer l.Close()
	return l.Addr().(*net.TCPAddr).Port, nil
}

// Addr is the server's host:port.
func (s *Server) Addr() string { return net.JoinHostPort("127.0.0.1", strconv.Itoa(s.Port)) }

// URL is the server's redis:// URL (rediss:// with TLS).
func (s *Server) URL() string {
	if s.TLS != nil {
		return fmt.Sprintf("rediss://%s/0", s.Addr())
	}
	return fmt.Sprintf("redis://%s/0", s.Addr())
}

// Running reports whether the process was started and not stopped.
func (s *Server) Running() bool { return s.cmd != nil }

// args are the server's command line.
func (s *Server) args() []string {
	args := []string{"--port", strconv.Itoa(s.Port), "--bind", "127.0.0.1",
		"--save", "", "--appendonly", "no", "--dir", s.Dir, "--loglevel", "warning",
		"--maxmemory-policy", "noeviction"}
	if s.Cluster {
		args = append(args, "--cluster-enabled", "yes", "--cluster-config-file", "nodes.conf",
			"--cluster-node-timeout", "5000")
	}
	if s.TLS != nil {
		args = append(args, "--port", "0", "--tls-port", strconv.Itoa(s.Port), "--tls-cert-file", s.TLS.CertFile,
			"--tls-key-file", s.TLS.KeyFile, "--tls-ca-cert-file", s.TLS.CAFile, "--tls-auth-clients", "no")
	}
	return args
}

// Start starts the server (again, empty) and waits up to timeout until it
// answers PING. On a running server it does nothing. A server asked to
// speak TLS by a redis-server built without it fails with ErrNoTLS.
func (s *Server) Start(timeout time.Duration) error {
	if s.cmd != nil {
		return nil
	}
	var out bytes.Buffer
	cmd := exec.Command("redis-server", s.args()...)
	cmd.Stdout, cmd.Stderr = &out, &out
	if err := cmd.Start(); err != nil {
		return fmt.Errorf("error starting redis-server on port %d: %w", s.Port, err)
	}
	exited := make(chan struct{})
	go func() {
		_ = cmd.Wait()
		close(exited)
	}()
	s.cmd, s.exited = cmd, exited
	ctx, cancel := context.WithTimeout(context.Background(), timeout)
	defer cancel()
	tick := time.NewTicker(20 * time.Millisecond)
	defer tick.Stop()
	for {
		if s.ping(ctx) == nil {
			return nil
		}
		select {
		case <-exited:
			s.cmd = nil
			if s.TLS != nil && bytes.Contains(bytes.ToLower(out.Bytes()), []byte("tls")) {
				return fmt.Errorf("%w: %s", ErrNoTLS, bytes.TrimSpace(out.Bytes()))
			}
			return fmt.Errorf("redis-server on port %d exited: %s", s.Port, bytes.TrimSpace(out.Bytes()))
		case <-ctx.Done():
			s.Kill()
			return fmt.Errorf("redis-server on port %d did not answer within %s", s.Port, timeout)
		case <-tick.C:
		}
	}
}

// ping sends PING over a connection of its own (TLS when the server speaks
// it, trusting its authority) and expects +PONG.
func (s *Server) ping(ctx context.Context) error {
	var d net.Dialer
	c, err := d.DialContext(ctx, "tcp", s.Addr())
	if err != nil {
		return err
	}
	if s.TLS != nil {
		pem, err := os.ReadFile(s.TLS.CAFile)
		if err != nil {
			_ = c.Close()
			return err
		}
		pool := x509.NewCertPool()
		pool.AppendCertsFromPEM(pem)
		c = tls.Client(c, &tls.Config{RootCAs: pool, ServerName: "127.0.0.1", MinVersion: tls.VersionTLS12})
	}
	defer c.Close()
	if dl, ok := ctx.Deadline(); ok {
		_ = c.SetDeadline(dl)
	}
	if _, err := c.Write([]byte("PING\r\n")); err != nil {
		return err
	}
	line, err := bufio.NewReader(c).ReadString('\n')
	if err != nil {
		return err
	}
	if !strings.HasPrefix(line, "+PONG") {
		return fmt.Errorf("redis-server answered %q to PING", strings.TrimSpace(line))
	}
	return nil
}

// Signal sends sig to the server's process (SIGSTOP freezes it: clients
// connect and wait; SIGCONT thaws it). On a stopped server it does nothing.
func (s *Server) Signal(sig os.Signal) error {
	if s.cmd == nil {
		return nil
	}
	return s.cmd.Process.Signal(sig)
}

// Kill kills the server (SIGKILL: whatever it held is gone) and waits for
// it. On a stopped server it does nothing.
func (s *Server) Kill() {
	if s.cmd == nil {
		return
	}
	_ = s.cmd.Process.Kill()
	<-s.exited
	s.cmd = nil
}
