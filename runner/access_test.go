package runner

import (
	"io"
	"net/http"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/outboxd/outboxd/internal/config"
	"github.com/outboxd/outboxd/internal/testkit"
)

// writeFile writes content to a new file of the test and returns its path.
func writeFile(t *testing.T, name, content string) string {
	t.Helper()
	path := filepath.Join(t.TempDir(), name)
	require.NoError(t, os.WriteFile(path, []byte(content), 0o600))
	return path
}

// TestAccessFlags: the tokens and the TLS flags are checked before
// anything starts: each error names the flag,
// exits 2, and shows no secret.
func TestAccessFlags(t *testing.T) {
	certs := testkit.NewCerts(t)
	empty := writeFile(t, "empty", "")
	newline := writeFile(t, "newline", "\n")
	spaced := writeFile(t, "spaced", "hunter2 x\n")
	store := []string{"--store", "mongodb://h"}
	for _, tc := range []struct {
		name  string
		env   map[string]string
		args  []string
		wants []string
	}{
		{"SameTokenTwoScopes", nil, []string{"dev", "--viewer-token", "hunter2", "--operator-token", "hunter2"},
			[]string{"--operator-token is the same token as --viewer-token"}},
		{"SameTokenIngestAndAuth", nil, []string{"ingest", "--ingest-token", "hunter2", "--auth-token", "hunter2"},
			[]string{"--auth-token is the same token as --ingest-token"}},
		{"SameTokenFromAFile", nil, []string{"work", "--viewer-token-file", writeFile(t, "v", "hunter2\n"), "--ingest-token", "hunter2"},
			[]string{"--viewer-token-file is the same token as --ingest-token"}},
		{"AuthAndOperator", nil, []string{"dev", "--auth-token", "hunter2", "--operator-token", "hunter3"},
			[]string{"--auth-token is the operator token", "not both"}},
		{"TokenWithSpace", nil, []string{"ingest", "--viewer-token", "hunter2 x"}, []string{"--viewer-token must not contain spaces"}},
		{"TokenWithSpaceFromEnv", map[string]string{"OUTBOXD_INGEST_TOKEN": "hunter2\tx"}, []string{"ingest"}, []string{"--ingest-token must not contain spaces"}},
		{"EmptyTokenFile", nil, []string{"ingest", "--ingest-token-file", empty}, []string{"--ingest-token-file", "is empty"}},
		{"NewlineTokenFile", nil, []string{"dispatch", "--operator-token-file", newline}, []string{"--operator-token-file", "is empty"}},
		{"TokenFileWithSpaces", nil, []string{"reconcile", "--every", "1m", "--operator-token-file", spaced}, []string{"--operator-token-file must not contain spaces"}},
		{"MissingTokenFile", nil, []string{"work", "--viewer-token-file", "/nonexistent/token"}, []string{"--viewer-token-file cannot be read"}},
		{"FileAndFlag", nil, []string{"dev", "--viewer-token", "hunter2", "--viewer-token-file", spaced}, []string{"--viewer-token-file cannot be combined with --viewer-token"}},
		{"ClientTokenFileEmpty", nil, []string{"status", "--auth-token-file", empty}, []string{"--auth-token-file", "is empty"}},
		{"ClientTokenWithSpace", nil, []string{"dlq", "list", "--auth-token", "hunter2 x"}, []string{"--auth-token must not contain spaces"}},
		{"TLSCertWithoutKey", nil, []string{"ingest", "--tls-cert", certs.CertFile}, []string{"--tls-key is required with --tls-cert"}},
		{"TLSKeyWithoutCert", nil, []string{"work", "--tls-key", certs.KeyFile}, []string{"--tls-cert is required with --tls-key"}},
		{"TLSPairMismatch", nil, []string{"dev", "--tls-cert", certs.CertFile, "--tls-key", certs.CAFile}, []string{"--tls-cert and --tls-key cannot be loaded"}},
		{"RedisCAWithoutTLS", nil, []string{"work", "--redis-ca-file", certs.CAFile}, []string{"--redis-ca-file is for a rediss://"}},
		{"RedisCANotPEM", nil, []string{"dispatch", "--redis-url", "rediss://:hunter2@r:6380/0", "--redis-ca-file", spaced}, []string{"--redis-ca-file", "holds no PEM certificate"}},
		{"ServerWithUserinfo", nil, []string{"status", "--server", "ftp://admin:hunter2@h"}, []string{"--server", "xxxxx"}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			args := tc.args
			if !strings.HasPrefix(args[0], "status") && args[0] != "dlq" {
				args = append(append([]string{}, args...), store...)
			}
			code, out := runCLI(t, tc.env, args...)
			require.Equal(t, ExitUsage, code, out)
			for _, w := range tc.wants {
				require.Contains(t, out, w)
			}
			require.NotContains(t, out, "hunter2")
		})
	}
}

// TestNoOpenDefault: a serving role whose --http-addr is not loopback
// refuses to start without a token, naming the flags to set, unless
// --allow-no-auth; one sweep of reconcile listens on
// nothing and is not held to it.
func TestNoOpenDefault(t *testing.T) {
	for _, tc := range []struct {
		role []string
		addr string
	}{
		{[]string{"dev"}, "0.0.0.0:0"},
		{[]string{"ingest"}, ":0"},
		{[]string{"dispatch"}, "[::]:0"},
		{[]string{"work"}, "10.1.2.3:8080"},
		{[]string{"reconcile", "--every", "1m"}, "outboxd.example:8080"},
	} {
		t.Run(tc.role[0], func(t *testing.T) {
			args := append(append([]string{}, tc.role...), "--store", "mongodb://h", "--http-addr", tc.addr)
			code, out := runCLI(t, nil, args...)
			require.Equal(t, ExitUsage, code, out)
			for _, w := range []string{"--http-addr", "not a loopback address", "--operator-token", "--allow-no-auth"} {
				require.Contains(t, out, w)
			}
		})
	}
	valid := func(env map[string]string, args ...string) error {
		t.Helper()
		r, rest, ok := lookupRole(args)
		require.True(t, ok)
		fs, o := newFlagSet(r)
		require.NoError(t, config.Parse(fs, rest, func(k string) (string, bool) { v, ok := env[k]; return v, ok }))
		return o.validate()
	}
	require.NoError(t, valid(nil, "work", "--store", "mongodb://h", "--http-addr", "0.0.0.0:8080", "--allow-no-auth"))
	require.NoError(t, valid(map[string]string{"OUTBOXD_VIEWER_TOKEN": "v"}, "work", "--store", "mongodb://h", "--http-addr", ":8080"))
	require.NoError(t, valid(nil, "work", "--store", "mongodb://h", "--http-addr", "localhost:8080"))
	require.NoError(t, valid(nil, "work", "--store", "mongodb://h", "--http-addr", "[::1]:8080"))
	require.NoError(t, valid(nil, "reconcile", "--store", "mongodb://h", "--http-addr", "0.0.0.0:8080"), "one sweep serves nothing")
}

// TestTokensFromFiles: `outboxd dev` with a token of each scope, two of
// them read from files (as a Kubernetes secret mounts them, with a final
// newline): each opens its routes only.
func TestTokensFromFiles(t *testing.T) {
	t.Parallel()
	b := startDev(t, "", "--operator-token-file", writeFile(t, "operator", "op-7c1e\n"),
		"--viewer-token-file", writeFile(t, "viewer", "view-3a9d"), "--ingest-token", "in-5b2f")
	call := func(token, method, path, body string) int {
		return b.apiCall(t, token, method, path, body, nil)
	}
	ev := `{"sourceKey":"s","deviceKey":"d","occurredAt":"2026-11-01T00:00:00Z"}`
	require.Equal(t, http.StatusCreated, call("in-5b2f", http.MethodPost, "/v1/events", ev))
	require.Equal(t, http.StatusForbidden, call("view-3a9d", http.MethodPost, "/v1/events", ev))
	require.Equal(t, http.StatusForbidden, call("in-5b2f", http.MethodGet, "/v1/status", ""))
	require.Equal(t, http.StatusOK, call("view-3a9d", http.MethodGet, "/v1/status", ""))
	require.Equal(t, http.StatusForbidden, call("view-3a9d", http.MethodPost, "/v1/admin/dlq:drop", `{"all":true}`))
	require.Equal(t, http.StatusOK, call("op-7c1e", http.MethodPost, "/v1/admin/dlq:drop", `{"all":true}`))
	require.Equal(t, http.StatusUnauthorized, call("op-7c1", http.MethodGet, "/v1/status", ""))

	// The operator commands: the viewer token reads, the operator's acts.
	exit, out, errOut := cli("status", "--server", b.base, "--auth-token", "view-3a9d")
	require.Equal(t, ExitOK, exit, errOut)
	require.Contains(t, out, "SERVER")
	exit, _, errOut = cli("dlq", "drop", "--all", "--yes", "--server", b.base, "--auth-token-file", writeFile(t, "cli", "view-3a9d\n"))
	require.Equal(t, ExitUsage, exit)
	require.Contains(t, errOut, "operator token")
	exit, _, errOut = cli("dlq", "drop", "--all", "--yes", "--server", b.base, "--auth-token", "op-7c1e")
	require.Equal(t, ExitOK, exit, errOut)
}

// TestHostsWithoutAToken: with no token, dev answers only a Host naming a
// loopback address (DNS rebinding); --allow-no-auth
// answers any.
func TestHostsWithoutAToken(t *testing.T) {
	t.Parallel()
	get := func(t *testing.T, base, path, host string) int {
		t.Helper()
		req, err := http.NewRequest(http.MethodGet, base+path, nil)
		require.NoError(t, err)
		req.Host = host
		res, err := http.DefaultClient.Do(req)
		require.NoError(t, err)
		_, _ = io.Copy(io.Discard, res.Body)
		res.Body.Close()
		return res.StatusCode
	}
	t.Run("LoopbackOnly", func(t *testing.T) {
		t.Parallel()
		b := startDev(t, "")
		require.Equal(t, http.StatusOK, get(t, b.base, "/v1/status", "localhost:8080"))
		require.Equal(t, http.StatusForbidden, get(t, b.base, "/v1/status", "rebind.evil.example:8080"))
		require.Equal(t, http.StatusForbidden, get(t, b.base, "/ui/", "rebind.evil.example"))
		require.Equal(t, http.StatusOK, get(t, b.base, "/readyz", "rebind.evil.example"), "the probes answer any Host")
	})
	t.Run("AllowNoAuth", func(t *testing.T) {
		t.Parallel()
		b := startDev(t, "", "--allow-no-auth")
		require.Equal(t, http.StatusOK, get(t, b.base, "/v1/status", "outboxd.internal:8080"))
	})
}
