package runner

import (
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"net/http"
	"strings"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"
	"github.com/stretchr/testify/require"

	"github.com/outboxd/outboxd/internal/failpolicy"
	"github.com/outboxd/outboxd/internal/operator"
	ostatus "github.com/outboxd/outboxd/internal/status"
	"github.com/outboxd/outboxd/internal/stream"
	"github.com/outboxd/outboxd/internal/testkit"
	"github.com/outboxd/outboxd/outbox"
)

// cli runs the command line args and returns the exit code, stdout and
// stderr (it sets no environment, so tests using it may run in parallel).
func cli(args ...string) (int, string, string) {
	var out, errOut bytes.Buffer
	code := run(context.Background(), args, &out, &errOut)
	return code, out.String(), errOut.String()
}

// deadLetters makes the worker of dev dead-letter two entries: one whose
// original does not exist and one that is not a message.
func (b *devBundle) deadLetters(t *testing.T) {
	t.Helper()
	ctx := context.Background()
	rdb, _ := testkit.NewRedis(t)
	at := time.Date(2026, 11, 1, 0, 0, 0, 0, time.UTC)
	ghost := &outbox.Event{ID: outbox.NewEventID(), IdempotencyKey: "ghost", SourceKey: "s", DeviceKey: "d", OccurredAt: at, CreatedAt: at}
	require.NoError(t, rdb.XAdd(ctx, &redis.XAddArgs{Stream: b.stream, Values: ghost.Message(outbox.OriginOutbox).Values()}).Err())
	require.NoError(t, rdb.XAdd(ctx, &redis.XAddArgs{Stream: b.stream, Values: map[string]any{outbox.PayloadField: "not json"}}).Err())
	require.Eventually(t, func() bool { return rdb.XLen(ctx, stream.NewKeys(b.stream, "").DLQ()).Val() == 2 }, 30*time.Second, 20*time.Millisecond)
}

// TestOperatorCommands runs status, dlq, replay and verify against `outboxd
// dev` and checks their output and exit codes: 0 ok, 1 a problem found, 2
// a usage error.
func TestOperatorCommands(t *testing.T) {
	t.Parallel()
	const token = "op-token"
	b := startDev(t, "", "--min-age", "1h", "--auth-token", token)
	server := []string{"--server", b.base, "--auth-token", token}
	op := func(args ...string) (int, string, string) {
		return cli(append(args, server...)...)
	}
	post := func(key, occurred string) {
		req, err := http.NewRequest(http.MethodPost, b.base+"/v1/events", strings.NewReader(
			fmt.Sprintf(`{"sourceKey":"plant-a","deviceKey":"sensor-1","occurredAt":%q}`, occurred)))
		require.NoError(t, err)
		req.Header.Set("Content-Type", "application/json")
		req.Header.Set("Authorization", "Bearer "+token)
		req.Header.Set("Idempotency-Key", key)
		res, err := http.DefaultClient.Do(req)
		require.NoError(t, err)
		require.Equal(t, http.StatusCreated, res.StatusCode)
		res.Body.Close()
	}
	for i := range 6 {
		post(fmt.Sprintf("k%d", i), fmt.Sprintf("2026-11-01T%02d:00:00Z", i))
	}
	b.deadLetters(t)
	var snap ostatus.Snapshot
	require.Eventually(t, func() bool {
		code, out, _ := op("status", "--json")
		return code == ExitOK && json.Unmarshal([]byte(out), &snap) == nil && snap.Events != nil && snap.Events.Synced == 6
	}, 30*time.Second, 50*time.Millisecond)
	require.Equal(t, int64(2), snap.DLQ.Length)
	require.NotNil(t, snap.Dispatcher)
	require.True(t, snap.Dispatcher.LeaderAlive)

	t.Run("Status", func(t *testing.T) {
		code, out, errOut := op("status")
		require.Equal(t, ExitOK, code, errOut)
		for _, want := range []string{"EVENTS", "total 6, synced 6, pending 0, failed 0", "OLDEST UNSYNCED", "OUTBOX", "undispatched 0",
			"STREAM", "DLQ", "length 2", "DISPATCHER", "leader ", "term 1", "checkpoint", "RECONCILER", "last sweep"} {
			require.Contains(t, out, want)
		}
		code, _, errOut = cli("status", "--server", b.base, "--auth-token", "wrong")
		require.Equal(t, ExitUsage, code, "a wrong token is a configuration error")
		require.Contains(t, errOut, "401")
	})

	t.Run("DLQ", func(t *testing.T) {
		code, out, errOut := op("dlq", "list")
		require.Equal(t, ExitOK, code, errOut)
		require.Contains(t, out, "CATEGORY")
		require.Contains(t, out, "original_missing")
		require.Contains(t, out, "bad_message")
		require.Contains(t, out, "2 shown of 2")
		code, out, _ = op("dlq", "list", "--code", "bad_message", "--json")
		require.Equal(t, ExitOK, code)
		var page operator.DLQPage
		require.NoError(t, json.Unmarshal([]byte(out), &page))
		require.Len(t, page.Entries, 1)

		code, out, _ = op("dlq", "replay", "--all")
		require.Equal(t, ExitFailure, code, "originals missing: a problem found")
		require.Contains(t, out, "original missing 2")
		code, _, errOut = op("dlq", "drop", "--id", page.Entries[0].ID)
		require.Equal(t, ExitUsage, code)
		require.Contains(t, errOut, "--yes")
		code, out, errOut = op("dlq", "drop", "--id", page.Entries[0].ID, "--yes")
		require.Equal(t, ExitOK, code, errOut)
		require.Contains(t, out, "dropped 1")
		code, out, _ = op("dlq", "drop", "--all", "--yes")
		require.Equal(t, ExitOK, code)
		require.Contains(t, out, "dropped 1")
		code, out, _ = op("dlq", "list")
		require.Equal(t, ExitOK, code)
		require.Contains(t, out, "0 shown of 0")
	})

	t.Run("VerifyAndRepair", func(t *testing.T) {
		code, out, errOut := op("verify")
		require.Equal(t, ExitOK, code, errOut)
		require.Contains(t, out, "checked 6 synced originals, 6 rows")
		require.Contains(t, out, "no drift")
		_, err := b.pg.Pool.Exec(context.Background(), `DELETE FROM events WHERE idempotency_key = 'k3'`)
		require.NoError(t, err)
		code, out, _ = op("verify", "--from", "2026-11-01T00:00:00Z", "--to", "2026-11-02T00:00:00Z")
		require.Equal(t, ExitFailure, code)
		require.Contains(t, out, "missing_row")
		require.Contains(t, out, "stats_mismatch")
		require.Contains(t, out, "counted 6, rows 5")
		code, out, errOut = op("verify", "--repair")
		require.Equal(t, ExitUsage, code, "--repair needs --yes")
		require.Contains(t, out, "--repair would re-publish 1")
		require.Contains(t, errOut, "--yes is required with --repair")
		code, out, _ = op("verify", "--repair", "--yes")
		require.Equal(t, ExitFailure, code, "drift was found, even though it was repaired")
		require.Contains(t, out, "1 re-published")
		require.Eventually(t, func() bool {
			code, _, _ := op("verify")
			return code == ExitOK
		}, 30*time.Second, 100*time.Millisecond)
		var counted int64
		require.NoError(t, b.pg.Pool.QueryRow(context.Background(), `SELECT sum(event_count) FROM device_daily_stats`).Scan(&counted))
		require.Equal(t, int64(6), counted)
	})

	t.Run("Replay", func(t *testing.T) {
		window := []string{"--from", "2026-11-01T02:00:00Z", "--to", "2026-11-01T05:00:00Z"}
		code, out, errOut := op(append([]string{"replay", "--dry-run"}, window...)...)
		require.Equal(t, ExitOK, code, errOut)
		require.Contains(t, out, "3 originals in the window")
		code, out, errOut = op(append([]string{"replay", "--json", "--chunk", "2", "--source", "plant-a", "--device", "sensor-1"}, window...)...)
		require.Equal(t, ExitOK, code, errOut)
		lines := strings.Split(strings.TrimSpace(out), "\n")
		require.Len(t, lines, 3, "a JSON line per chunk (2 + 1), then the totals: %s", out)
		var tot replayTotals
		require.NoError(t, json.Unmarshal([]byte(lines[2]), &tot))
		require.Equal(t, lineTotal, tot.Kind)
		require.Equal(t, 3, tot.Published)
		code, out, _ = op(append([]string{"replay", "--rebuild", "--yes"}, window...)...)
		require.Equal(t, ExitOK, code)
		require.Contains(t, out, "3 rows removed")
		require.Contains(t, out, "into the replay lane")
		require.Eventually(t, func() bool {
			code, _, _ := op("verify")
			return code == ExitOK
		}, 30*time.Second, 100*time.Millisecond)
		// The replays went through the replay lane: the group read the one
		// the repair above published and the six of these replays, and
		// nothing is left in it.
		// (verify passes once the rows are back, a moment before the
		// worker's acknowledgements of the lane: poll for them.)
		want := b.stream + ":replay: length 7, lag 0 unread, pending 0, read 7"
		require.Eventually(t, func() bool {
			code, out, errOut = op("status")
			return code == ExitOK && strings.Contains(out, "REPLAY LANE") && strings.Contains(out, want)
		}, 30*time.Second, 100*time.Millisecond, "status: %s%s", out, errOut)
	})

	// retries resume: a halt of the group's workers (the rule's state is
	// in Redis) shows in status, and the command clears it for every
	// worker.
	t.Run("RetriesResume", func(t *testing.T) {
		ctx := context.Background()
		rdb, _ := testkit.NewRedis(t)
		rc, err := stream.NewClient(rdb, nil)
		require.NoError(t, err)
		keys := stream.NewKeys(b.stream, b.group)
		poison := failpolicy.Failure{Code: "projection_failed", Class: failpolicy.ClassRecord, Source: failpolicy.SourcePostgres}
		_, err = rc.Streak(keys, stream.ComponentWorker).Fail(ctx, poison, 1)
		require.NoError(t, err)
		code, out, errOut := op("status")
		require.Equal(t, ExitFailure, code, "a stalled pipeline: exit 1 %s", errOut)
		require.Contains(t, out, "RETRIES HALTED")
		require.Contains(t, out, "worker/record (projection_failed)")
		require.Contains(t, out, "STALLED")

		code, out, errOut = op("retries", "resume", "--class", "record")
		require.Equal(t, ExitOK, code, errOut)
		require.Equal(t, "retries resume: automatic retries of class record resumed for worker (halted by projection_failed); every process sees it within a second\n", out)
		code, out, _ = op("status")
		require.Equal(t, ExitOK, code)
		require.NotContains(t, out, "RETRIES HALTED")
		code, out, errOut = op("retries", "resume", "--class", "record", "--json")
		require.Equal(t, ExitOK, code, errOut)
		require.JSONEq(t, `{"class":"record","resumed":[]}`, out)
		code, out, _ = op("retries", "resume", "--class", "unknown")
		require.Equal(t, ExitOK, code)
		require.Contains(t, out, "nothing changed")
	})

	t.Run("UsageErrors", func(t *testing.T) {
		for _, args := range [][]string{
			{"replay"},
			{"replay", "--from", "2026-11-01T00:00:00Z", "--to", "yesterday"},
			{"replay", "--from", "2026-11-02T00:00:00Z", "--to", "2026-11-01T00:00:00Z"},
			{"replay", "--from", "2026-11-01T00:00:00Z", "--to", "2026-11-02T00:00:00Z", "--state", "lost"},
			{"replay", "--from", "2026-11-01T00:00:00Z", "--to", "2026-11-02T00:00:00Z", "--device", "d"},
			{"replay", "--from", "2026-11-01T00:00:00Z", "--to", "2026-11-02T00:00:00Z", "--by", "day"},
			{"dlq", "replay"},
			{"dlq", "replay", "--id", "1-0", "--all"},
			{"dlq", "replay", "--id", "1-0", "--category", "poison"},
			{"dlq", "list", "--limit", "0"},
			{"dlq"},
			{"verify", "--from", "soon"},
		} {
			code, _, errOut := op(args...)
			require.Equal(t, ExitUsage, code, "%v: %s", args, errOut)
		}
	})
}
