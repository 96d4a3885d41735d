package httpapi

import (
	"cmp"
	"context"
	"errors"
	"fmt"
	"net"
	"net/http"
	"sync"
	"time"

	"go.uber.org/zap"
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
	// MaxHeaderBytesDefault bounds a request line and its headers.
	MaxHeaderBytesDefault = 64 << 10
	// ShutdownBodyTimeoutDefault is how long a body still arriving when
	// shutdown begins may take.
	ShutdownBodyTimeoutDefault = time.Second
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
	// MaxHeaderBytes bounds a request line and its headers; a larger one is
	// answered 431. Defaults to MaxHeaderBytesDefault (64 KiB).
	MaxHeaderBytes int
	// ShutdownBodyTimeout is how much longer a body still arriving when
	// Shutdown begins may take; a body not complete by then is answered 503
	// with Retry-After and its connection closed, so that a stalled client
	// cannot hold up the shutdown. Defaults to ShutdownBodyTimeoutDefault
	// (1 second).
	ShutdownBodyTimeout time.Duration
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
	out.MaxHeaderBytes = cmp.Or(out.MaxHeaderBytes, MaxHeaderBytesDefault)
	out.ShutdownBodyTimeout = cmp.Or(out.ShutdownBodyTimeout, ShutdownBodyTimeoutDefault)
	return out
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
	} {
		if d.v < time.Millisecond {
			errs = append(errs, fmt.Errorf("%s must be at least 1ms (got %s)", d.name, d.v))
		}
	}
	if c.MaxInFlightBodies < 1 {
		errs = append(errs, fmt.Errorf("MaxInFlightBodies must be positive (got %d)", c.MaxInFlightBodies))
	}
	if c.MaxHeaderBytes < 1 {
		errs = append(errs, fmt.Errorf("MaxHeaderBytes must be positive (got %d)", c.MaxHeaderBytes))
	}
	return errors.Join(errs...)
}

// Server serves a handler (the one New returns) over HTTP/1.1 with bounds
// on what a client may hold: the time to send headers and a body, idle
// keep-alive connections, and the bodies read at once (ServerConfig). Its
// Shutdown answers the requests in flight and does not wait for stalled
// clients.
type Server struct {
	cfg    ServerConfig
	srv    *http.Server
	logger *zap.Logger

	slots chan struct{} // one per body being read

	mu sync.Mutex
	// reading are the bodies being read, for Shutdown to cut short.
	reading map[*limitedBody]struct{}
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
		reading: map[*limitedBody]struct{}{}}
	s.srv = &http.Server{
		Handler:           s.wrap(handler),
		ReadHeaderTimeout: c.ReadHeaderTimeout,
		IdleTimeout:       c.IdleTimeout,
		MaxHeaderBytes:    c.MaxHeaderBytes,
		ErrorLog:          zap.NewStdLog(s.logger.WithOptions(zap.IncreaseLevel(zap.WarnLevel))),
	}
	return s, nil
}

// Serve accepts connections on ln until Shutdown; it returns nil after
// Shutdown and the error that stopped it otherwise.
func (s *Server) Serve(ln net.Listener) error {
	if err := s.srv.Serve(ln); !errors.Is(err, http.ErrServerClosed) {
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

// wrap puts every request body under the server's limits.
func (s *Server) wrap(next http.Handler) http.Handler {
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if r.Body == nil || r.Body == http.NoBody {
			next.ServeHTTP(w, r)
			return
		}
		b := &limitedBody{ReadCloser: r.Body, s: s, rc: http.NewResponseController(w)}
		defer b.abandon()
		r.Body = b
		next.ServeHTTP(w, r)
	})
}
