package runner

import (
	"bufio"
	"context"
	"fmt"
	"io"
	"net"
	"net/http"
	"strings"
	"testing"
	"time"

	"github.com/stretchr/testify/require"
)

// TestHTTPFlagsAreValidated: the --http-* limits refuse what would disable
// them, naming the flag (exit 2).
func TestHTTPFlagsAreValidated(t *testing.T) {
	for _, tc := range []struct{ flag, value string }{
		{"http-body-timeout", "0s"},
		{"http-idle-timeout", "-1s"},
		{"http-max-bodies", "0"},
		{"http-max-conns", "0"},
		{"http-write-timeout", "0s"},
	} {
		t.Run(tc.flag, func(t *testing.T) {
			code, out := runCLI(t, nil, "ingest", "--store", "mongodb://h", "--"+tc.flag, tc.value)
			require.Equal(t, ExitUsage, code, out)
			require.Contains(t, out, "--"+tc.flag)
		})
	}
}

// withBearer sends a request without a body, with token as its bearer
// token ("": none), and returns the status code and the body.
func withBearer(t *testing.T, method, url, token string) (int, []byte) {
	t.Helper()
	req, err := http.NewRequest(method, url, nil)
	require.NoError(t, err)
	if token != "" {
		req.Header.Set("Authorization", "Bearer "+token)
	}
	resp, err := http.DefaultClient.Do(req)
	require.NoError(t, err)
	defer resp.Body.Close()
	body, err := io.ReadAll(resp.Body)
	require.NoError(t, err)
	return resp.StatusCode, body
}

// TestPprof: --pprof serves Go's profiles under /debug/pprof/ beside the
// API, to the operator token only, and never the command
// line, whose arguments may hold secrets; with no token set they are open
// (on loopback: the benchmark harness profiles its stages so); without the
// flag they are not found.
func TestPprof(t *testing.T) {
	t.Parallel()
	get := func(t *testing.T, url, token string) (int, string) {
		t.Helper()
		code, body := withBearer(t, http.MethodGet, url, token)
		return code, string(body)
	}
	status := func(t *testing.T, url, token string) int {
		t.Helper()
		code, _ := get(t, url, token)
		return code
	}
	t.Run("OperatorOnly", func(t *testing.T) {
		t.Parallel()
		b := startDev(t, "", "--pprof", "--auth-token", "op-secret", "--viewer-token", "view-secret", "--ingest-token", "in-secret")
		for _, path := range []string{"/debug/pprof/", "/debug/pprof/heap", "/debug/pprof/goroutine?debug=1"} {
			require.Equal(t, http.StatusUnauthorized, status(t, b.base+path, ""), path)
			require.Equal(t, http.StatusForbidden, status(t, b.base+path, "in-secret"), path)
			require.Equal(t, http.StatusForbidden, status(t, b.base+path, "view-secret"), path)
			require.Equal(t, http.StatusOK, status(t, b.base+path, "op-secret"), path)
		}
		code, body := get(t, b.base+"/debug/pprof/cmdline", "op-secret")
		require.Equal(t, http.StatusNotFound, code)
		require.NotContains(t, body, "op-secret")
		require.NotContains(t, body, "dev")
		require.Equal(t, http.StatusOK, status(t, b.base+"/healthz", ""), "the API is still served")
		require.Equal(t, http.StatusUnauthorized, status(t, b.base+"/v1/status", ""), "and still guarded")
	})
	t.Run("NoToken", func(t *testing.T) {
		t.Parallel()
		b := startDev(t, "", "--pprof")
		require.Equal(t, http.StatusOK, status(t, b.base+"/debug/pprof/", ""))
		require.Equal(t, http.StatusNotFound, status(t, b.base+"/debug/pprof/cmdline", ""))
	})
	t.Run("Off", func(t *testing.T) {
		t.Parallel()
		b := startDev(t, "")
		require.Equal(t, http.StatusNotFound, status(t, b.base+"/debug/pprof/", ""))
	})
}

// stalledPost opens a connection to addr that sends the head of POST
// /v1/events and part of the body, then nothing.
func stalledPost(t *testing.T, addr string) (net.Conn, *bufio.Reader) {
	t.Helper()
	c, err := net.Dial("tcp", addr)
	require.NoError(t, err)
	t.Cleanup(func() { _ = c.Close() })
	body := event(1)
	_, err = fmt.Fprintf(c, "POST /v1/events HTTP/1.1\r\nHost: localhost\r\nContent-Type: application/json\r\nContent-Length: %d\r\n\r\n%s",
		len(body), body[:len(body)/2])
	require.NoError(t, err)
	return c, bufio.NewReader(c)
}

// TestShutdownStalledClients: SIGTERM with clients that stalled their
// bodies and an idle keep-alive connection open. Before,
// dev waited the whole --shutdown-timeout and exited 1 ("HTTP shutdown:
// context deadline exceeded"); now the stalled clients are answered 503
// about a second after the signal, and dev exits 0 well within the timeout,
// having written nothing for them. The --http-* flags reach the server: the
// idle connection is closed after --http-idle-timeout.
func TestShutdownStalledClients(t *testing.T) {
	t.Parallel()
	const shutdownTimeout = 20 * time.Second
	b := startDev(t, "", "--http-body-timeout", "1m", "--http-idle-timeout", "500ms",
		"--shutdown-timeout", shutdownTimeout.String(), "--every", "1h")
	addr := strings.TrimPrefix(b.base, "http://")

	idle, err := net.Dial("tcp", addr)
	require.NoError(t, err)
	defer idle.Close()
	_, err = io.WriteString(idle, "GET /healthz HTTP/1.1\r\nHost: localhost\r\n\r\n")
	require.NoError(t, err)
	idleReader := bufio.NewReader(idle)
	res, err := http.ReadResponse(idleReader, nil)
	require.NoError(t, err)
	res.Body.Close()
	require.Equal(t, http.StatusOK, res.StatusCode)
	require.NoError(t, idle.SetReadDeadline(time.Now().Add(10*time.Second)))
	_, err = idleReader.ReadByte()
	require.ErrorIs(t, err, io.EOF, "the idle connection was not closed after --http-idle-timeout")

	type stalled struct {
		c net.Conn
		r *bufio.Reader
	}
	var clients []stalled
	for range 3 {
		c, r := stalledPost(t, addr)
		clients = append(clients, stalled{c, r})
	}
	require.Eventually(t, func() bool {
		resp, err := http.Get(b.base + "/metrics")
		if err != nil {
			return false
		}
		defer resp.Body.Close()
		metrics, _ := io.ReadAll(resp.Body)
		return strings.Contains(string(metrics), `outboxd_http_requests_in_flight{route="POST /v1/events"} 3`)
	}, 10*time.Second, 5*time.Millisecond, "the stalled requests never reached the handler")

	start := time.Now()
	b.cancel() // SIGTERM
	b.cancel = nil
	for _, s := range clients {
		require.NoError(t, s.c.SetReadDeadline(time.Now().Add(10*time.Second)))
		res, err := http.ReadResponse(s.r, nil)
		require.NoError(t, err, "a stalled client got no answer")
		res.Body.Close()
		require.Equal(t, http.StatusServiceUnavailable, res.StatusCode)
		require.NotEmpty(t, res.Header.Get("Retry-After"))
	}
	select {
	case code := <-b.done:
		require.Equal(t, ExitOK, code, b.stderr.String())
	case <-time.After(shutdownTimeout):
		t.Fatalf("dev did not exit within --shutdown-timeout: %s", b.stderr)
	}
	require.Less(t, time.Since(start), shutdownTimeout/2, "the shutdown waited for the stalled clients")
	c, err := b.openStore(t).Counts(context.Background())
	require.NoError(t, err)
	require.Zero(t, c.Total, "nothing is written for a stalled body")
}
