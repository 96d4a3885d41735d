package testkit

import (
	"context"
	"io"
	"net"
	"strconv"
	"sync"
	"testing"
	"time"

	"github.com/jackc/pgx/v5/pgxpool"
	"github.com/stretchr/testify/require"
)

// TCPProxy stands between a client and a server (PostgreSQL, Redis) so that
// a test can take the server away and bring it back: Down refuses new
// connections and cuts the open ones, Up listens again on the same address.
type TCPProxy struct {
	target string
	addr   string
	mu     sync.Mutex
	ln     net.Listener
	conns  []net.Conn
	wg     sync.WaitGroup
}

// NewTCPProxy listens on a spare local port and forwards every connection
// to target (host:port). It is taken down at cleanup.
func NewTCPProxy(t testing.TB, target string) *TCPProxy {
	t.Helper()
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	require.NoError(t, err)
	p := &TCPProxy{target: target, addr: ln.Addr().String()}
	p.serve(ln)
	t.Cleanup(func() { p.Down(); p.wg.Wait() })
	return p
}

// Addr is the proxy's host:port.
func (p *TCPProxy) Addr() string { return p.addr }

func (p *TCPProxy) serve(ln net.Listener) {
	p.mu.Lock()
	p.ln = ln
	p.mu.Unlock()
	p.wg.Go(func() {
		for {
			c, err := ln.Accept()
			if err != nil {
				return
			}
			u, err := net.Dial("tcp", p.target)
			if err != nil {
				c.Close()
				continue
			}
			p.mu.Lock()
			p.conns = append(p.conns, c, u)
			p.mu.Unlock()
			p.wg.Go(func() { _, _ = io.Copy(u, c); u.Close() })
			p.wg.Go(func() { _, _ = io.Copy(c, u); c.Close() })
		}
	})
}

// Down refuses new connections and cuts the open ones.
func (p *TCPProxy) Down() {
	p.mu.Lock()
	defer p.mu.Unlock()
	if p.ln != nil {
		p.ln.Close()
		p.ln = nil
	}
	for _, c := range p.conns {
		c.Close()
	}
	p.conns = nil
}

// Up listens again on the proxy's address.
func (p *TCPProxy) Up(t testing.TB) {
	t.Helper()
	ln, err := net.Listen("tcp", p.addr)
	require.NoError(t, err)
	p.serve(ln)
}

// ProxiedPool returns a pool on pg's database through a TCPProxy of its
// own, with short connect timeouts, so that the test can take PostgreSQL
// away (proxy.Down) and bring it back (proxy.Up). Both are closed at
// cleanup.
func ProxiedPool(t testing.TB, pg *Postgres) (*pgxpool.Pool, *TCPProxy) {
	t.Helper()
	cfg, err := pgxpool.ParseConfig(pg.URL)
	require.NoError(t, err)
	proxy := NewTCPProxy(t, net.JoinHostPort(cfg.ConnConfig.Host, strconv.Itoa(int(cfg.ConnConfig.Port))))
	host, port, err := net.SplitHostPort(proxy.Addr())
	require.NoError(t, err)
	p, err := strconv.Atoi(port)
	require.NoError(t, err)
	cfg.ConnConfig.Host, cfg.ConnConfig.Port = host, uint16(p)
	cfg.ConnConfig.ConnectTimeout = time.Second
	pool, err := pgxpool.NewWithConfig(context.Background(), cfg)
	require.NoError(t, err)
	t.Cleanup(pool.Close)
	return pool, proxy
}
