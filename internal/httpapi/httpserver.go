package httpapi

import (
	"cmp"
	"context"
	"crypto/tls"
	"errors"
	"fmt"
	"net"
	"net/http"
	"sync"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"go.uber.org/zap"

	"github.com/outboxd/outboxd/internal/bounds"
)

// Defaults of ServerConfig.
const (
	// ReadHeaderTimeoutDefault bounds reading a request line and headers.
	ReadHeaderTimeoutDefault = 10 * time.Second
	// BodyTimeoutDefault bounds reading one request body (--http-body-timeout).
	BodyTimeoutDefault = 10 * time.Second
	// IdleTimeoutDefault closes idle keep-alive connections
	// (--http-idle-timeout). It is longer than the 60 seconds of common load
	// balancers, so that the balancer, not outboxd, closes first.
	IdleTimeoutDefault = 75 * time.Second
	// MaxInFlightBodiesDefault bounds the bodies read at once
	// (--http-max-bodies).
	MaxInFlightBodiesDefault = 64
	// BodyReserveDefault is the default ServerConfig.BodyReserve.
	BodyReserveDefault = 8
	// IngestMemoryPerBody is what one ingest body may cost in memory, in
	// multiples of its size, from its read to its answer: the body, its
	// canonical payload and what the store's write holds
	// (TestIngestMemoryAllocations measures it with 64 worst-case bodies,
	// one-digit integers and short decimals, on both stores: at most 252
	// MiB for 64 bodies of 1 MiB, about 4 times, on SQLite, where each
	// body is written). The memory ingest needs
	// is about MaxInFlightBodies × MaxBody × IngestMemoryPerBody
	// (docs/deploy.md; the deploy module's manifests test holds a copy).
	IngestMemoryPerBody = 5
	// MaxHeaderBytesDefault bounds a request line and its headers.
	MaxHeaderBytesDefault = 64 << 10
	// ShutdownBodyTimeoutDefault is how long a body still arriving when
	// shutdown begins may take.
	ShutdownBodyTimeoutDefault = time.Second
	// WriteTimeoutDefault bounds the writing of one response
	// (--http-write-timeout).
	WriteTimeoutDefault = 30 * time.Second
	// MaxConnsCeiling is the largest default of ServerConfig.MaxConns.
	MaxConnsCeiling = 10000
)

// ServerConfig configures the connections of a Server: how long a client
// may take and how many bodies are read at once. A nil config means all
// defaults.
type ServerConfig struct {
	// ReadHeaderTimeout bounds reading a request line and its headers.
	// Defaults to ReadHeaderTimeoutDefault (10 seconds).
	ReadHeaderTimeout time.Duration
	// BodyTimeout bounds reading one request body, from the handler's first
	// read to its end, however the client paces it. A body not complete by
	// then is answered 408 and its connection closed. Defaults to
	// BodyTimeoutDefault (10 seconds).
	BodyTimeout time.Duration
	// IdleTimeout closes a keep-alive connection that has waited this long
	// for its next request. Defaults to IdleTimeoutDefault (75 seconds).
	IdleTimeout time.Duration
	// MaxInFlightBodies bounds the request bodies being read at once, and
	// so the memory they hold (at most MaxInFlightBodies × Config.MaxBody).
	// A request beyond it is answered 503 with Retry-After without its body
	// being read, and its connection is closed. Defaults to
	// MaxInFlightBodiesDefault (64).
	MaxInFlightBodies int
	// BodyReserve is how many bodies beyond MaxInFlightBodies the
	// operator's and viewer's tokens may still have read when every other
	// place is taken (without tokens, everyone is alike and there is no
	// reserve), so that one
	// client's slow bodies never lock the operator out. Defaults to
	// BodyReserveDefault (8).
	BodyReserve int
	// MaxClientBodies bounds the bodies one client may have read at once
	// among MaxInFlightBodies: a named ingest client's (Config.IngestClients)
	// by its name, every other caller's by its connection's remote IP, so
	// that one client's slow bodies leave the others places (beyond it a
	// body is answered 503 with Retry-After, as beyond MaxInFlightBodies).
	// The operator's and viewer's bodies are not counted. Behind a proxy
	// every unnamed client has the proxy's address: give it
	// MaxInFlightBodies, or name the clients. Defaults to half of
	// MaxInFlightBodies (at least 1); at most MaxInFlightBodies.
	MaxClientBodies int
	// MaxHeaderBytes bounds a request line and its headers; a larger one is
	// answered 431. Defaults to MaxHeaderBytesDefault (64 KiB).
	MaxHeaderBytes int
	// ShutdownBodyTimeout is how much longer a body still arriving when
	// Shutdown begins may take; a body not complete by then is answered 503
	// with Retry-After and its connection closed, so that a stalled client
	// cannot hold up the shutdown. Defaults to ShutdownBodyTimeoutDefault
	// (1 second).
	ShutdownBodyTimeout time.Duration
	// WriteTimeout bounds the writing of one response, from its first byte
	// to its last (however long the handler took before): a client that
	// reads it slower is cut off and its connection closed. Defaults to
	// WriteTimeoutDefault (30 seconds).
	WriteTimeout time.Duration
	// MaxConns caps the open connections that serve every route. At the
	// cap a new connection closes the one that has waited longest without
	// a request; when every one is busy, up to ProbeReserve more are
	// accepted for /healthz and /readyz only, and beyond that the next
	// connection waits in the listen queue. Defaults to MaxConnsDefault():
	// half the process's file-descriptor limit, at most MaxConnsCeiling.
	MaxConns int
	// TLS, when set, serves HTTPS with it (HTTP/1.1, TLS 1.2 or later):
	// it must hold a certificate. A failed handshake is logged at warn.
	// Defaults to nil (plain HTTP).
	TLS *tls.Config
	// Registerer, when set, receives outboxd_http_connections{kind} and
	// outboxd_http_connections_shed_total{reason}. Defaults to none.
	Registerer prometheus.Registerer
}

func (c *ServerConfig) withDefaults() ServerConfig {
	out := ServerConfig{}
	if c != nil {
		out = *c
	}
	out.ReadHeaderTimeout = cmp.Or(out.ReadHeaderTimeout, ReadHeaderTimeoutDefault)
	out.BodyTimeout = cmp.Or(out.BodyTimeout, BodyTimeoutDefault)
	out.IdleTimeout = cmp.Or(out.IdleTimeout, IdleTimeoutDefault)
	out.MaxInFlightBodies = cmp.Or(out.MaxInFlightBodies, MaxInFlightBodiesDefault)
	out.BodyReserve = cmp.Or(out.BodyReserve, BodyReserveDefault)
	out.MaxClientBodies = cmp.Or(out.MaxClientBodies, max(out.MaxInFlightBodies/2, 1))
	out.MaxHeaderBytes = cmp.Or(out.MaxHeaderBytes, MaxHeaderBytesDefault)
	out.ShutdownBodyTimeout = cmp.Or(out.ShutdownBodyTimeout, ShutdownBodyTimeoutDefault)
	out.WriteTimeout = cmp.Or(out.WriteTimeout, WriteTimeoutDefault)
	out.MaxConns = cmp.Or(out.MaxConns, MaxConnsDefault())
	if out.TLS != nil {
		t := out.TLS.Clone()
		t.MinVersion = cmp.Or(t.MinVersion, tls.VersionTLS12)
		t.NextProtos = []string{"http/1.1"}
		out.TLS = t
	}
	return out
}

// MaxConnsDefault is the default ServerConfig.MaxConns: half the process's
// limit of open files (RLIMIT_NOFILE), leaving the other half to the
// stores' connections and files, at least 64 and at most MaxConnsCeiling.
func MaxConnsDefault() int {
	return max(64, min(MaxConnsCeiling, int(min(fileLimit(), 1<<30))/2))
}

// Validate checks c as NewServer takes it: a zero field takes its
// default, any other value must be within its field's bound; each error
// names its field, and they are joined. A nil config is valid.
func (c *ServerConfig) Validate() error {
	d := c.withDefaults()
	return d.validate()
}

// validate checks a defaulted config; each error names the field.
func (c *ServerConfig) validate() error {
	var errs []error
	for _, d := range []struct {
		name string
		v    time.Duration
	}{
		{"ReadHeaderTimeout", c.ReadHeaderTimeout},
		{"BodyTimeout", c.BodyTimeout},
		{"IdleTimeout", c.IdleTimeout},
		{"ShutdownBodyTimeout", c.ShutdownBodyTimeout},
		{"WriteTimeout", c.WriteTimeout},
	} {
		if d.v < time.Millisecond {
			errs = append(errs, bounds.Errorf(d.name, d.v, "must be at least 1ms"))
		}
	}
	for _, f := range []struct {
		name string
		v    int
	}{{"BodyReserve", c.BodyReserve}, {"MaxInFlightBodies", c.MaxInFlightBodies}, {"MaxHeaderBytes", c.MaxHeaderBytes}, {"MaxConns", c.MaxConns}} {
		if f.v < 1 {
			errs = append(errs, bounds.Errorf(f.name, f.v, "must be positive"))
		}
	}
	if c.MaxClientBodies < 1 || c.MaxClientBodies > c.MaxInFlightBodies {
		errs = append(errs, bounds.Errorf("MaxClientBodies", c.MaxClientBodies, "must be between 1 and MaxInFlightBodies (%d)", c.MaxInFlightBodies))
	}
	if t := c.TLS; t != nil {
		if len(t.Certificates) == 0 && t.GetCertificate == nil && t.GetConfigForClient == nil {
			errs = append(errs, bounds.Rule("TLS", "must hold a certificate"))
		}
		if t.MinVersion < tls.VersionTLS12 {
			errs = append(errs, bounds.Errorf("TLS", "MinVersion "+tls.VersionName(t.MinVersion), "must not allow versions before TLS 1.2"))
		}
	}
	return errors.Join(errs...)
}

// Server serves a handler (the one New returns) over HTTP/1.1, or HTTPS
// with ServerConfig.TLS, with bounds on what a client may hold: the time to
// send headers and a body and to read an answer, idle keep-alive
// connections, the connections open and the bodies read at once
// (ServerConfig). It refuses a request with both Content-Length and
// Transfer-Encoding (400, and the connection closed: RFC 9112 section 6.1),
// and logs the errors of its connections (accept failures, TLS handshakes)
// at warn. Its Shutdown answers the requests in flight and does not wait for
// stalled clients.
type Server struct {
	cfg    ServerConfig
	srv    *http.Server
	logger *zap.Logger
	conns  *conns

	slots chan struct{} // one per body being read
	// reserve holds a place per body of the operator's or viewer's scope
	// read beyond slots (BodyReserve).
	reserve chan struct{}

	mu sync.Mutex
	// reading are the bodies being read, for Shutdown to cut short.
	reading map[*limitedBody]struct{}
	// byClient counts the places held by each client's bodies
	// (MaxClientBodies), by limitedBody.client.
	byClient map[string]int
	// closing is set when Shutdown begins; cutAt is then the latest
	// deadline of any body.
	closing bool
	cutAt   time.Time
}

// NewServer returns a Server for handler. A nil logger logs nothing.
func NewServer(handler http.Handler, cfg *ServerConfig, logger *zap.Logger) (*Server, error) {
	c := cfg.withDefaults()
	if err := c.validate(); err != nil {
		return nil, fmt.Errorf("invalid HTTP server config: %w", err)
	}
	if logger == nil {
		logger = zap.NewNop()
	}
	s := &Server{cfg: c, logger: logger.Named("http"), slots: make(chan struct{}, c.MaxInFlightBodies),
		reserve: make(chan struct{}, c.BodyReserve), reading: map[*limitedBody]struct{}{}, byClient: map[string]int{}}
	var err error
	if s.conns, err = newConns(&c, s.logger); err != nil {
		return nil, err
	}
	// The server's own errors (accept failures, a panic in a handler, a
	// malformed response) at warn: below that they would be dropped.
	errorLog, err := zap.NewStdLogAt(s.logger, zap.WarnLevel)
	if err != nil {
		return nil, err
	}
	s.srv = &http.Server{
		Handler:           s.wrap(handler),
		ReadHeaderTimeout: c.ReadHeaderTimeout,
		IdleTimeout:       c.IdleTimeout,
		MaxHeaderBytes:    c.MaxHeaderBytes,
		ErrorLog:          errorLog,
		ConnState:         s.conns.state,
		ConnContext: func(ctx context.Context, nc net.Conn) context.Context {
			return context.WithValue(ctx, connKey{}, nc)
		},
	}
	return s, nil
}

// Serve accepts connections on ln until Shutdown (under the cap of
// ServerConfig.MaxConns, and with TLS when configured); it returns nil
// after Shutdown and the error that stopped it otherwise.
func (s *Server) Serve(ln net.Listener) error {
	if err := s.srv.Serve(s.conns.listen(ln)); !errors.Is(err, http.ErrServerClosed) {
		return fmt.Errorf("error serving HTTP: %w", err)
	}
	return nil
}

// Shutdown stops accepting connections, closes the idle ones, gives the
// bodies still arriving at most ServerConfig.ShutdownBodyTimeout more, and
// waits for every request in flight to be answered. When ctx ends first it
// closes every connection and returns the context's error.
func (s *Server) Shutdown(ctx context.Context) error {
	s.mu.Lock()
	if !s.closing {
		s.closing = true
		s.cutAt = time.Now().Add(s.cfg.ShutdownBodyTimeout)
	}
	cut := 0
	for b := range s.reading {
		if b.deadline.After(s.cutAt) {
			b.setDeadline(s.cutAt, true)
			cut++
		}
	}
	s.mu.Unlock()
	if cut > 0 {
		s.logger.Info("shutting down: bodies still arriving get a short deadline",
			zap.Int("bodies", cut), zap.Duration("within", s.cfg.ShutdownBodyTimeout))
	}
	if err := s.srv.Shutdown(ctx); err != nil {
		_ = s.srv.Close()
		return fmt.Errorf("error shutting down the HTTP server: %w", err)
	}
	return nil
}

// wrap puts every request under the server's limits: a request with both
// Content-Length and Transfer-Encoding is refused, a connection of the
// reserve serves the probes only, the answer is written within
// WriteTimeout, and the body is read under the body limits.
func (s *Server) wrap(next http.Handler) http.Handler {
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if t, ok := r.Context().Value(connKey{}).(*trackedConn); ok {
			n := int(t.requests.Add(1))
			if t.frames.smuggled(n) {
				s.conns.count(shedBoth)
				w.Header().Set("Connection", "close")
				writeProblem(w, r, newProblem(http.StatusBadRequest, ProblemMalformed, "Malformed request",
					"a request must not carry both Content-Length and Transfer-Encoding (RFC 9112, section 6.1); the connection is closed"))
				return
			}
			if t.reserve {
				w.Header().Set("Connection", "close")
				if r.URL.Path != "/healthz" && r.URL.Path != "/readyz" {
					s.conns.count(shedReserve)
					w.Header().Set("Retry-After", "1")
					writeProblem(w, r, newProblem(http.StatusServiceUnavailable, "", "",
						"every connection this instance takes is busy: only /healthz and /readyz are answered beyond them; retry later"))
					return
				}
			}
		}
		rc := http.NewResponseController(w)
		// The previous answer's deadline must not cut this one before it
		// starts (a 100 Continue, an answer after a long handler).
		_ = rc.SetWriteDeadline(time.Time{})
		dw := &deadlineWriter{ResponseWriter: w, rc: rc, timeout: s.cfg.WriteTimeout}
		defer dw.start()
		if r.Body == nil || r.Body == http.NoBody {
			next.ServeHTTP(dw, r)
			return
		}
		b := &limitedBody{ReadCloser: r.Body, s: s, rc: rc, client: "ip:" + remoteIP(r)}
		defer b.abandon()
		r.Body = b
		// The handler marks a body of the operator's or viewer's scope
		// (privileged), found through the context: middleware may wrap
		// the body.
		next.ServeHTTP(dw, r.WithContext(context.WithValue(r.Context(), bodyKey{}, b)))
	})
}

// remoteIP is the address of r's connection without its port.
func remoteIP(r *http.Request) string {
	if host, _, err := net.SplitHostPort(r.RemoteAddr); err == nil {
		return host
	}
	return r.RemoteAddr
}

// deadlineWriter sets the connection's write deadline, WriteTimeout ahead,
// when its answer starts.
type deadlineWriter struct {
	http.ResponseWriter
	rc      *http.ResponseController
	timeout time.Duration
	started bool
}

// start sets the deadline at the first write (or when the handler returns
// without one: net/http then writes the answer).
func (d *deadlineWriter) start() {
	if !d.started {
		d.started = true
		_ = d.rc.SetWriteDeadline(time.Now().Add(d.timeout))
	}
}

func (d *deadlineWriter) WriteHeader(code int) {
	if code >= 200 { // an informational answer is not the answer
		d.start()
	}
	d.ResponseWriter.WriteHeader(code)
}

func (d *deadlineWriter) Write(b []byte) (int, error) {
	d.start()
	return d.ResponseWriter.Write(b)
}

// Unwrap lets http.ResponseController reach the connection.
func (d *deadlineWriter) Unwrap() http.ResponseWriter { return d.ResponseWriter }
