package httpapi

import (
	"container/list"
	"context"
	"crypto/tls"
	"errors"
	"net"
	"net/http"
	"sync"
	"sync/atomic"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"go.uber.org/zap"
	"golang.org/x/net/netutil"

	ometrics "github.com/outboxd/outboxd/internal/metrics"
)

// ProbeReserve is how many connections a Server accepts beyond
// ServerConfig.MaxConns when every connection under the cap is busy with a
// request: a connection of the reserve is answered /healthz and /readyz
// only (any other route 503 with Retry-After), and closed after one
// answer, so that the probes still answer a saturated server.
const ProbeReserve = 8

// reserveHeaderTimeout bounds the time a connection of the reserve may
// take to send its request's head.
const reserveHeaderTimeout = 2 * time.Second

// newConnGrace is how long a new connection may keep the server waiting
// for its first request before it may be closed to make room at the cap: a
// client sends its request as it connects, so one still silent past it
// holds a place for nothing. It counts from the server's first read, not
// from the accept: a connection that a busy process has not started
// reading yet has done nothing wrong.
const newConnGrace = time.Second

// Reasons of outboxd_http_connections_shed_total.
const (
	shedIdle    = "idle_closed"     // an idle connection closed to make room at the cap
	shedReserve = "reserve_refused" // a request other than a probe on a connection of the reserve
	shedBoth    = "framing_refused" // a request with both Content-Length and Transfer-Encoding
	shedTLS     = "tls_handshake"   // a TLS handshake that failed
	reasonsHelp = "HTTP connections closed by the server before their client did, by reason: " +
		"idle_closed (idle at the connection cap, to make room), reserve_refused (a request other than a probe on a connection beyond the cap), " +
		"framing_refused (a request with both Content-Length and Transfer-Encoding), tls_handshake (a failed TLS handshake)."
)

// conns accounts for the open connections of a Server: at most MaxConns
// serve every route; when they are all taken, a new connection closes the
// one that has waited longest without a request (an idle keep-alive
// connection, else one that has sent nothing for newConnGrace), or, when
// every one is busy with a request, joins the reserve (ProbeReserve) that
// serves the probes only. A netutil.LimitListener holds the total to MaxConns +
// ProbeReserve, so the process never runs out of file descriptors.
type conns struct {
	max    int
	tls    *tls.Config
	logger *zap.Logger

	mu      sync.Mutex
	normal  int // open connections under the cap
	reserve int // open connections of the reserve
	// idle are the connections under the cap that served a request and
	// wait for the next, fresh those the server waits on for their first
	// (since its first read); longest waiting first.
	idle, fresh *list.List
	// spare are the connections of the reserve the server waits on for
	// their request.
	spare  *list.List
	warned time.Time // when the cap was last logged

	open *prometheus.GaugeVec
	shed *prometheus.CounterVec
}

func newConns(cfg *ServerConfig, logger *zap.Logger) (*conns, error) {
	c := &conns{max: cfg.MaxConns, tls: cfg.TLS, logger: logger, idle: list.New(), fresh: list.New(), spare: list.New()}
	if reg := cfg.Registerer; reg != nil {
		var err error
		c.open, err = ometrics.Register(reg, prometheus.NewGaugeVec(prometheus.GaugeOpts{
			Namespace: ometrics.Namespace, Name: "http_connections",
			Help: "Open HTTP connections: under the cap (--http-max-conns), and in the reserve that serves the probes only.",
		}, []string{"kind"}))
		if err != nil {
			return nil, err
		}
		c.shed, err = ometrics.Register(reg, prometheus.NewCounterVec(prometheus.CounterOpts{
			Namespace: ometrics.Namespace, Name: "http_connections_shed_total", Help: reasonsHelp,
		}, []string{"reason"}))
		if err != nil {
			return nil, err
		}
		for _, r := range []string{shedIdle, shedReserve, shedBoth, shedTLS} {
			c.shed.WithLabelValues(r)
		}
		c.open.WithLabelValues("capped")
		c.open.WithLabelValues("reserve")
	}
	return c, nil
}

// count records a connection shed for reason.
func (c *conns) count(reason string) {
	if c.shed != nil {
		c.shed.WithLabelValues(reason).Inc()
	}
}

// gauges sets the open-connection gauges; the caller holds c.mu.
func (c *conns) gauges() {
	if c.open != nil {
		c.open.WithLabelValues("capped").Set(float64(c.normal))
		c.open.WithLabelValues("reserve").Set(float64(c.reserve))
	}
}

// listen returns ln under the cap: its connections are tracked (and
// framed, and TLS when configured).
func (c *conns) listen(ln net.Listener) net.Listener {
	inner := &lastListener{Listener: ln}
	return &capListener{Listener: netutil.LimitListener(inner, c.max+ProbeReserve), inner: inner, c: c}
}

// lastListener remembers the connection it accepted last, below the
// LimitListener's wrapper: the TCP connection, whose CloseWrite net/http
// uses to end a connection without a reset.
type lastListener struct {
	net.Listener
	last net.Conn
}

func (l *lastListener) Accept() (net.Conn, error) {
	c, err := l.Listener.Accept()
	l.last = c
	return c, err
}

// capListener accepts the connections of a Server. Like every listener of
// an http.Server, it is called by one goroutine at a time, so the
// lastListener's last is the connection its Accept returned.
type capListener struct {
	net.Listener
	inner *lastListener
	c     *conns
}

// Accept takes the next connection and gives it a place: under the cap;
// at the cap, the place of the connection idle the longest since its last
// answer, or else of the one silent the longest since it connected (past
// newConnGrace), which is closed; or in the reserve.
func (l *capListener) Accept() (net.Conn, error) {
	raw, err := l.Listener.Accept()
	if err != nil {
		return nil, err
	}
	c := l.c
	tc := &trackedConn{Conn: raw, raw: raw, tcp: l.inner.last, c: c, frames: &framing{}}
	if c.tls != nil {
		tc.tlsConn = tls.Server(raw, c.tls)
		tc.Conn = tc.tlsConn
	}
	now := time.Now()
	tc.since = now
	var evict []*trackedConn
	c.mu.Lock()
	switch {
	case c.normal < c.max:
	case c.idle.Len() > 0:
		evict = append(evict, c.evict(c.idle))
	case c.fresh.Len() > 0 && now.Sub(c.fresh.Front().Value.(*trackedConn).since) > newConnGrace:
		evict = append(evict, c.evict(c.fresh))
	default:
		tc.reserve = true
	}
	if tc.reserve {
		c.reserve++
	} else {
		c.normal++
	}
	// Full: the next connection would wait in the listen queue until one
	// closes. Close the one silent the longest now, in the reserve too,
	// when it is past newConnGrace, so that silent connections keep a
	// probe waiting there for a moment only.
	if c.normal+c.reserve >= c.max+ProbeReserve {
		var oldest *list.List
		for _, l := range []*list.List{c.fresh, c.spare} {
			f := l.Front()
			if f == nil || now.Sub(f.Value.(*trackedConn).since) <= newConnGrace {
				continue
			}
			if oldest == nil || f.Value.(*trackedConn).since.Before(oldest.Front().Value.(*trackedConn).since) {
				oldest = l
			}
		}
		if oldest != nil {
			evict = append(evict, c.evict(oldest))
		}
	}
	c.gauges()
	warn := len(evict) > 0 || tc.reserve
	if warn && time.Since(c.warned) >= time.Minute {
		c.warned = time.Now()
	} else {
		warn = false
	}
	c.mu.Unlock()
	for _, e := range evict {
		// The raw connection: closing a TLS one would first write its
		// close_notify, which a client that reads nothing can hold up.
		_ = e.raw.Close()
		c.count(shedIdle)
	}
	if warn {
		c.logger.Warn("HTTP connection cap reached: the longest-idle connections are closed to make room, or, with every connection busy, the probes only are served beyond it",
			zap.Int("max_conns", c.max), zap.Int("probe_reserve", ProbeReserve))
	}
	return tc, nil
}

// evict takes the first connection of l out of the accounts, to be closed;
// the caller holds c.mu.
func (c *conns) evict(l *list.List) *trackedConn {
	t := l.Front().Value.(*trackedConn)
	t.unlist()
	t.evicted = true
	if t.reserve {
		c.reserve--
	} else {
		c.normal--
	}
	return t
}

// trackedConn is a connection of a Server.
type trackedConn struct {
	net.Conn
	raw     net.Conn // below TLS
	tcp     net.Conn // below the LimitListener's wrapper
	c       *conns
	tlsConn *tls.Conn // the same connection when it is TLS
	frames  *framing

	// reserve: the connection is beyond the cap and serves the probes
	// only, its head within reserveUntil (reserveHeaderTimeout from the
	// server's first read); readDeadline is the one the server set last
	// (both under dmu: Shutdown moves deadlines from its goroutine).
	reserve                    bool
	dmu                        sync.Mutex
	reserveUntil, readDeadline time.Time
	// The fields below are the conns' (under its lock).
	elem    *list.Element // its place in the conns' idle, fresh or spare list; nil while not waited on
	in      *list.List
	since   time.Time // when it joined its list
	evicted bool
	closed  bool

	// requests counts the requests read so far; reading is set at the
	// server's first read.
	requests  atomic.Int32
	reading   atomic.Bool
	handshake sync.Once
	hsErr     error
}

// Read reads the connection (after the TLS handshake, whose failure is
// logged at warn) and follows its framing.
func (t *trackedConn) Read(p []byte) (int, error) {
	if !t.reading.Swap(true) {
		t.c.waitOn(t)
		if t.reserve {
			t.dmu.Lock()
			t.reserveUntil = time.Now().Add(reserveHeaderTimeout)
			d := t.readDeadline
			t.dmu.Unlock()
			_ = t.SetReadDeadline(d)
		}
	}
	if t.tlsConn != nil {
		t.handshake.Do(func() {
			if err := t.tlsConn.HandshakeContext(context.Background()); err != nil {
				t.hsErr = err
				t.c.count(shedTLS)
				t.c.logger.Warn("TLS handshake failed", zap.String("remote", t.RemoteAddr().String()), zap.Error(err))
			}
		})
		if t.hsErr != nil {
			return 0, t.hsErr
		}
	}
	if t.reserve && t.requests.Load() == 0 {
		t.dmu.Lock()
		late := time.Now().After(t.reserveUntil)
		t.dmu.Unlock()
		if late {
			return 0, errReserveTimeout
		}
	}
	n, err := t.Conn.Read(p)
	if n > 0 {
		t.frames.feed(p[:n])
	}
	return n, err
}

// errReserveTimeout ends a connection of the reserve whose head did not
// come in time.
var errReserveTimeout = errors.New("a connection beyond the cap did not send its request in time")

// SetReadDeadline keeps a connection of the reserve to its own, shorter
// deadline for its head.
func (t *trackedConn) SetReadDeadline(d time.Time) error {
	t.dmu.Lock()
	t.readDeadline = d
	if t.reserve && t.requests.Load() == 0 && !t.reserveUntil.IsZero() && (d.IsZero() || d.After(t.reserveUntil)) {
		d = t.reserveUntil
	}
	t.dmu.Unlock()
	return t.Conn.SetReadDeadline(d)
}

// CloseWrite ends the writing side (net/http's way to close a connection
// whose client is still sending without a reset, which would lose the
// answer).
func (t *trackedConn) CloseWrite() error {
	if t.tlsConn != nil {
		return t.tlsConn.CloseWrite()
	}
	if cw, ok := t.tcp.(interface{ CloseWrite() error }); ok {
		return cw.CloseWrite()
	}
	return nil
}

// Close gives the connection's place back, then closes it: in this order,
// because closing it frees its place in the listener's limit, and a
// connection accepted in between must find the accounts up to date (else
// it joins the reserve beyond ProbeReserve).
func (t *trackedConn) Close() error {
	c := t.c
	c.mu.Lock()
	if !t.closed {
		t.closed = true
		switch {
		case t.evicted:
		case t.reserve:
			c.reserve--
		default:
			c.normal--
		}
		t.unlist()
		c.gauges()
	}
	c.mu.Unlock()
	return t.Conn.Close()
}

// state follows the server's view of the connection (http.Server's
// ConnState): a connection waits (and may be closed at the cap) while new
// or idle, and is busy while a request is in flight.
func (c *conns) state(nc net.Conn, st http.ConnState) {
	t, ok := nc.(*trackedConn)
	if !ok {
		return
	}
	c.mu.Lock()
	defer c.mu.Unlock()
	if t.closed || t.evicted {
		return
	}
	switch st {
	case http.StateActive:
		t.unlist()
	case http.StateIdle:
		if t.reserve { // it closes after its answer
			return
		}
		t.unlist()
		t.since = time.Now()
		t.list(c.idle)
	}
}

// waitOn records that the server started waiting on t's first request: it
// joins fresh (spare in the reserve), where past newConnGrace it may make
// room at the cap.
func (c *conns) waitOn(t *trackedConn) {
	c.mu.Lock()
	defer c.mu.Unlock()
	if t.closed || t.evicted || t.elem != nil || t.requests.Load() > 0 {
		return
	}
	t.since = time.Now()
	if t.reserve {
		t.list(c.spare)
	} else {
		t.list(c.fresh)
	}
}

// list puts t at the end of l; the caller holds the conns' lock.
func (t *trackedConn) list(l *list.List) {
	t.elem, t.in = l.PushBack(t), l
}

// unlist takes t out of its list; the caller holds the conns' lock.
func (t *trackedConn) unlist() {
	if t.elem != nil {
		t.in.Remove(t.elem)
		t.elem, t.in = nil, nil
	}
}

// connKey is the context key of a request's trackedConn.
type connKey struct{}
