package runner

import (
	"context"
	"crypto/tls"
	"fmt"
	"io"
	"net/http"
	"strings"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/outboxd/outboxd/internal/testkit"
)

// TestRedisOverTLS: the pipeline reaches Redis over TLS:
// `outboxd dev` with a rediss:// --redis-url to a redis-server of the
// test's own that speaks TLS only, trusting the test's authority with
// --redis-ca-file, relays and projects every event; the checker is clean.
// Without --redis-ca-file the server's certificate is not trusted: a
// worker fails at start, saying so.
func TestRedisOverTLS(t *testing.T) {
	t.Parallel()
	srv := testkit.NewTLSRedisServer(t)
	b := startDev(t, "", "--min-age", "1h", "--redis-url", srv.URL(), "--redis-ca-file", srv.TLS.CAFile)
	var keys []string
	for i := range 50 {
		key := fmt.Sprintf("tls-%d", i)
		code, body := b.post(t, "/v1/events", key, event(i))
		require.Equal(t, http.StatusCreated, code, string(body))
		keys = append(keys, key)
	}
	require.Eventually(t, func() bool {
		s, err := b.status()
		return err == nil && converged(s, 50)
	}, time.Minute, 50*time.Millisecond, "the pipeline did not converge over TLS")
	v, err := testkit.Check(context.Background(), b.openStore(t), b.pg.Pool, srv.Client(), b.stream, b.group, keys)
	require.NoError(t, err)
	require.True(t, v.OK(), v.String())

	t.Run("UntrustedCertificate", func(t *testing.T) {
		ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
		defer cancel()
		var out strings.Builder
		code := run(ctx, []string{"work", "--store", b.store, "--postgres-url", b.pg.URL, "--redis-url", srv.URL(),
			"--stream", b.stream, "--group", b.group + "-untrusted", "--http-addr", ""}, io.Discard, &out)
		require.NotEqual(t, ExitOK, code)
		require.Contains(t, out.String(), "certificate")
	})
}

// TestHTTPS: dev serves its API over TLS with --tls-cert and --tls-key,
// TLS 1.2 at least.
func TestHTTPS(t *testing.T) {
	t.Parallel()
	certs := testkit.NewCerts(t)
	tr := &http.Transport{TLSClientConfig: &tls.Config{RootCAs: certs.Pool}}
	t.Cleanup(tr.CloseIdleConnections)
	client := &http.Client{Transport: tr, Timeout: 10 * time.Second}
	b := startDevOver(t, "https", client, "", "--tls-cert", certs.CertFile, "--tls-key", certs.KeyFile, "--operator-token", "op-tls")
	req, err := http.NewRequest(http.MethodGet, b.base+"/v1/whoami", nil)
	require.NoError(t, err)
	req.Header.Set("Authorization", "Bearer op-tls")
	res, err := client.Do(req)
	require.NoError(t, err)
	defer res.Body.Close()
	require.Equal(t, http.StatusOK, res.StatusCode)
	require.NotNil(t, res.TLS)
	require.GreaterOrEqual(t, res.TLS.Version, uint16(tls.VersionTLS12))
	old := &http.Client{Timeout: 10 * time.Second, Transport: &http.Transport{TLSClientConfig: &tls.Config{RootCAs: certs.Pool, MaxVersion: tls.VersionTLS11}}}
	_, err = old.Get(b.base + "/healthz")
	require.Error(t, err, "TLS 1.1 is refused")
	cbc := &http.Client{Timeout: 10 * time.Second, Transport: &http.Transport{TLSClientConfig: &tls.Config{RootCAs: certs.Pool, MaxVersion: tls.VersionTLS12,
		CipherSuites: []uint16{tls.TLS_ECDHE_RSA_WITH_AES_128_CBC_SHA, tls.TLS_ECDHE_ECDSA_WITH_AES_128_CBC_SHA,
			tls.TLS_ECDHE_RSA_WITH_AES_256_CBC_SHA, tls.TLS_ECDHE_ECDSA_WITH_AES_256_CBC_SHA}}}}
	_, err = cbc.Get(b.base + "/healthz")
	require.Error(t, err, "TLS 1.2's CBC-SHA suites are refused")
	_, err = http.Get(strings.Replace(b.base, "https:", "http:", 1) + "/healthz")
	require.Error(t, err, "plain HTTP is not served")
}
