package runner

import (
	"os"
	"path/filepath"
	"testing"

	"github.com/stretchr/testify/require"
)

// TestFlagBounds: every flag with a bound is refused outside it with exit
// code 2 and an error that names the flag, says the bound (the component
// config's Validate's, in the flags' words) and the value as given, before
// anything is opened: the store's file is not created.
func TestFlagBounds(t *testing.T) {
	t.Parallel()
	for _, tc := range []struct {
		role  string
		extra []string
		flag  string
		value string
		want  string
	}{
		{"ingest", nil, "http-body-timeout", "0s", "must be at least 1ms (got 0s)"},
		{"ingest", nil, "http-idle-timeout", "500us", "must be at least 1ms (got 500µs)"},
		{"ingest", nil, "http-write-timeout", "0s", "must be at least 1ms (got 0s)"},
		{"ingest", nil, "http-max-bodies", "0", "must be positive (got 0)"},
		{"ingest", nil, "http-max-client-bodies", "65", "must be between 1 and --http-max-bodies (64) (got 65)"},
		{"ingest", nil, "http-max-client-bodies", "-1", "must be between 1 and --http-max-bodies (64) (got -1)"},
		{"ingest", nil, "http-max-conns", "0", "must be positive (got 0)"},
		{"ingest", nil, "http-max-decodes", "0", "must be positive (got 0)"},
		{"ingest", nil, "max-values", "-3", "must be positive (got -3)"},
		{"ingest", nil, "max-body", "1572865", "must be between 1 and 1572864"},
		{"ingest", nil, "max-batch", "0", "must be positive (got 0)"},
		{"ingest", nil, "request-timeout", "0s", "must be at least 1ms (got 0s)"},
		{"ingest", nil, "ingest-group-wait", "2s", "must be between 0 and 1s (0: no grouping) (got 2s)"},
		{"ingest", nil, "ingest-group-wait", "-1ms", "must be between 0 and 1s"},
		{"ingest", nil, "ingest-group-max", "0", "must be positive (got 0)"},
		{"ingest", nil, "ingest-group-max-bytes", "100", "must be between 4096 and 16777216"},
		{"ingest", nil, "ui-sample-every", "1ms", "must be at least 100ms (got 1ms)"},
		{"ingest", nil, "mongo-max-pool", "0", "must be between 1 and 65536 (got 0)"},
		{"ingest", nil, "mongo-max-pool", "-3", "must be between 1 and 65536 (got -3)"},
		{"dispatch", nil, "outbox-retention", "10ms", "must be at least 1s (got 10ms)"},
		{"migrate", nil, "event-retention", "10m", "must be 0 (keep originals forever) or at least 1h0m0s (got 10m0s)"},
		{"migrate", []string{"--event-retention-type", "audit=2h"}, "event-retention", "10m", "must be 0 (keep originals forever) or at least 1h0m0s (got 10m0s)"},
		{"dispatch", []string{"--event-retention-type", "audit=0"}, "event-retention", "10m", "must be 0 (keep originals forever) or at least 1h0m0s (got 10m0s)"},
		{"migrate", nil, "event-retention-type", "audit=5m", "needs the retention of type \"audit\" to be 0 (keep them forever) or at least 1h0m0s (got audit=5m0s)"},
		{"dispatch", nil, "event-retention", "-24h", "must be 0 (keep originals forever) or at least 1h0m0s"},
		{"dispatch", nil, "lease-ttl", "1ms", "must be at least 30ms (got 1ms)"},
		{"dispatch", nil, "stream-retention", "0s", "must be at least 1ms (got 0s)"},
		{"dispatch", nil, "redis-memory-high", "101", "must be between 1 and 100 (percent of maxmemory) (got 101)"},
		{"dispatch", nil, "relay-batch", "10001", "must be between 1 and 10000 (got 10001)"},
		{"dispatch", nil, "relay-gather", "2s", "must be at most 1s (0: none) (got 2s)"},
		{"dispatch", nil, "relay-gather", "-5ms", "must be at most 1s (0: none) (got -5ms)"},
		{"dispatch", nil, "breaker-failures", "0", "must be at least 1 (got 0)"},
		{"dispatch", nil, "breaker-timeout", "0s", "must be at least 1ms (got 0s)"},
		{"dispatch", nil, "error-streak-limit", "0", "must be at least 1 (got 0)"},
		{"work", nil, "partitions", "0", "must be between 1 and 1024 (got 0)"},
		{"work", nil, "batch-size", "0", "must be between 1 and 10000 (got 0)"},
		{"work", nil, "projection-target", "1ms", "must be between 10ms and 1m0s (got 1ms)"},
		{"work", nil, "lock-timeout", "-1s", "must be 0 (the server's setting) or at least 1ms (got -1s)"},
		{"work", nil, "statement-timeout", "10us", "must be 0 (the server's setting) or at least 1ms (got 10µs)"},
		{"work", nil, "projection-rate", "-1", "must be 0 (no bound) or positive (got -1)"},
		{"work", nil, "replay-rate", "-5", "must be 0 (no bound) or positive (got -5)"},
		{"work", nil, "concurrency", "65", "must be between 1 and 64 (got 65)"},
		{"work", nil, "max-deliveries", "0", "must be at least 1 (got 0)"},
		{"work", nil, "claim-idle", "500us", "must be at least 1ms (got 500µs)"},
		{"work", nil, "retry-backoff", "0s", "must be at least 1ms (got 0s)"},
		{"work", nil, "consumer-expiry", "0s", "must be at least 1ms (got 0s)"},
		{"work", nil, "message-payload-max", "0", "must be at least 1 (got 0)"},
		{"work", nil, "lease-ttl", "1ms", "must be at least 30ms (got 1ms)"},
		{"work", nil, "breaker-failures", "-1", "must be at least 1 (got -1)"},
		{"reconcile", nil, "min-age", "-1s", "must be more than 0 (got -1s)"},
		{"reconcile", nil, "min-age", "0", "must be more than 0 (got 0s)"},
		{"reconcile", nil, "requeue-after", "0s", "must be at least 1ms (got 0s)"},
		{"reconcile", nil, "limit", "0", "must be at least 1 (got 0)"},
		{"reconcile", nil, "max-requeues", "0", "must be at least 1 (got 0)"},
		{"reconcile", nil, "every", "-1s", "must be at least 1ms (got -1s)"},
		{"reconcile", nil, "expected-every", "500ms", "must be at least 1s (got 500ms)"},
		{"reconcile", []string{"--every", "1m"}, "audit-every", "10ms", "must be at least 1s (got 10ms)"},
		{"reconcile", []string{"--every", "1m"}, "audit-every", "-1m", "must be at least 1s (got -1m0s)"},
		{"reconcile", []string{"--every", "1m"}, "audit-sample", "0", "must be from 1 to 100000 (got 0)"},
	} {
		t.Run(tc.flag+"="+tc.value, func(t *testing.T) {
			t.Parallel()
			db := filepath.Join(t.TempDir(), "outboxd.db")
			args := append([]string{tc.role, "--store", "sqlite:" + db, "--" + tc.flag, tc.value}, tc.extra...)
			code, out := runCLI(t, nil, args...)
			require.Equal(t, ExitUsage, code, out)
			require.Contains(t, out, "--"+tc.flag+" "+tc.want)
			_, err := os.Stat(db)
			require.ErrorIs(t, err, os.ErrNotExist, "nothing is written")
		})
	}
	for _, tc := range []struct {
		args []string
		want string
	}{
		{[]string{"replay", "--from", "2026-11-01T00:00:00Z", "--to", "2026-11-02T00:00:00Z", "--chunk", "0"}, "--chunk must be from 1 to 5000 (got 0)"},
		{[]string{"verify", "--chunk", "5001"}, "--chunk must be from 1 to 5000 (got 5001)"},
		{[]string{"dlq", "list", "--limit", "0"}, "--limit must be from 1 to 5000 (got 0)"},
	} {
		code, out := runCLI(t, nil, tc.args...)
		require.Equal(t, ExitUsage, code, out)
		require.Contains(t, out, tc.want)
	}
}
