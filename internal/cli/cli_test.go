package cli_test

import (
	"bytes"
	"context"
	"path/filepath"
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/outboxd/outboxd/internal/cli"
	"github.com/outboxd/outboxd/internal/mongodb"
)

func run(t *testing.T, env map[string]string, args ...string) (int, string) {
	t.Helper()
	for k, v := range env {
		t.Setenv(k, v)
	}
	var out, errOut bytes.Buffer
	code := cli.Main(context.Background(), args, &out, &errOut)
	return code, out.String() + errOut.String()
}

func TestUsageErrors(t *testing.T) {
	for _, tc := range []struct {
		name  string
		env   map[string]string
		args  []string
		wants []string
	}{
		{"NoRole", nil, nil, []string{"usage: outboxd"}},
		{"UnknownRole", nil, []string{"fly"}, []string{`unknown role "fly"`}},
		{"UnknownFlag", nil, []string{"ingest", "--nope"}, []string{"nope"}},
		{"BadDuration", nil, []string{"reconcile", "--min-age", "soon"}, []string{"min-age"}},
		{"BadEnv", map[string]string{"OUTBOXD_LIMIT": "many"}, []string{"reconcile", "--mongo-uri", "mongodb://h"}, []string{"--limit", "OUTBOXD_LIMIT"}},
		{"NegativeLimit", nil, []string{"reconcile", "--mongo-uri", "mongodb://h", "--limit", "-1"}, []string{"--limit must be positive"}},
		{"BadMongoURI", nil, []string{"ingest", "--mongo-uri", "http://x"}, []string{"--mongo-uri"}},
		{"EmbeddedRefusedOutsideDev", nil, []string{"ingest", "--mongo-uri", "embedded:memory"}, []string{"--mongo-uri", "only the dev role"}},
		{"BadRedisURL", nil, []string{"dispatch", "--mongo-uri", "mongodb://h", "--redis-url", "tcp://x"}, []string{"--redis-url"}},
		{"RedactsPassword", nil, []string{"work", "--mongo-uri", "mongodb://h", "--postgres-url", "mysql://u:hunter2@h/db"}, []string{"--postgres-url", "xxxxx"}},
		{"BadHTTPAddr", nil, []string{"ingest", "--mongo-uri", "mongodb://h", "--http-addr", "8080"}, []string{"--http-addr"}},
		{"BadLogLevel", nil, []string{"ingest", "--mongo-uri", "mongodb://h", "--log-level", "loud"}, []string{"--log-level"}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			code, out := run(t, tc.env, tc.args...)
			require.Equal(t, cli.ExitUsage, code, out)
			for _, w := range tc.wants {
				require.Contains(t, out, w)
			}
			require.NotContains(t, out, "hunter2")
		})
	}
}

func TestHelp(t *testing.T) {
	code, out := run(t, nil, "dev", "-h")
	require.Equal(t, cli.ExitOK, code)
	require.Contains(t, out, "OUTBOXD_MONGO_URI")
}

func TestDevRefusesLockedStore(t *testing.T) {
	path := filepath.Join(t.TempDir(), "outboxd.db")
	conn, err := mongodb.Open(context.Background(), "embedded:"+path, nil)
	require.NoError(t, err)
	defer conn.Close(context.Background())
	code, out := run(t, nil, "dev", "--mongo-uri", "embedded:"+path)
	require.Equal(t, cli.ExitUsage, code, out)
	require.Contains(t, out, "in use")
}
