package testkit

import (
	"net"
	"strconv"
	"testing"
	"time"

	"github.com/jackc/pgx/v5/pgxpool"
	"github.com/stretchr/testify/require"

	"github.com/outboxd/outboxd/internal/faultnet"
)

// TCPProxy stands between a client and a server (PostgreSQL, Redis) so that
// a test can take the server away and bring it back: Down refuses new
// connections and cuts the open ones, Up listens again on the same address;
// Delay and Stall (faultnet.Proxy) slow or hold what it forwards.
type TCPProxy struct {
	*faultnet.Proxy
}

// NewTCPProxy listens on a spare local port and forwards every connection
// to target (host:port). It is taken down at cleanup.
func NewTCPProxy(t testing.TB, target string) *TCPProxy {
	t.Helper()
	p, err := faultnet.Listen("127.0.0.1:0", target)
	require.NoError(t, err)
	t.Cleanup(p.Close)
	return &TCPProxy{Proxy: p}
}

// Up listens again on the proxy's address.
func (p *TCPProxy) Up(t testing.TB) {
	t.Helper()
	require.NoError(t, p.Proxy.Up())
}

// ProxiedPool returns a pool on pg's database through a TCPProxy of its
// own, with short connect timeouts, so that the test can take PostgreSQL
// away (proxy.Down) and bring it back (proxy.Up). Both are closed at
// cleanup.
func ProxiedPool(t testing.TB, pg *Postgres) (*pgxpool.Pool, *TCPProxy) {
	t.Helper()
	var proxy *TCPProxy
	pool := pg.PoolWith(t, func(cfg *pgxpool.Config) {
		proxy = NewTCPProxy(t, net.JoinHostPort(cfg.ConnConfig.Host, strconv.Itoa(int(cfg.ConnConfig.Port))))
		host, port, err := net.SplitHostPort(proxy.Addr())
		require.NoError(t, err)
		p, err := strconv.Atoi(port)
		require.NoError(t, err)
		cfg.ConnConfig.Host, cfg.ConnConfig.Port = host, uint16(p)
		cfg.ConnConfig.ConnectTimeout = time.Second
	})
	return pool, proxy
}
