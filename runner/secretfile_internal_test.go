package runner

import (
	"os"
	"path/filepath"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/stretchr/testify/require"
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
