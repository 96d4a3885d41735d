package httpapi_test

import (
	"bufio"
	"context"
	"crypto/tls"
	"encoding/json"
	"fmt"
	"io"
	"net"
	"net/http"
	"strings"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/stretchr/testify/require"
	"go.uber.org/zap"

	"github.com/outboxd/outboxd/internal/httpapi"
	"github.com/outboxd/outboxd/internal/testkit"
	"github.com/outboxd/outboxd/outbox"
	"github.com/outboxd/outboxd/store/sqlitestore"
)

// serverBundle is the ingest API behind an httpapi.Server on a spare port,
// on a fresh SQLite store.
type serverBundle struct {
	st     *sqlitestore.Store
	srv    *httpapi.Server
	reg    *prometheus.Registry
	addr   string
	served chan error
}

func setupServer(t *testing.T, cfg *httpapi.ServerConfig) *serverBundle {
	t.Helper()
	st := testkit.NewSQLite(t)
	reg := prometheus.NewRegistry()
	h, err := httpapi.New(&httpapi.Config{Writer: outbox.NewWriter(st, nil), Store: st, Registerer: reg,
		Ready: []httpapi.Check{{Name: "store", Func: st.Ping}}}, testkit.Logger(t))
	require.NoError(t, err)
	b := serve(t, h, cfg, reg, testkit.Logger(t))
	b.st = st
	return b
}

// serve serves handler with a Server of cfg on a spare port until the test
// ends; the server's metrics go to reg.
func serve(t *testing.T, handler http.Handler, cfg *httpapi.ServerConfig, reg *prometheus.Registry, logger *zap.Logger) *serverBundle {
	t.Helper()
	c := httpapi.ServerConfig{}
	if cfg != nil {
		c = *cfg
	}
	c.Registerer = reg
	srv, err := httpapi.NewServer(handler, &c, logger)
	require.NoError(t, err)
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	require.NoError(t, err)
	b := &serverBundle{srv: srv, reg: reg, addr: ln.Addr().String(), served: make(chan error, 1)}
	go func() { b.served <- srv.Serve(ln) }()
	t.Cleanup(func() {
		ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
		defer cancel()
		_ = srv.Shutdown(ctx)
		<-b.served
	})
	return b
}

// rawConn is a client connection written by hand, to send what a hostile
// client sends.
type rawConn struct {
	net.Conn
	r *bufio.Reader
}

func (b *serverBundle) dial(t *testing.T) *rawConn {
	t.Helper()
	c, err := net.Dial("tcp", b.addr)
	require.NoError(t, err)
	t.Cleanup(func() { _ = c.Close() })
	return &rawConn{Conn: c, r: bufio.NewReader(c)}
}

// postHead sends the head of POST path announcing a body of length bytes,
// and then the first part of that body.
func (c *rawConn) postHead(t *testing.T, path string, length int, part string, header ...string) {
	t.Helper()
	var h strings.Builder
	fmt.Fprintf(&h, "POST %s HTTP/1.1\r\nHost: outboxd\r\nContent-Type: application/json\r\nContent-Length: %d\r\n", path, length)
	for i := 0; i+1 < len(header); i += 2 {
		fmt.Fprintf(&h, "%s: %s\r\n", header[i], header[i+1])
	}
	h.WriteString("\r\n")
	h.WriteString(part)
	_, err := io.WriteString(c, h.String())
	require.NoError(t, err)
}

// rawReply is an answer and whether the server announced it closes the
// connection after it.
type rawReply struct {
	reply
	close bool
}

// answer reads the next response within wait.
func (c *rawConn) answer(t *testing.T, wait time.Duration) rawReply {
	t.Helper()
	require.NoError(t, c.SetReadDeadline(time.Now().Add(wait)))
	res, err := http.ReadResponse(c.r, nil)
	require.NoError(t, err, "no answer within %s", wait)
	defer res.Body.Close()
	data, err := io.ReadAll(res.Body)
	require.NoError(t, err)
	return rawReply{reply: reply{status: res.StatusCode, header: res.Header, body: data}, close: res.Close}
}

// requireClosed checks that the server closes the connection within wait.
func (c *rawConn) requireClosed(t *testing.T, wait time.Duration) {
	t.Helper()
	require.NoError(t, c.SetReadDeadline(time.Now().Add(wait)))
	_, err := c.r.ReadByte()
	require.ErrorIs(t, err, io.EOF, "the server kept the connection open")
}

// inFlight is outboxd_http_requests_in_flight for route.
func (b *serverBundle) inFlight(route string) float64 {
	families, err := b.reg.Gather()
	if err != nil {
		return -1
	}
	for _, f := range families {
		if f.GetName() != "outboxd_http_requests_in_flight" {
			continue
		}
		for _, m := range f.GetMetric() {
			for _, l := range m.GetLabel() {
				if l.GetName() == "route" && l.GetValue() == route {
					return m.GetGauge().GetValue()
				}
			}
		}
	}
	return 0
}

// TestServer sends what a hostile client sends at the connection level
// and checks the answer, the connection and the store.
func TestServer(t *testing.T) {
	t.Parallel()
	event := eventJSON("d1")

	t.Run("StalledBodyIsAnswered408", func(t *testing.T) {
		t.Parallel()
		b := setupServer(t, &httpapi.ServerConfig{BodyTimeout: 300 * time.Millisecond})
		c := b.dial(t)
		start := time.Now()
		c.postHead(t, "/v1/events", len(event), event[:10])
		r := c.answer(t, 10*time.Second)
		r.problem(t, http.StatusRequestTimeout)
		require.GreaterOrEqual(t, time.Since(start), 300*time.Millisecond)
		require.True(t, r.close, "Connection: close")
		c.requireClosed(t, 5*time.Second)
		testkit.RequireStored(t, b.st, 0)
		require.Zero(t, httpapi.BodiesInFlight(b.srv))
	})

	t.Run("TricklingBodyIsAnswered408", func(t *testing.T) {
		t.Parallel()
		b := setupServer(t, &httpapi.ServerConfig{BodyTimeout: 300 * time.Millisecond})
		c := b.dial(t)
		c.postHead(t, "/v1/events", len(event), "")
		stop := make(chan struct{})
		defer close(stop)
		go func() {
			// One byte every 50ms: the body would take seconds.
			tick := time.NewTicker(50 * time.Millisecond)
			defer tick.Stop()
			for i := 0; i < len(event); i++ {
				select {
				case <-stop:
					return
				case <-tick.C:
				}
				if _, err := c.Write([]byte{event[i]}); err != nil {
					return
				}
			}
		}()
		c.answer(t, 10*time.Second).problem(t, http.StatusRequestTimeout)
		testkit.RequireStored(t, b.st, 0)
	})

	t.Run("DeclaredTooLargeIsRefusedUnread", func(t *testing.T) {
		t.Parallel()
		b := setupServer(t, nil)
		c := b.dial(t)
		c.postHead(t, "/v1/events", 10<<20, "")
		r := c.answer(t, 2*time.Second)
		r.problem(t, http.StatusRequestEntityTooLarge)
		c.requireClosed(t, 5*time.Second)
		testkit.RequireStored(t, b.st, 0)
	})

	t.Run("BodiesInFlightAreBounded", func(t *testing.T) {
		t.Parallel()
		b := setupServer(t, &httpapi.ServerConfig{MaxInFlightBodies: 2, MaxClientBodies: 2, BodyTimeout: time.Minute})
		stalled := []*rawConn{b.dial(t), b.dial(t)}
		for _, c := range stalled {
			c.postHead(t, "/v1/events", len(event), event[:10])
		}
		require.Eventually(t, func() bool { return httpapi.BodiesInFlight(b.srv) == 2 },
			10*time.Second, 5*time.Millisecond, "the stalled bodies never took their slots")

		// A third body is refused at once, without being read.
		c := b.dial(t)
		start := time.Now()
		c.postHead(t, "/v1/events", len(event), event)
		r := c.answer(t, 5*time.Second)
		r.problem(t, http.StatusServiceUnavailable)
		require.Less(t, time.Since(start), 5*time.Second)
		require.NotEmpty(t, r.header.Get("Retry-After"))
		c.requireClosed(t, 5*time.Second)
		// Requests without a body are served.
		h := b.dial(t)
		_, err := io.WriteString(h, "GET /healthz HTTP/1.1\r\nHost: outboxd\r\n\r\n")
		require.NoError(t, err)
		require.Equal(t, http.StatusOK, h.answer(t, 5*time.Second).status)
		testkit.RequireStored(t, b.st, 0)

		// A stalled body that completes is served, and frees its slot.
		_, err = io.WriteString(stalled[0], event[10:])
		require.NoError(t, err)
		require.Equal(t, http.StatusCreated, stalled[0].answer(t, 10*time.Second).status)
		require.Eventually(t, func() bool { return httpapi.BodiesInFlight(b.srv) == 1 },
			10*time.Second, 5*time.Millisecond)
		next := b.dial(t)
		next.postHead(t, "/v1/events", len(eventJSON("d2")), eventJSON("d2"))
		require.Equal(t, http.StatusCreated, next.answer(t, 10*time.Second).status)
		testkit.RequireStored(t, b.st, 2)
	})

	t.Run("IdleConnectionsAreClosed", func(t *testing.T) {
		t.Parallel()
		b := setupServer(t, &httpapi.ServerConfig{IdleTimeout: 200 * time.Millisecond})
		c := b.dial(t)
		_, err := io.WriteString(c, "GET /healthz HTTP/1.1\r\nHost: outboxd\r\n\r\n")
		require.NoError(t, err)
		require.Equal(t, http.StatusOK, c.answer(t, 5*time.Second).status)
		start := time.Now()
		c.requireClosed(t, 10*time.Second)
		require.GreaterOrEqual(t, time.Since(start), 150*time.Millisecond)
	})

	t.Run("LargeHeadersAre431", func(t *testing.T) {
		t.Parallel()
		b := setupServer(t, nil)
		c := b.dial(t)
		c.postHead(t, "/v1/events", len(event), event, "X-Padding", strings.Repeat("p", httpapi.MaxHeaderBytesDefault+8192))
		require.Equal(t, http.StatusRequestHeaderFieldsTooLarge, c.answer(t, 5*time.Second).status)
		testkit.RequireStored(t, b.st, 0)
	})

	// Shutdown answers the request in flight, cuts the stalled body short,
	// closes the idle connection and returns nil without waiting for the
	// stalled client.
	t.Run("ShutdownAnswersWhatCompletedAndCutsWhatStalled", func(t *testing.T) {
		t.Parallel()
		ctx := context.Background()
		b := setupServer(t, &httpapi.ServerConfig{BodyTimeout: time.Minute, ShutdownBodyTimeout: 200 * time.Millisecond})

		idle := b.dial(t)
		_, err := io.WriteString(idle, "GET /healthz HTTP/1.1\r\nHost: outboxd\r\n\r\n")
		require.NoError(t, err)
		require.Equal(t, http.StatusOK, idle.answer(t, 5*time.Second).status)

		stalled := b.dial(t)
		stalled.postHead(t, "/v1/events", len(event), event[:10])

		// A request in flight: complete, waiting for the store's write lock.
		other, err := sqlitestore.Open(ctx, b.st.Path(), nil)
		require.NoError(t, err)
		defer other.Close(ctx)
		lock, err := other.DB().BeginTx(ctx, nil)
		require.NoError(t, err)
		defer lock.Rollback()
		_, err = lock.ExecContext(ctx, `CREATE TABLE hold_the_lock (x INTEGER)`)
		require.NoError(t, err)
		inFlight := b.dial(t)
		inFlight.postHead(t, "/v1/events", len(eventJSON("d2")), eventJSON("d2"))
		require.Eventually(t, func() bool {
			return b.inFlight("POST /v1/events") == 2 && httpapi.BodiesInFlight(b.srv) == 1
		}, 10*time.Second, 5*time.Millisecond, "the requests never reached the handler")

		start := time.Now()
		shutdown := make(chan error, 1)
		go func() {
			sctx, cancel := context.WithTimeout(ctx, 30*time.Second)
			defer cancel()
			shutdown <- b.srv.Shutdown(sctx)
		}()
		r := stalled.answer(t, 5*time.Second)
		r.problem(t, http.StatusServiceUnavailable)
		require.NotEmpty(t, r.header.Get("Retry-After"))
		require.Less(t, time.Since(start), 5*time.Second)
		stalled.requireClosed(t, 5*time.Second)
		idle.requireClosed(t, 5*time.Second)
		select {
		case err := <-shutdown:
			t.Fatalf("Shutdown returned (%v) with a request in flight", err)
		default:
		}

		require.NoError(t, lock.Rollback())
		r = inFlight.answer(t, 15*time.Second)
		require.Equal(t, http.StatusCreated, r.status, "body: %s", r.body)
		var created outbox.Result
		require.NoError(t, json.Unmarshal(r.body, &created))
		select {
		case err := <-shutdown:
			require.NoError(t, err)
		case <-time.After(15 * time.Second):
			t.Fatal("Shutdown did not return after the last answer")
		}
		require.NoError(t, <-b.served)
		b.served <- nil // for the cleanup
		testkit.RequireStored(t, b.st, 1)
		require.Equal(t, "d2", testkit.Event(t, b.st, created.ID).DeviceKey)
	})

	t.Run("ConfigNamesTheField", func(t *testing.T) {
		t.Parallel()
		for field, cfg := range map[string]*httpapi.ServerConfig{
			"ReadHeaderTimeout":   {ReadHeaderTimeout: -time.Second},
			"BodyTimeout":         {BodyTimeout: -time.Second},
			"IdleTimeout":         {IdleTimeout: -1},
			"MaxInFlightBodies":   {MaxInFlightBodies: -1},
			"MaxHeaderBytes":      {MaxHeaderBytes: -1},
			"ShutdownBodyTimeout": {ShutdownBodyTimeout: -time.Second},
			"WriteTimeout":        {WriteTimeout: -time.Second},
			"MaxConns":            {MaxConns: -1},
			"TLS must hold":       {TLS: &tls.Config{}},
			"TLS must not allow":  {TLS: &tls.Config{Certificates: []tls.Certificate{{}}, MinVersion: tls.VersionTLS11}},
		} {
			_, err := httpapi.NewServer(http.NotFoundHandler(), cfg, nil)
			require.ErrorContains(t, err, field)
		}
		_, err := httpapi.NewServer(http.NotFoundHandler(), nil, nil)
		require.NoError(t, err)
	})
}

// TestSlowBodiesLeaveTheOperatorAPlace: ingest clients trickling their
// bodies take every place (MaxInFlightBodies): another ingest post gets
// 503 with Retry-After (httpapi.ProblemBusy, which the CLI retries), and a
// request of the operator's token still has its body read, from the
// reserve (BodyReserve).
func TestSlowBodiesLeaveTheOperatorAPlace(t *testing.T) {
	t.Parallel()
	st := testkit.NewSQLite(t)
	reg := prometheus.NewRegistry()
	const ingestToken, operatorToken = "ingest-token-0123456789", "operator-token-0123456789"
	h, err := httpapi.New(&httpapi.Config{Writer: outbox.NewWriter(st, nil), Store: st, Registerer: reg,
		IngestToken: ingestToken, AuthToken: operatorToken}, testkit.Logger(t))
	require.NoError(t, err)
	b := serve(t, h, &httpapi.ServerConfig{MaxInFlightBodies: 3, MaxClientBodies: 3, BodyReserve: 1, BodyTimeout: time.Minute}, reg, testkit.Logger(t))
	b.st = st
	event := `{"sourceKey":"s","deviceKey":"d","occurredAt":"2026-11-01T10:00:00Z"}`
	for range 3 {
		b.dial(t).postHead(t, "/v1/events", len(event), event[:10], "Authorization", "Bearer "+ingestToken)
	}
	require.Eventually(t, func() bool { return httpapi.BodiesInFlight(b.srv) == 3 },
		10*time.Second, 5*time.Millisecond, "the trickling bodies never took their places")

	c := b.dial(t)
	c.postHead(t, "/v1/events", len(event), event, "Authorization", "Bearer "+ingestToken)
	r := c.answer(t, 5*time.Second)
	p := r.problem(t, http.StatusServiceUnavailable)
	require.Equal(t, httpapi.ProblemBusy, p.Type)
	require.NotEmpty(t, r.header.Get("Retry-After"))

	op := b.dial(t)
	op.postHead(t, "/v1/events", len(event), event, "Authorization", "Bearer "+operatorToken)
	require.Equal(t, http.StatusCreated, op.answer(t, 5*time.Second).status, "the operator's body is read from the reserve")
	testkit.RequireStored(t, st, 1)
}

// TestSlowBodiesOfOneClientLeaveOthersAPlace: one client's trickling
// bodies take at most ServerConfig.MaxClientBodies places: its next body
// is 503 busy while another named client's, from the same address, is
// read and stored; an unnamed client's share is its address's.
func TestSlowBodiesOfOneClientLeaveOthersAPlace(t *testing.T) {
	t.Parallel()
	st := testkit.NewSQLite(t)
	reg := prometheus.NewRegistry()
	const acme, globex, ingest = "acme-token-0123456789", "globex-token-0123456789", "ingest-token-0123456789"
	h, err := httpapi.New(&httpapi.Config{Writer: outbox.NewWriter(st, nil), Store: st, Registerer: reg,
		IngestToken: ingest, IngestClients: map[string]string{"acme": acme, "globex": globex}}, testkit.Logger(t))
	require.NoError(t, err)
	b := serve(t, h, &httpapi.ServerConfig{MaxInFlightBodies: 6, MaxClientBodies: 2, BodyTimeout: time.Minute}, reg, testkit.Logger(t))
	event := func(device string) string {
		return `{"sourceKey":"s","deviceKey":"` + device + `","occurredAt":"2026-11-01T10:00:00Z"}`
	}
	busy := func(token string) {
		t.Helper()
		c := b.dial(t)
		c.postHead(t, "/v1/events", len(event("x")), event("x"), "Authorization", "Bearer "+token)
		p := c.answer(t, 5*time.Second).problem(t, http.StatusServiceUnavailable)
		require.Equal(t, httpapi.ProblemBusy, p.Type)
	}
	for range 2 {
		b.dial(t).postHead(t, "/v1/events", len(event("a")), event("a")[:10], "Authorization", "Bearer "+acme)
	}
	require.Eventually(t, func() bool { return httpapi.BodiesInFlight(b.srv) == 2 },
		10*time.Second, 5*time.Millisecond, "the trickling bodies never took their places")
	busy(acme)
	for i, token := range []string{globex, ingest} {
		c := b.dial(t)
		c.postHead(t, "/v1/events", len(event(token)), event(token), "Authorization", "Bearer "+token)
		require.Equal(t, http.StatusCreated, c.answer(t, 5*time.Second).status, "another client's body is read")
		testkit.RequireStored(t, st, int64(i+1))
	}

	// The unnamed clients of one address share its places.
	for range 2 {
		b.dial(t).postHead(t, "/v1/events", len(event("i")), event("i")[:10], "Authorization", "Bearer "+ingest)
	}
	require.Eventually(t, func() bool { return httpapi.BodiesInFlight(b.srv) == 4 },
		10*time.Second, 5*time.Millisecond, "the trickling bodies never took their places")
	busy(ingest)
	c := b.dial(t)
	c.postHead(t, "/v1/events", len(event("g")), event("g"), "Authorization", "Bearer "+globex)
	require.Equal(t, http.StatusCreated, c.answer(t, 5*time.Second).status)
	testkit.RequireStored(t, st, 3)
}
