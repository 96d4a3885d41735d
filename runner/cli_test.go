package runner

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/outboxd/outboxd/internal/config"
	"github.com/outboxd/outboxd/store"
)

func runCLI(t *testing.T, env map[string]string, args ...string) (int, string) {
	t.Helper()
	for k, v := range env {
		t.Setenv(k, v)
	}
	var out, errOut bytes.Buffer
	code := run(context.Background(), args, &out, &errOut)
	return code, out.String() + errOut.String()
}

func TestUsageErrors(t *testing.T) {
	notSQLite := filepath.Join(t.TempDir(), "old.db")
	// What lungo's file store left behind: BSON, not SQLite.
	require.NoError(t, os.WriteFile(notSQLite, []byte("\x16\x00\x00\x00\x02events\x00\x05\x00\x00\x00none\x00\x00"), 0o644))
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
		{"BadEnv", map[string]string{"OUTBOXD_LIMIT": "many"}, []string{"reconcile", "--store", "mongodb://h"}, []string{"--limit", "OUTBOXD_LIMIT"}},
		{"NegativeLimit", nil, []string{"reconcile", "--store", "mongodb://h", "--limit", "-1"}, []string{"--limit must be at least 1"}},
		{"AuditEveryTooShort", nil, []string{"reconcile", "--store", "mongodb://h", "--every", "1m", "--audit-every", "10ms"}, []string{"--audit-every must be at least 1s"}},
		{"AuditEveryNegative", nil, []string{"dev", "--audit-every", "-1m"}, []string{"--audit-every"}},
		{"AuditSampleZero", map[string]string{"OUTBOXD_AUDIT_SAMPLE": "0"}, []string{"reconcile", "--store", "mongodb://h", "--every", "1m"}, []string{"--audit-sample must be from 1 to 100000"}},
		{"BadStore", nil, []string{"ingest", "--store", "http://x"}, []string{"--store", "sqlite:PATH"}},
		{"EmptySQLitePath", nil, []string{"ingest", "--store", "sqlite:"}, []string{"--store", "needs a path"}},
		{"OldEmbeddedScheme", nil, []string{"dev", "--store", "embedded:data/outboxd.db"}, []string{"--store", "no longer offered", "sqlite:"}},
		{"LungoRefusedOutsideDev", nil, []string{"ingest", "--store", "lungo:memory"}, []string{"--store", "only dev"}},
		{"LungoFileRefused", nil, []string{"dev", "--store", "lungo:data/x"}, []string{"--store", "memory only"}},
		{"NotASQLiteFile", nil, []string{"ingest", "--store", "sqlite:" + notSQLite, "--http-addr", "127.0.0.1:0"}, []string{"--store", "not an SQLite database", "move it away"}},
		{"BadRedisURL", nil, []string{"dispatch", "--store", "mongodb://h", "--redis-url", "tcp://x"}, []string{"--redis-url"}},
		{"RedactsPassword", nil, []string{"work", "--store", "mongodb://h", "--postgres-url", "mysql://u:hunter2@h/db"}, []string{"--postgres-url", "xxxxx"}},
		{"BadHTTPAddr", nil, []string{"ingest", "--store", "mongodb://h", "--http-addr", "8080"}, []string{"--http-addr"}},
		{"NoHTTPAddrForTheAPI", nil, []string{"ingest", "--http-addr", ""}, []string{"--http-addr", "must not be empty"}},
		{"BadLogLevel", nil, []string{"ingest", "--store", "mongodb://h", "--log-level", "loud"}, []string{"--log-level"}},
		{"BadServer", nil, []string{"status", "--server", "localhost:8080"}, []string{"--server"}},
		{"RelayBatchTooLarge", nil, []string{"dispatch", "--store", "mongodb://h", "--relay-batch", "10001"}, []string{"--relay-batch", "between 1 and 10000"}},
		{"NegativeGroupWait", nil, []string{"ingest", "--store", "mongodb://h", "--ingest-group-wait", "-1ms"}, []string{"--ingest-group-wait", "between 0"}},
		{"LongGroupWait", nil, []string{"ingest", "--store", "mongodb://h", "--ingest-group-wait", "2s"}, []string{"--ingest-group-wait", "1s"}},
		{"ZeroGroupMax", nil, []string{"ingest", "--store", "mongodb://h", "--ingest-group-max", "0"}, []string{"--ingest-group-max must be positive"}},
		{"GroupMaxBytesTooLarge", nil, []string{"ingest", "--store", "mongodb://h", "--ingest-group-max-bytes", "16777217"}, []string{"--ingest-group-max-bytes", "between 4096 and 16777216"}},
		{"GroupMaxBytesTooSmall", map[string]string{"OUTBOXD_INGEST_GROUP_MAX_BYTES": "100"}, []string{"ingest", "--store", "mongodb://h"}, []string{"--ingest-group-max-bytes", "between 4096"}},
		{"MaxBodyOverTheBSONBound", nil, []string{"ingest", "--store", "mongodb://h", "--max-body", "1572865"}, []string{"--max-body", "between 1 and 1572864", "16 MiB"}},
		{"BadTableName", nil, []string{"ingest", "--store", "sqlite:x.db", "--events-collection", "outboxd-events"}, []string{"--events-collection", "not an SQL identifier"}},
		{"ReservedTableFromEnv", map[string]string{"OUTBOXD_OUTBOX_COLLECTION": "feed_floor"}, []string{"dispatch", "--store", "sqlite:x.db"}, []string{"--outbox-collection", "its own feed_floor table"}},
		{"OneTableForBoth", nil, []string{"work", "--store", "sqlite:x.db", "--events-collection", "X", "--outbox-collection", "x"}, []string{"--outbox-collection", "the same table"}},
		{"ReservedCollection", nil, []string{"work", "--store", "mongodb://h", "--outbox-collection", "leases"}, []string{"--outbox-collection", "keeps its own leases"}},
		{"BadCollectionName", nil, []string{"work", "--store", "mongodb://h", "--events-collection", "a$b"}, []string{"--events-collection", "not a collection name"}},
		{"OneCollectionForBoth", nil, []string{"work", "--store", "mongodb://h", "--events-collection", "x", "--outbox-collection", "x"}, []string{"--outbox-collection", "the same collection"}},
		{"ClaimIdleUnderTheWorkersBound", nil, []string{"work", "--store", "mongodb://h", "--claim-idle", "500us"}, []string{"--claim-idle must be at least 1ms"}},
		{"ZeroMongoPool", nil, []string{"work", "--store", "mongodb://h", "--mongo-max-pool", "0"}, []string{"--mongo-max-pool must be between 1 and 65536"}},
		{"UISampleTooOften", nil, []string{"work", "--store", "mongodb://h", "--ui-sample-every", "1ms"}, []string{"--ui-sample-every", "at least 100ms"}},
		{"NegativeEventRetention", nil, []string{"dispatch", "--store", "mongodb://h", "--event-retention", "-24h"}, []string{"--event-retention", "0 (keep originals forever) or at least 1h"}},
		{"ShortEventRetention", nil, []string{"migrate", "--store", "mongodb://h", "--event-retention", "10m"}, []string{"--event-retention", "at least 1h"}},
		{"EventRetentionFromEnv", map[string]string{"OUTBOXD_EVENT_RETENTION": "-1s"}, []string{"work", "--store", "mongodb://h"}, []string{"--event-retention"}},
		{"LeaseWithoutEvery", nil, []string{"reconcile", "--store", "mongodb://h", "--lease"}, []string{"--lease", "needs --every"}},
		{"ExpectedEveryTooShort", nil, []string{"reconcile", "--store", "mongodb://h", "--expected-every", "0s"}, []string{"--expected-every", "at least 1s"}},
		{"ExpectedEveryWithEvery", nil, []string{"reconcile", "--store", "mongodb://h", "--every", "1m", "--expected-every", "10m"}, []string{"--expected-every", "with --every"}},
		{"BatchSizeNeitherNumberNorAuto", nil, []string{"work", "--store", "mongodb://h", "--batch-size", "big"}, []string{"batch-size", "a number of entries or auto"}},
		{"BatchSizeTooLarge", map[string]string{"OUTBOXD_BATCH_SIZE": "10001"}, []string{"work", "--store", "mongodb://h"}, []string{"--batch-size", "between 1 and 10000"}},
		{"ProjectionTargetTooShort", nil, []string{"work", "--store", "mongodb://h", "--batch-size", "auto", "--projection-target", "1ms"}, []string{"--projection-target", "between 10ms and 1m0s"}},
		{"ProjectionTargetTooLong", map[string]string{"OUTBOXD_PROJECTION_TARGET": "2m"}, []string{"dev"}, []string{"--projection-target", "between"}},
		{"NegativeLockTimeout", nil, []string{"work", "--store", "mongodb://h", "--lock-timeout", "-1s"}, []string{"--lock-timeout", "0 (the server's setting) or at least 1ms"}},
		{"StatementTimeoutUnderAMillisecond", nil, []string{"work", "--store", "mongodb://h", "--statement-timeout", "10us"}, []string{"--statement-timeout", "at least 1ms"}},
		{"NegativeReplayRate", nil, []string{"work", "--store", "mongodb://h", "--replay-rate", "-5"}, []string{"--replay-rate", "0 (no bound)"}},
		{"ReplayRateFromEnv", map[string]string{"OUTBOXD_REPLAY_RATE": "-1"}, []string{"dev"}, []string{"--replay-rate"}},
		{"NegativeConcurrency", nil, []string{"work", "--store", "mongodb://h", "--concurrency", "-1"}, []string{"--concurrency", "between 1 and 64"}},
		{"ConcurrencyTooHigh", map[string]string{"OUTBOXD_CONCURRENCY": "65"}, []string{"work", "--store", "mongodb://h"}, []string{"--concurrency", "between 1 and 64"}},
		{"RetriesResumeWithoutClass", nil, []string{"retries", "resume"}, []string{"--class is required", "infrastructure, record, unknown"}},
		{"RetriesResumeUnknownClass", nil, []string{"retries", "resume", "--class", "poison"}, []string{"--class"}},
		{"ResumeWithDryRun", nil, []string{"replay", "--from", "2026-11-01T00:00:00Z", "--to", "2026-11-02T00:00:00Z", "--dry-run", "--resume", "x"}, []string{"--resume", "--dry-run"}},
		{"BadRedriveRule", nil, []string{"reconcile", "--store", "mongodb://h", "--every", "1m", "--redrive", "infrastructure=soon"}, []string{"redrive", "infrastructure=soon"}},
		{"RedriveUncapped", nil, []string{"dev", "--redrive", "poison=1m:0"}, []string{"redrive", "Max must be at least 1"}},
		{"RedriveOfAHeldCategory", map[string]string{"OUTBOXD_HOLD_CATEGORY": "poison"}, []string{"reconcile", "--store", "mongodb://h", "--every", "1m", "--redrive", "infrastructure=10m:3,poison=1h"}, []string{"--redrive", `category "poison" is held`}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			code, out := runCLI(t, tc.env, tc.args...)
			require.Equal(t, ExitUsage, code, out)
			for _, w := range tc.wants {
				require.Contains(t, out, w)
			}
			require.NotContains(t, out, "hunter2")
		})
	}
}

// TestRoleNeedsMigrate: a role other than dev and migrate refuses to start
// on a store whose schema is missing, saying what to run.
func TestRoleNeedsMigrate(t *testing.T) {
	t.Parallel()
	path := filepath.Join(t.TempDir(), "fresh.db")
	code, out := runCLI(t, nil, "ingest", "--store", "sqlite:"+path, "--http-addr", "127.0.0.1:0")
	require.Equal(t, ExitUsage, code, out)
	require.Contains(t, out, "outboxd migrate")
}

func TestHelp(t *testing.T) {
	code, out := runCLI(t, nil, "dev", "-h")
	require.Equal(t, ExitOK, code)
	require.Contains(t, out, "OUTBOXD_STORE")
	code, out = runCLI(t, nil, "help")
	require.Equal(t, ExitOK, code)
	for _, r := range roles {
		require.Contains(t, out, r.name)
	}
}

func TestExitCode(t *testing.T) {
	t.Parallel()
	for _, tc := range []struct {
		err  error
		code int
	}{
		{nil, ExitOK},
		{errReported, ExitFailure}, // reconcile: a document failed
		{fmt.Errorf("sweep failed: %w", errors.New("boom")), ExitFailure},
		{config.Invalid("limit", "must be positive"), ExitUsage},
		{fmt.Errorf("check: %w", store.ErrSchema), ExitUsage},
	} {
		require.Equal(t, tc.code, exitCode(tc.err), "%v", tc.err)
	}
}

// TestVersion: `outboxd version` prints the version that CHANGELOG.md's
// newest release names.
func TestVersion(t *testing.T) {
	t.Parallel()
	var out, errOut bytes.Buffer
	require.Equal(t, ExitOK, run(context.Background(), []string{"version"}, &out, &errOut), errOut.String())
	require.True(t, strings.HasPrefix(out.String(), "outboxd "+Version+" go"), out.String())
	changelog, err := os.ReadFile("../CHANGELOG.md")
	require.NoError(t, err)
	require.Contains(t, string(changelog), "## ["+Version+"]", "CHANGELOG.md has a section for the version the binary prints")
}
