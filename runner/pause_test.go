package runner

import (
	"context"
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"strings"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"
	"github.com/stretchr/testify/require"

	"github.com/outboxd/outboxd/internal/httpapi"
	"github.com/outboxd/outboxd/internal/operator"
	"github.com/outboxd/outboxd/internal/pause"
	ostatus "github.com/outboxd/outboxd/internal/status"
	"github.com/outboxd/outboxd/internal/stream"
	"github.com/outboxd/outboxd/internal/testkit"
)

// replica runs a second `outboxd dev` on b's store, Redis, PostgreSQL,
// stream and group, and returns its base URL.
func (b *devBundle) replica(t *testing.T, extra ...string) string {
	t.Helper()
	addr := freeAddr(t)
	args := append([]string{"dev", "--store", b.store, "--postgres-url", b.pg.URL, "--redis-url", testkit.RedisURL(),
		"--stream", b.stream, "--group", b.group, "--http-addr", addr, "--log-level", "warn"}, extra...)
	start(t, addr, args)
	return "http://" + addr
}

// TestPauseAndCancelAcrossReplicas: a pause through one replica's CLI and
// admin API stops the stage in both replicas and shows in the other's
// status; a resume through the other lets it go on; a replay cancelled
// through one replica publishes nothing more and leaves nothing in the
// replay lane, the live stream untouched.
func TestPauseAndCancelAcrossReplicas(t *testing.T) {
	t.Parallel()
	const token = "op-token"
	a := startDev(t, "", "--auth-token", token)
	bBase := a.replica(t, "--auth-token", token)
	on := func(base string, args ...string) (int, string, string) {
		return cli(append(args, "--server", base, "--auth-token", token)...)
	}
	status := func(base string) ostatus.Snapshot {
		code, out, errOut := on(base, "status", "--json")
		require.Contains(t, []int{ExitOK, ExitFailure}, code, errOut)
		var s ostatus.Snapshot
		require.NoError(t, json.Unmarshal([]byte(out), &s))
		return s
	}
	post := func(i int) {
		req, err := http.NewRequest(http.MethodPost, a.base+"/v1/events", strings.NewReader(
			fmt.Sprintf(`{"sourceKey":"plant-a","deviceKey":"sensor-%d","occurredAt":"2026-11-01T%02d:00:00Z"}`, i, i)))
		require.NoError(t, err)
		req.Header.Set("Content-Type", "application/json")
		req.Header.Set("Authorization", "Bearer "+token)
		req.Header.Set("Idempotency-Key", fmt.Sprintf("k%d", i))
		res, err := http.DefaultClient.Do(req)
		require.NoError(t, err)
		require.Equal(t, http.StatusCreated, res.StatusCode)
		res.Body.Close()
	}
	synced := func(base string) int64 {
		s := status(base)
		if s.Events == nil {
			return -1
		}
		return s.Events.Synced
	}

	// Pause the group's live projection on A: neither replica projects.
	code, out, errOut := on(a.base, "pause", "--stage", "projection", "--paused-by", "alice")
	require.Equal(t, ExitOK, code, errOut)
	require.Contains(t, out, "projection:"+a.group+" paused by alice")
	code, out, _ = on(bBase, "pause", "--stage", "projection")
	require.Equal(t, ExitOK, code)
	require.Contains(t, out, "already paused by alice")
	s := status(bBase)
	require.Len(t, s.Paused, 1, "the other replica's status shows the pause")
	require.Equal(t, "projection:"+a.group, s.Paused[0].Stage)
	require.Empty(t, s.Stalled, "paused is not stalled")
	_, out, _ = on(bBase, "status")
	require.Contains(t, out, "PAUSED")
	// Every replica sees a pause within pause.RefreshEvery: post after it.
	<-time.After(pause.RefreshEvery + 200*time.Millisecond)
	for i := range 4 {
		post(i)
	}
	testkit.Never(t, func() bool { return synced(bBase) > 0 }, 3*time.Second, 100*time.Millisecond)

	// Resume on B: both project.
	code, out, errOut = on(bBase, "resume", "--stage", "projection")
	require.Equal(t, ExitOK, code, errOut)
	require.Contains(t, out, "resumed")
	require.Eventually(t, func() bool { return synced(a.base) == 4 }, 30*time.Second, 50*time.Millisecond)
	require.Empty(t, status(a.base).Paused)

	// A replay whose lane is paused waits in the lane; a cancel on B
	// removes it and refuses the replay's next chunk.
	code, _, errOut = on(a.base, "pause", "--stage", "replay")
	require.Equal(t, ExitOK, code, errOut)
	<-time.After(pause.RefreshEvery + 200*time.Millisecond)
	window := []string{"--from", "2026-11-01T00:00:00Z", "--to", "2026-11-02T00:00:00Z"}
	code, out, errOut = on(a.base, append([]string{"replay", "--json", "--chunk", "2"}, window...)...)
	require.Equal(t, ExitOK, code, errOut)
	var first replayChunk
	require.NoError(t, json.Unmarshal([]byte(strings.SplitN(out, "\n", 2)[0]), &first))
	require.NotNil(t, first.Started)
	rdb, _ := testkit.NewRedis(t)
	lane := stream.NewKeys(a.stream, a.group).ReplayLane().Stream()
	require.EqualValues(t, 4, rdb.XLen(context.Background(), lane).Val(), "the replay waits in the paused lane")
	liveLen := rdb.XLen(context.Background(), stream.NewKeys(a.stream, a.group).Stream()).Val()

	code, out, errOut = on(bBase, "replay", "cancel", "--json")
	require.Equal(t, ExitOK, code, errOut)
	var cancelled operator.CancelResult
	require.NoError(t, json.Unmarshal([]byte(out), &cancelled))
	require.Zero(t, rdb.XLen(context.Background(), lane).Val()-pendingOf(t, rdb, lane, a.group), "nothing unread is left in the lane")
	require.Equal(t, liveLen, rdb.XLen(context.Background(), stream.NewKeys(a.stream, a.group).Stream()).Val(), "the live stream is untouched")
	body, _ := json.Marshal(httpapi.ReplayRequest{From: window[1], To: window[3], Limit: 2, After: first.Next,
		Started: first.Started.Format(time.RFC3339Nano)})
	req, err := http.NewRequest(http.MethodPost, a.base+"/v1/admin/replay", strings.NewReader(string(body)))
	require.NoError(t, err)
	req.Header.Set("Content-Type", "application/json")
	req.Header.Set("Authorization", "Bearer "+token)
	res, err := http.DefaultClient.Do(req)
	require.NoError(t, err)
	msg, _ := io.ReadAll(res.Body)
	res.Body.Close()
	require.Equal(t, http.StatusConflict, res.StatusCode, "a chunk of the cancelled replay: %s", msg)
	require.Contains(t, string(msg), httpapi.ProblemCancelled)

	code, _, errOut = on(a.base, "resume", "--stage", "replay")
	require.Equal(t, ExitOK, code, errOut)
	// What a worker had read before the cancel (held while the lane was
	// paused) is acknowledged unprojected at the resume: with what the
	// cancel removed, the whole replay, and none of it projected.
	require.Eventually(t, func() bool {
		return cancelled.Removed+int64(metricSum(t, a.base, "outboxd_worker_replay_cancelled_total")+
			metricSum(t, bBase, "outboxd_worker_replay_cancelled_total")) == 4 && pendingOf(t, rdb, lane, a.group) == 0
	}, 30*time.Second, 50*time.Millisecond)
	require.Zero(t, metricSum(t, a.base, "outboxd_worker_replay_acked_total")+metricSum(t, bBase, "outboxd_worker_replay_acked_total"),
		"no entry of the cancelled replay was projected")
	var res2 operator.PausesResult
	require.Equal(t, http.StatusOK, a.apiCall(t, token, http.MethodGet, "/v1/admin/pauses", "", &res2))
	require.Empty(t, res2.Paused)
}

// pendingOf counts the entries of stream key pending in group.
func pendingOf(t *testing.T, rdb redis.UniversalClient, key, group string) int64 {
	t.Helper()
	n, err := testkit.PendingEntries(context.Background(), rdb, key, group)
	require.NoError(t, err)
	return n
}

// metricSum sums the series of name on base's /metrics.
func metricSum(t *testing.T, base, name string) float64 {
	t.Helper()
	res, err := http.Get(base + "/metrics")
	require.NoError(t, err)
	defer res.Body.Close()
	text, err := io.ReadAll(res.Body)
	require.NoError(t, err)
	var sum float64
	for _, line := range strings.Split(string(text), "\n") {
		if rest, ok := strings.CutPrefix(line, name); ok && (strings.HasPrefix(rest, "{") || strings.HasPrefix(rest, " ")) {
			var v float64
			_, err := fmt.Sscan(rest[strings.LastIndex(rest, " ")+1:], &v)
			require.NoError(t, err)
			sum += v
		}
	}
	return sum
}
