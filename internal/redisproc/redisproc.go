// Package redisproc runs a redis-server process of its own on a loopback
// port, without persistence, so that a test or the soak can take Redis away
// and bring it back empty. The tests reach it through internal/testkit.
package redisproc

import (
	"bufio"
	"context"
	"fmt"
	"net"
	"os"
	"os/exec"
	"strconv"
	"strings"
	"time"
)

// Server is one redis-server process on 127.0.0.1:Port. Not safe for
// concurrent use.
type Server struct {
	Port int
	// Dir is the server's working folder (it writes nothing there).
	Dir string
	cmd *exec.Cmd
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

// URL is the server's redis:// URL.
func (s *Server) URL() string { return fmt.Sprintf("redis://%s/0", s.Addr()) }

// Running reports whether the process was started and not stopped.
func (s *Server) Running() bool { return s.cmd != nil }

// Start starts the server (again, empty) and waits up to timeout until it
// answers PING. On a running server it does nothing.
func (s *Server) Start(timeout time.Duration) error {
	if s.cmd != nil {
		return nil
	}
	cmd := exec.Command("redis-server", "--port", strconv.Itoa(s.Port), "--bind", "127.0.0.1",
		"--save", "", "--appendonly", "no", "--dir", s.Dir, "--loglevel", "warning",
		"--maxmemory-policy", "noeviction")
	if err := cmd.Start(); err != nil {
		return fmt.Errorf("error starting redis-server on port %d: %w", s.Port, err)
	}
	s.cmd = cmd
	ctx, cancel := context.WithTimeout(context.Background(), timeout)
	defer cancel()
	tick := time.NewTicker(20 * time.Millisecond)
	defer tick.Stop()
	for {
		if ping(ctx, s.Addr()) == nil {
			return nil
		}
		select {
		case <-ctx.Done():
			s.Kill()
			return fmt.Errorf("redis-server on port %d did not answer within %s", s.Port, timeout)
		case <-tick.C:
		}
	}
}

// ping sends PING over a connection of its own and expects +PONG.
func ping(ctx context.Context, addr string) error {
	var d net.Dialer
	c, err := d.DialContext(ctx, "tcp", addr)
	if err != nil {
		return err
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
	_ = s.cmd.Wait()
	s.cmd = nil
}
