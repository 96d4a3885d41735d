package httpapi_test

import (
	"bufio"
	"bytes"
	"crypto/tls"
	"errors"
	"fmt"
	"io"
	"net"
	"net/http"
	"os"
	"strings"
	"sync"
	"sync/atomic"
	"syscall"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/stretchr/testify/require"
	"go.uber.org/zap"
	"go.uber.org/zap/zapcore"
	"go.uber.org/zap/zaptest/observer"

	"github.com/outboxd/outboxd/internal/httpapi"
	"github.com/outboxd/outboxd/internal/testkit"
)

// connections returns outboxd_http_connections{kind}.
func (b *serverBundle) connections(t *testing.T, kind string) float64 {
	t.Helper()
	return testkit.Metric(t, b.reg, "outboxd_http_connections", "kind", kind)
}

// request sends one request on a new connection and reads its answer.
func (b *serverBundle) request(t *testing.T, raw string, wait time.Duration) rawReply {
	t.Helper()
	c := b.dial(t)
	_, err := io.WriteString(c, raw)
	require.NoError(t, err)
	return c.answer(t, wait)
}

// flood keeps n connections open to addr until stop: each sends GET
// /healthz and then idles, a keep-alive connection (or, silent, sends
// nothing at all), and is opened again when the server closes it (a
// silent one is not). It returns how many connections it opened.
func flood(addr string, n int, silent bool, stop <-chan struct{}) (opened *atomic.Int64, done *sync.WaitGroup) {
	opened, done = &atomic.Int64{}, &sync.WaitGroup{}
	pause := func() bool {
		select {
		case <-stop:
			return false
		case <-time.After(10 * time.Millisecond):
			return true
		}
	}
	for range n {
		done.Go(func() {
			for {
				c, err := net.DialTimeout("tcp", addr, time.Second)
				if err != nil {
					if !pause() {
						return
					}
					continue
				}
				opened.Add(1)
				if !silent {
					_, _ = io.WriteString(c, "GET /healthz HTTP/1.1\r\nHost: localhost\r\n\r\n")
				}
				closed := make(chan struct{})
				go func() {
					_, _ = io.Copy(io.Discard, c) // until the server closes it
					close(closed)
				}()
				select {
				case <-stop:
				case <-closed:
				}
				_ = c.Close()
				<-closed
				if silent || !pause() {
					return
				}
			}
		})
	}
	return opened, done
}

// ingestUnder posts an event on a new connection, again after a 503 with
// Retry-After (as a client does) until deadline, and returns the answer.
func (b *serverBundle) ingestUnder(t *testing.T, device string, deadline time.Duration) rawReply {
	t.Helper()
	ev := eventJSON(device)
	end := time.Now().Add(deadline)
	for {
		c := b.dial(t)
		c.postHead(t, "/v1/events", len(ev), ev)
		r := c.answer(t, 10*time.Second)
		if r.status != http.StatusServiceUnavailable || r.header.Get("Retry-After") == "" || time.Now().After(end) {
			return r
		}
		time.Sleep(100 * time.Millisecond)
	}
}

// TestConnectionCap: floods of connections against a low cap
// . The open connections stay within the cap and its reserve, and
// /healthz, /readyz and ingest still answer: idle connections make room at
// the cap, and when every connection is busy the probes have a reserve.
func TestConnectionCap(t *testing.T) {
	t.Parallel()
	const maxConns = 8
	probe := func(t *testing.T, b *serverBundle) {
		t.Helper()
		require.LessOrEqual(t, b.connections(t, "capped"), float64(maxConns))
		require.LessOrEqual(t, b.connections(t, "reserve"), float64(httpapi.ProbeReserve))
		for _, path := range []string{"/healthz", "/readyz"} {
			r := b.request(t, "GET "+path+" HTTP/1.1\r\nHost: localhost\r\n\r\n", 10*time.Second)
			require.Equal(t, http.StatusOK, r.status, "%s under the flood: %s", path, r.body)
		}
	}

	// A flood of idle keep-alive connections to /healthz, opened
	// again as soon as the server closes them.
	t.Run("IdleKeepAliveFlood", func(t *testing.T) {
		t.Parallel()
		b := setupServer(t, &httpapi.ServerConfig{MaxConns: maxConns})
		stop := make(chan struct{})
		opened, done := flood(b.addr, 10*maxConns, false, stop)
		defer func() {
			close(stop)
			done.Wait()
		}()
		require.Eventually(t, func() bool { return opened.Load() >= 20*maxConns }, 30*time.Second, 5*time.Millisecond,
			"the flood never got going")
		for i := range 5 {
			probe(t, b)
			r := b.ingestUnder(t, fmt.Sprintf("flood-%d", i), 30*time.Second)
			require.Equal(t, http.StatusCreated, r.status, "ingest under the flood: %s", r.body)
		}
		require.Greater(t, testkit.Metric(t, b.reg, "outboxd_http_connections_shed_total", "reason", "idle_closed"), 0.0)
		testkit.RequireStored(t, b.st, 5)
	})

	// Connections that send nothing (and are not opened again) hold their
	// place for a moment only: at the cap, the one silent the longest makes
	// room.
	t.Run("SilentConnections", func(t *testing.T) {
		t.Parallel()
		b := setupServer(t, &httpapi.ServerConfig{MaxConns: maxConns})
		stop := make(chan struct{})
		opened, done := flood(b.addr, 4*maxConns, true, stop)
		defer func() {
			close(stop)
			done.Wait()
		}()
		require.Eventually(t, func() bool {
			return opened.Load() == 4*maxConns && testkit.Metric(t, b.reg, "outboxd_http_connections_shed_total", "reason", "idle_closed") > 0
		}, 30*time.Second, 5*time.Millisecond, "the server never met the flood")
		for i := range 3 {
			probe(t, b)
			r := b.ingestUnder(t, fmt.Sprintf("silent-%d", i), 30*time.Second)
			require.Equal(t, http.StatusCreated, r.status, "ingest among silent connections: %s", r.body)
		}
		testkit.RequireStored(t, b.st, 3)
	})

	t.Run("BusyConnectionsLeaveTheProbesAReserve", func(t *testing.T) {
		t.Parallel()
		const maxConns = 4
		b := setupServer(t, &httpapi.ServerConfig{MaxConns: maxConns, BodyTimeout: time.Minute})
		ev := eventJSON("busy")
		for range maxConns {
			b.dial(t).postHead(t, "/v1/events", len(ev), ev[:10]) // busy: its body stalls
		}
		require.Eventually(t, func() bool { return httpapi.BodiesInFlight(b.srv) == maxConns },
			10*time.Second, 5*time.Millisecond, "the stalled bodies never reached the handler")
		require.Equal(t, float64(maxConns), b.connections(t, "capped"))

		for _, path := range []string{"/healthz", "/readyz"} {
			r := b.request(t, "GET "+path+" HTTP/1.1\r\nHost: localhost\r\n\r\n", 10*time.Second)
			require.Equal(t, http.StatusOK, r.status, "%s beyond the cap: %s", path, r.body)
			require.True(t, r.close, "a connection of the reserve serves one answer")
		}
		c := b.dial(t)
		c.postHead(t, "/v1/events", len(ev), ev)
		r := c.answer(t, 10*time.Second)
		r.problem(t, http.StatusServiceUnavailable)
		require.NotEmpty(t, r.header.Get("Retry-After"))
		require.True(t, r.close)
		c.requireClosed(t, 5*time.Second)
		require.Equal(t, 1.0, testkit.Metric(t, b.reg, "outboxd_http_connections_shed_total", "reason", "reserve_refused"))
		testkit.RequireStored(t, b.st, 0)
	})
}

// TestWriteTimeout: a client that reads an answer slower than
// WriteTimeout allows is cut off, and the handler freed;
// the deadline starts with the answer, not with the request.
func TestWriteTimeout(t *testing.T) {
	t.Parallel()
	const timeout = 300 * time.Millisecond
	big := bytes.Repeat([]byte("x"), 64<<20)
	wrote := make(chan error, 1)
	mux := http.NewServeMux()
	mux.HandleFunc("GET /big", func(w http.ResponseWriter, r *http.Request) {
		w.Header().Set("Content-Type", "text/plain")
		_, err := w.Write(big)
		wrote <- err
	})
	mux.HandleFunc("GET /late", func(w http.ResponseWriter, r *http.Request) {
		time.Sleep(3 * timeout) // a slow handler: the answer's deadline has not started
		_, _ = io.WriteString(w, "late but whole")
	})
	b := serve(t, mux, &httpapi.ServerConfig{WriteTimeout: timeout}, prometheus.NewRegistry(), nil)

	d := net.Dialer{Control: func(_, _ string, c syscall.RawConn) error {
		var serr error
		err := c.Control(func(fd uintptr) { serr = syscall.SetsockoptInt(int(fd), syscall.SOL_SOCKET, syscall.SO_RCVBUF, 4096) })
		return errors.Join(err, serr)
	}}
	c, err := d.Dial("tcp", b.addr)
	require.NoError(t, err)
	defer c.Close()
	_, err = io.WriteString(c, "GET /big HTTP/1.1\r\nHost: localhost\r\n\r\n")
	require.NoError(t, err)
	// Read at 64 bytes every 50 ms, until the server gives up.
	slow := make(chan error, 1)
	go func() {
		buf := make([]byte, 64)
		for {
			if _, err := c.Read(buf); err != nil {
				slow <- err
				return
			}
			time.Sleep(50 * time.Millisecond)
		}
	}()
	select {
	case err := <-wrote:
		require.ErrorIs(t, err, os.ErrDeadlineExceeded, "the write was cut by its deadline")
	case <-time.After(30 * time.Second):
		t.Fatal("the slow reader held the handler")
	}
	_ = c.SetReadDeadline(time.Now().Add(time.Millisecond)) // stop the reader
	<-slow

	late := b.request(t, "GET /late HTTP/1.1\r\nHost: localhost\r\n\r\n", 30*time.Second)
	require.Equal(t, http.StatusOK, late.status)
	require.Equal(t, "late but whole", string(late.body))
}

// TestContentLengthAndTransferEncoding: a request with both headers is
// answered 400 and its connection closed (RFC 9112 section 6.1)
// , wherever it comes on a connection; nothing is written.
func TestContentLengthAndTransferEncoding(t *testing.T) {
	t.Parallel()
	ev := eventJSON("smuggled")
	chunked := fmt.Sprintf("%x\r\n%s\r\n0\r\n\r\n", len(ev), ev)
	smuggle := fmt.Sprintf("POST /v1/events HTTP/1.1\r\nHost: localhost\r\nContent-Type: application/json\r\n"+
		"Content-Length: %d\r\nTransfer-Encoding: chunked\r\n\r\n%s", len(chunked), chunked)
	get := "GET /healthz HTTP/1.1\r\nHost: localhost\r\n\r\n"
	for _, tc := range []struct {
		name   string
		before []string // requests answered first on the connection
		after  string   // a request sent with the smuggled one
	}{
		{"First", nil, ""},
		{"AfterOthers", []string{get, "POST /v1/events HTTP/1.1\r\nHost: localhost\r\nContent-Type: application/json\r\nContent-Length: 3\r\n\r\n{x}"}, ""},
		{"PipelinedWithAnother", nil, get},
		{"TransferEncodingFirst", nil, ""},
	} {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			b := setupServer(t, nil)
			c := b.dial(t)
			for _, req := range tc.before {
				_, err := io.WriteString(c, req)
				require.NoError(t, err)
				r := c.answer(t, 10*time.Second)
				require.False(t, r.close, "an ordinary request keeps the connection")
			}
			req := smuggle
			if tc.name == "TransferEncodingFirst" {
				req = strings.Replace(strings.Replace(smuggle, "Content-Length", "X-CL", 1), "Transfer-Encoding: chunked\r\n",
					"Transfer-Encoding: chunked\r\n"+fmt.Sprintf("Content-Length: %d\r\n", len(chunked)), 1)
				req = strings.Replace(req, fmt.Sprintf("X-CL: %d\r\n", len(chunked)), "", 1)
			}
			_, err := io.WriteString(c, req+tc.after)
			require.NoError(t, err)
			r := c.answer(t, 10*time.Second)
			p := r.problem(t, http.StatusBadRequest)
			require.Contains(t, p.Detail, "Transfer-Encoding")
			require.True(t, r.close, "Connection: close")
			c.requireClosed(t, 5*time.Second)
			testkit.RequireStored(t, b.st, 0)
			require.Equal(t, 1.0, testkit.Metric(t, b.reg, "outboxd_http_connections_shed_total", "reason", "framing_refused"))
		})
	}

	t.Run("ChunkedAloneIsServed", func(t *testing.T) {
		t.Parallel()
		b := setupServer(t, nil)
		c := b.dial(t)
		_, err := fmt.Fprintf(c, "POST /v1/events HTTP/1.1\r\nHost: localhost\r\nContent-Type: application/json\r\nTransfer-Encoding: chunked\r\n\r\n%s", chunked)
		require.NoError(t, err)
		r := c.answer(t, 10*time.Second)
		require.Equal(t, http.StatusCreated, r.status, string(r.body))
		require.False(t, r.close)
		_, err = io.WriteString(c, get)
		require.NoError(t, err)
		require.Equal(t, http.StatusOK, c.answer(t, 10*time.Second).status)
		testkit.RequireStored(t, b.st, 1)
	})
}

// TestServerTLS: --tls-cert/--tls-key's server speaks
// TLS 1.2 and later only, and logs a failed handshake at warn, as it does
// the server's own errors (item 4).
func TestServerTLS(t *testing.T) {
	t.Parallel()
	certs := testkit.NewCerts(t)
	core, logs := observer.New(zapcore.WarnLevel)
	mux := http.NewServeMux()
	mux.HandleFunc("GET /healthz", func(w http.ResponseWriter, r *http.Request) { _, _ = io.WriteString(w, "ok") })
	mux.HandleFunc("GET /panic", func(http.ResponseWriter, *http.Request) { panic("a handler's bug") })
	b := serve(t, mux, &httpapi.ServerConfig{TLS: &tls.Config{Certificates: []tls.Certificate{certs.Cert}}},
		prometheus.NewRegistry(), zap.New(core))

	client := func(cfg *tls.Config) *http.Client {
		tr := &http.Transport{TLSClientConfig: cfg}
		t.Cleanup(tr.CloseIdleConnections)
		return &http.Client{Timeout: 10 * time.Second, Transport: tr}
	}
	res, err := client(&tls.Config{RootCAs: certs.Pool}).Get("https://" + b.addr + "/healthz")
	require.NoError(t, err)
	res.Body.Close()
	require.Equal(t, http.StatusOK, res.StatusCode)
	require.Equal(t, "HTTP/1.1", res.Proto)
	require.Equal(t, uint16(tls.VersionTLS13), res.TLS.Version)

	_, err = client(&tls.Config{RootCAs: certs.Pool, MaxVersion: tls.VersionTLS11}).Get("https://" + b.addr + "/healthz")
	require.Error(t, err, "TLS 1.1 is refused")
	res, err = client(&tls.Config{RootCAs: certs.Pool, MinVersion: tls.VersionTLS12, MaxVersion: tls.VersionTLS12}).Get("https://" + b.addr + "/healthz")
	require.NoError(t, err, "TLS 1.2 is served")
	res.Body.Close()

	plain := b.dial(t)
	_, err = io.WriteString(plain, "GET /healthz HTTP/1.1\r\nHost: localhost\r\n\r\n")
	require.NoError(t, err)
	_ = plain.SetReadDeadline(time.Now().Add(10 * time.Second))
	_, err = http.ReadResponse(bufio.NewReader(plain), nil)
	require.Error(t, err, "plain HTTP gets no answer")

	_, err = client(&tls.Config{RootCAs: certs.Pool}).Get("https://" + b.addr + "/panic")
	require.Error(t, err)
	require.Eventually(t, func() bool {
		return logs.FilterMessage("TLS handshake failed").FilterLevelExact(zapcore.WarnLevel).Len() >= 2 &&
			logs.FilterMessageSnippet("a handler's bug").FilterLevelExact(zapcore.WarnLevel).Len() == 1
	}, 10*time.Second, 5*time.Millisecond, "logged: %v", logs.All())
	require.GreaterOrEqual(t, testkit.Metric(t, b.reg, "outboxd_http_connections_shed_total", "reason", "tls_handshake"), 2.0)
}

// TestTooLargeReadByAClientThatWritesFirst: a client that writes its whole
// body before reading anything (as Python's urllib does) receives the 413
// problem for a body over MaxBody, not a reset: the server reads and
// discards a bounded excess before it closes (a lingering close).
func TestTooLargeReadByAClientThatWritesFirst(t *testing.T) {
	t.Parallel()
	// A small limit, so that the server stops reading before the kernel's
	// buffers have grown to hold the rest, and a small send buffer: the
	// client blocks in its write, as over a real network.
	b := setupHandler(t, &httpapi.Config{MaxBody: 64 << 10})
	for _, chunked := range []bool{false, true} {
		conn, err := net.Dial("tcp", strings.TrimPrefix(b.server.URL, "http://"))
		require.NoError(t, err)
		require.NoError(t, conn.(*net.TCPConn).SetWriteBuffer(16<<10))
		t.Cleanup(func() { _ = conn.Close() })
		require.NoError(t, conn.SetDeadline(time.Now().Add(30*time.Second)))
		body := `{"sourceKey":"s","deviceKey":"d","occurredAt":"2026-11-01T10:00:00Z","payload":{"x":"` + strings.Repeat("a", 3<<20) + `"}}`
		head := "POST /v1/events HTTP/1.1\r\nHost: localhost\r\nContent-Type: application/json\r\n"
		if chunked {
			head += "Transfer-Encoding: chunked\r\n\r\n" + fmt.Sprintf("%x\r\n", len(body))
		} else {
			head += fmt.Sprintf("Content-Length: %d\r\n\r\n", len(body))
		}
		tail := ""
		if chunked {
			tail = "\r\n0\r\n\r\n"
		}
		_, err = io.WriteString(conn, head+body+tail)
		require.NoError(t, err, "the whole body is written (chunked %v)", chunked)
		res, err := http.ReadResponse(bufio.NewReader(conn), nil)
		require.NoError(t, err, "the answer is read, not reset (chunked %v)", chunked)
		require.Equal(t, http.StatusRequestEntityTooLarge, res.StatusCode)
		data, err := io.ReadAll(res.Body)
		require.NoError(t, err)
		require.Contains(t, string(data), "larger than")
	}
}
