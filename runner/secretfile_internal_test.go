package runner

import (
	"os"
	"path/filepath"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/outboxd/outboxd/internal/config"
)

// TestReadSecretFile: a token file must be a regular file of at most
// MaxSecretFile bytes; a FIFO is refused without blocking the start, and
// /dev/zero without reading it.
func TestReadSecretFile(t *testing.T) {
	t.Parallel()
	dir := t.TempDir()
	good := filepath.Join(dir, "token")
	require.NoError(t, os.WriteFile(good, []byte("0123456789abcdef0123\n"), 0o600))
	big := filepath.Join(dir, "big")
	require.NoError(t, os.WriteFile(big, []byte(strings.Repeat("x", MaxSecretFile+1)), 0o600))
	fifo := filepath.Join(dir, "fifo")
	require.NoError(t, syscall.Mkfifo(fifo, 0o600))
	link := filepath.Join(dir, "link")
	require.NoError(t, os.Symlink(good, link)) // a mounted secret is a link to a file

	for _, path := range []string{good, link} {
		b, err := readSecretFile(path)
		require.NoError(t, err)
		require.Equal(t, "0123456789abcdef0123\n", string(b))
	}
	for path, want := range map[string]string{big: "more than", fifo: "not a regular file", "/dev/zero": "not a regular file", dir: "not a regular file"} {
		done := make(chan error, 1)
		go func() { _, err := readSecretFile(path); done <- err }()
		select {
		case err := <-done:
			require.ErrorContains(t, err, want, path)
		case <-time.After(5 * time.Second):
			t.Fatalf("reading %s blocked", path)
		}
	}
}

// TestAccessWarnings: short tokens, token and TLS key files others may
// read, and profiles open to anyone are warned about at start.
func TestAccessWarnings(t *testing.T) {
	t.Parallel()
	dir := t.TempDir()
	shared := filepath.Join(dir, "token")
	require.NoError(t, os.WriteFile(shared, []byte("0123456789abcdef0123"), 0o644))
	key := filepath.Join(dir, "key.pem")
	require.NoError(t, os.WriteFile(key, []byte("k"), 0o640))
	o := &options{pprof: true, allowNoAuth: true, tlsKey: key}
	o.ingestToken = tokenFlag{name: "ingest-token", value: "0123456789abcdef0123", file: shared, fromFile: true}
	o.viewerToken = tokenFlag{name: "viewer-token", value: "short"}
	got := strings.Join(o.accessWarnings(), "\n")
	require.Contains(t, got, "--ingest-token-file "+shared+" may be read")
	require.Contains(t, got, "--tls-key "+key+" may be read")
	require.Contains(t, got, "--viewer-token is shorter than 16 bytes")
	require.Contains(t, got, "--pprof with --allow-no-auth")

	require.NoError(t, os.Chmod(shared, 0o600))
	require.NoError(t, os.Chmod(key, 0o600))
	o = &options{}
	o.ingestToken = tokenFlag{name: "ingest-token", value: "0123456789abcdef0123", file: shared, fromFile: true}
	require.Empty(t, o.accessWarnings())
}

// TestSecretArgsWarned: a token, a named client's token or a URL with a
// password given as an argument is warned about, naming the flag and the
// file flag or variable to use instead; the same from OUTBOXD_* variables,
// or a URL without a password, is not.
func TestSecretArgsWarned(t *testing.T) {
	t.Parallel()
	warnings := func(env map[string]string, args ...string) string {
		t.Helper()
		r, rest, ok := lookupRole(args)
		require.True(t, ok)
		fs, o := newFlagSet(r)
		require.NoError(t, config.Parse(fs, rest, func(k string) (string, bool) { v, ok := env[k]; return v, ok }))
		o.args = argFlags(fs, rest)
		require.NoError(t, o.validate())
		return strings.Join(o.accessWarnings(), "\n")
	}
	got := warnings(nil, "dev", "--store", "sqlite:/tmp/x.db", "--operator-token", "0123456789abcdef0123", "--allow-no-auth",
		"--ingest-client", "acme=0123456789abcdef0124", "--postgres-url", "postgres://u:pw-9f8e@db/x",
		"--redis-url", "redis://localhost:6379/0")
	require.Contains(t, got, "--operator-token is given on the command line")
	require.Contains(t, got, "use --operator-token-file or OUTBOXD_OPERATOR_TOKEN")
	require.Contains(t, got, "--ingest-client is given on the command line")
	require.Contains(t, got, "--postgres-url holds a secret on the command line, which any process listing shows: use OUTBOXD_POSTGRES_URL")
	require.NotContains(t, got, "pw-9f8e")
	require.NotContains(t, got, "--redis-url", "no password in it")
	require.NotContains(t, got, "--store")

	got = warnings(map[string]string{"OUTBOXD_OPERATOR_TOKEN": "0123456789abcdef0123", "OUTBOXD_POSTGRES_URL": "postgres://u:pw@db/x"},
		"dev", "--store", "sqlite:/tmp/x.db", "--log-level", "warn", "--allow-no-auth")
	require.Empty(t, got, "secrets from the environment")
}
