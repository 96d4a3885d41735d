package runner

import (
	"context"
	"encoding/json"
	"fmt"
	"net"
	"net/http"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/outboxd/outboxd/internal/httpapi"
	"github.com/outboxd/outboxd/internal/stream"
	"github.com/outboxd/outboxd/internal/testkit"
	"github.com/outboxd/outboxd/outbox"
)

// TestSlowBodyFloodLeavesTheOperatorItsCommands: one ingest client holds
// every place of --http-max-bodies with bodies it trickles, on a real
// `outboxd dev`. Another client's post is answered 503 busy with
// Retry-After, while the operator's commands, whose requests carry bodies
// too, go through the reserve: `retries resume` and `dlq replay` exit 0,
// and the replayed dead letter's original is synced. The flood still
// holds its places afterwards.
func TestSlowBodyFloodLeavesTheOperatorItsCommands(t *testing.T) {
	t.Parallel()
	const op, flood, acme = "op-3c9e1a7f5b2d4e6a", "flood-8b7a6c5d4e3f2a1b", "acme-1f2e3d4c5b6a7980"
	const bodies = 4
	b := startDev(t, "", "--operator-token", op, "--ingest-client", "flood="+flood, "--ingest-client", "acme="+acme,
		"--http-max-bodies", fmt.Sprint(bodies), "--http-max-client-bodies", fmt.Sprint(bodies), "--http-body-timeout", "2m",
		"--max-deliveries", "1", "--min-age", "1h")
	ctx := context.Background()
	st := b.openStore(t)
	rdb, _ := testkit.NewRedis(t)
	dlq := stream.NewKeys(b.stream, "").DLQ()

	// A dead letter to replay: the read model refuses the event until the
	// trigger goes.
	_, err := b.pg.Pool.Exec(ctx, `
CREATE FUNCTION refuse_poison() RETURNS trigger LANGUAGE plpgsql AS $$
BEGIN RAISE EXCEPTION 'poison event %', NEW.event_id; END $$;
CREATE TRIGGER refuse_poison BEFORE INSERT ON events FOR EACH ROW WHEN (NEW.type = 'poison') EXECUTE FUNCTION refuse_poison();`)
	require.NoError(t, err)
	var res outbox.Result
	require.Equal(t, http.StatusCreated, b.apiCall(t, acme, http.MethodPost, "/v1/events",
		`{"sourceKey":"s","deviceKey":"d","type":"poison","occurredAt":"2026-11-01T10:00:00Z"}`, &res))
	require.Eventually(t, func() bool { return rdb.XLen(ctx, dlq).Val() == 1 }, 30*time.Second, 20*time.Millisecond)
	_, err = b.pg.Pool.Exec(ctx, `DROP TRIGGER refuse_poison ON events`)
	require.NoError(t, err)

	event := `{"sourceKey":"s","deviceKey":"flood","occurredAt":"2026-11-01T10:00:00Z"}`
	addr := strings.TrimPrefix(b.base, "http://")
	for range bodies {
		c, err := net.Dial("tcp", addr)
		require.NoError(t, err)
		t.Cleanup(func() { _ = c.Close() })
		_, err = fmt.Fprintf(c, "POST /v1/events HTTP/1.1\r\nHost: %s\r\nAuthorization: Bearer %s\r\nContent-Type: application/json\r\nContent-Length: %d\r\n\r\n%s",
			addr, flood, len(event), event[:10])
		require.NoError(t, err)
	}
	// busy posts an event of another client and reports a 503 busy with
	// Retry-After; last is the answer's status.
	var last atomic.Int64
	busy := func() bool {
		req, err := http.NewRequest(http.MethodPost, b.base+"/v1/events", strings.NewReader(event))
		if err != nil {
			return false
		}
		req.Header.Set("Content-Type", "application/json")
		req.Header.Set("Authorization", "Bearer "+acme)
		res, err := http.DefaultClient.Do(req)
		if err != nil {
			return false
		}
		defer res.Body.Close()
		last.Store(int64(res.StatusCode))
		var p struct{ Type string }
		return res.StatusCode == http.StatusServiceUnavailable && res.Header.Get("Retry-After") != "" &&
			json.NewDecoder(res.Body).Decode(&p) == nil && p.Type == httpapi.ProblemBusy
	}
	took := assert.Eventually(t, busy, 10*time.Second, 20*time.Millisecond)
	require.True(t, took, "the flood never took every place (last answer %d)", last.Load())

	// Each command goes through at once: the CLI would send a request
	// refused busy again only after its Retry-After (5s).
	operator := func(args ...string) string {
		t.Helper()
		started := time.Now()
		code, out, errOut := cli(append(args, "--server", b.base, "--auth-token", op)...)
		require.Equal(t, ExitOK, code, out+errOut)
		require.Less(t, time.Since(started), 5*time.Second, "%v waited for a place", args)
		return out
	}
	operator("retries", "resume", "--class", "record")
	require.Contains(t, operator("dlq", "replay", "--all"), "replayed 1")
	require.Eventually(t, func() bool {
		got, err := st.LoadEvents(ctx, []string{res.ID})
		return err == nil && got[res.ID].Event != nil && got[res.ID].Event.State() == outbox.StateSynced
	}, 30*time.Second, 20*time.Millisecond, "the replayed original is synced")
	require.Zero(t, rdb.XLen(ctx, dlq).Val(), "the dead letter is gone")
	require.True(t, busy(), "the flood still holds every place")
}
