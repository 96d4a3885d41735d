package httpapi_test

import (
	"context"
	"encoding/json"
	"errors"
	"net/http"
	"sync"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/redis/go-redis/v9"
	"github.com/stretchr/testify/require"

	"github.com/outboxd/outboxd/internal/httpapi"
	ostatus "github.com/outboxd/outboxd/internal/status"
	"github.com/outboxd/outboxd/internal/stream"
	"github.com/outboxd/outboxd/internal/testkit"
	"github.com/outboxd/outboxd/store"
)

// getTimed sends GET path and returns the answer and how long it took.
func (b *handlerBundle) getTimed(t *testing.T, path string) (reply, time.Duration) {
	t.Helper()
	start := time.Now()
	r := b.do(t, http.MethodGet, path, "")
	return r, time.Since(start)
}

// TestStatusFrozenRedis freezes Redis behind a proxy under GET /v1/status,
// GET /readyz and /metrics: each answers within its
// bound, although the Redis client (the defaults outboxd uses: 5 s read
// timeout, retries, deadlines of contexts not heeded) would wait far
// longer; the stream and DLQ figures are absent, not zero, and named as
// unavailable; the store's figures are still there.
func TestStatusFrozenRedis(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	direct, prefix := testkit.NewRedis(t)
	name := prefix + "-stream"
	for range 2 {
		require.NoError(t, direct.XAdd(ctx, &redis.XAddArgs{Stream: name, Values: map[string]any{"payload": "{}"}}).Err())
	}
	require.NoError(t, direct.XAdd(ctx, &redis.XAddArgs{Stream: stream.NewKeys(name, "").DLQ(), Values: map[string]any{"payload": "{}"}}).Err())

	opt, err := redis.ParseURL(testkit.RedisURL())
	require.NoError(t, err)
	proxy := testkit.NewTCPProxy(t, opt.Addr)
	opt.Addr = proxy.Addr()
	rdb := redis.NewClient(opt) // outboxd's client: redis.ParseURL's defaults
	t.Cleanup(func() { _ = rdb.Close() })

	st := testkit.NewStore(t)
	const bound = 300 * time.Millisecond
	rc, err := stream.NewClient(rdb, nil)
	require.NoError(t, err)
	status := &ostatus.Status{Store: st, Redis: rc, Stream: name, Group: prefix + "-group", ReadTimeout: bound}
	reg := prometheus.NewRegistry()
	reg.MustRegister(ostatus.NewCollector(status))
	b := setupHandlerOn(t, st, &httpapi.Config{Status: status, Ready: []httpapi.Check{
		{Name: "store", Func: st.Ping},
		{Name: "redis", Func: func(ctx context.Context) error { return rdb.Ping(ctx).Err() }},
	}})

	r, _ := b.getTimed(t, "/v1/status")
	require.Equal(t, http.StatusOK, r.status, "body: %s", r.body)
	v := r.json(t)
	require.Equal(t, 2.0, v["stream"].(map[string]any)["length"])
	require.Equal(t, 1.0, v["dlq"].(map[string]any)["length"])
	require.NotContains(t, v, "unavailable")
	require.Equal(t, http.StatusOK, b.do(t, http.MethodGet, "/readyz", "").status)

	proxy.Stall()
	r, took := b.getTimed(t, "/v1/status")
	require.Equal(t, http.StatusOK, r.status, "body: %s", r.body)
	require.Less(t, took, bound+2*time.Second, "the answer waited for the frozen Redis")
	v = r.json(t)
	require.NotContains(t, v, "stream", "a figure that could not be read is absent, not zero")
	require.NotContains(t, v, "dlq")
	require.NotContains(t, v, "replay")
	require.Equal(t, []any{"dlq", "redis", "replay", "stream"}, v["unavailable"])
	require.Equal(t, 0.0, v["events"].(map[string]any)["total"], "the store's figures are read")
	require.Contains(t, v, "readAt")

	r, took = b.getTimed(t, "/readyz")
	require.Equal(t, http.StatusServiceUnavailable, r.status)
	require.Less(t, took, 2*time.Second+2*time.Second, "readiness waited for the frozen Redis")
	require.Equal(t, map[string]any{"store": "ok", "redis": "unavailable"}, r.json(t)["checks"])

	start := time.Now()
	families, err := reg.Gather()
	require.NoError(t, err)
	require.Less(t, time.Since(start), bound+2*time.Second, "the scrape waited for the frozen Redis")
	var names []string
	for _, f := range families {
		names = append(names, f.GetName())
		if f.GetName() == "outboxd_status_read_errors_total" {
			for _, m := range f.GetMetric() {
				require.Equal(t, 1.0, m.GetCounter().GetValue())
			}
			require.Len(t, f.GetMetric(), 3, "stream, replay and dlq")
		}
	}
	require.Contains(t, names, "outboxd_events")
	require.NotContains(t, names, "outboxd_stream_length", "a figure that could not be read is left out")
	require.NotContains(t, names, "outboxd_dlq_length")
	require.NotContains(t, names, "outboxd_replay_length")

	proxy.Unstall()
	require.Eventually(t, func() bool {
		snap := status.Snapshot(ctx)
		return len(snap.Unavailable) == 0 && snap.DLQ != nil && snap.DLQ.Length == 1
	}, 30*time.Second, 20*time.Millisecond, "the figures did not come back with Redis")
}

// frozenStore is a store whose Counts hangs, whatever its context says,
// until released.
type frozenStore struct {
	store.Store
	release chan struct{}
}

func (f frozenStore) Counts(context.Context) (store.Counts, error) {
	<-f.release
	return store.Counts{}, errors.New("released")
}

// TestStatusFrozenStore: a store that hangs is reported unavailable within
// the bound; events and outbox are null, not zero, and readAt is absent.
func TestStatusFrozenStore(t *testing.T) {
	t.Parallel()
	st := frozenStore{Store: testkit.NewStore(t), release: make(chan struct{})}
	t.Cleanup(func() { close(st.release) })
	const bound = 200 * time.Millisecond
	b := setupHandlerOn(t, st, &httpapi.Config{Status: &ostatus.Status{Store: st, Stream: "s", Group: "g", ReadTimeout: bound}})
	r, took := b.getTimed(t, "/v1/status")
	require.Equal(t, http.StatusOK, r.status, "body: %s", r.body)
	require.Less(t, took, bound+2*time.Second)
	var v map[string]json.RawMessage
	require.NoError(t, json.Unmarshal(r.body, &v))
	for _, part := range []string{"events", "outbox", "oldestPendingAgeSeconds"} {
		require.Equal(t, "null", string(v[part]), part)
	}
	require.NotContains(t, v, "readAt")
	require.JSONEq(t, `["events","outbox"]`, string(v["unavailable"]))
}

// TestStatusReplayLane: the status shows the replay lane (its length, what
// the group has not read, what it holds, what it read and the rate it
// read at between two reads at least five seconds apart), and the gauges
// export it.
func TestStatusReplayLane(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	rdb, prefix := testkit.NewRedis(t)
	rc, err := stream.NewClient(rdb, nil)
	require.NoError(t, err)
	keys := stream.NewKeys(prefix+"-stream", "g")
	now := time.Date(2026, 11, 1, 12, 0, 0, 0, time.UTC)
	var mu sync.Mutex
	clock := func() time.Time { mu.Lock(); defer mu.Unlock(); return now }
	st := testkit.NewStore(t)
	status := &ostatus.Status{Store: st, Redis: rc, Stream: keys.Name(), Group: keys.Group(), Now: clock}
	add := func(n int) {
		for range n {
			require.NoError(t, rdb.XAdd(ctx, &redis.XAddArgs{Stream: keys.Replay(), Values: map[string]any{"payload": "{}"}}).Err())
		}
	}
	lane := rc.Group(keys.ReplayLane(), "c")
	read := func(n int) {
		got, err := lane.Read(ctx, ">", n, -1)
		require.NoError(t, err)
		require.Len(t, got, n)
	}

	snap := status.Snapshot(ctx)
	require.Equal(t, &ostatus.ReplayCounts{Name: keys.Replay(), Lag: ptr(int64(0))}, snap.Replay, "no lane yet")
	add(10)
	_, err = lane.Ensure(ctx)
	require.NoError(t, err)
	read(4)
	snap = status.Snapshot(ctx)
	require.Equal(t, &ostatus.ReplayCounts{Name: keys.Replay(), Length: 10, Pending: 4, Lag: ptr(int64(6)), Read: 4}, snap.Replay,
		"no rate from one reading")
	mu.Lock()
	now = now.Add(5 * time.Second)
	mu.Unlock()
	read(6)
	snap = status.Snapshot(ctx)
	require.NotNil(t, snap.Replay.RatePerSecond)
	require.InDelta(t, 10.0/5, *snap.Replay.RatePerSecond, 1e-9, "ten read since the first reading, five seconds before")
	require.Equal(t, int64(0), *snap.Replay.Lag)

	reg := prometheus.NewRegistry()
	reg.MustRegister(ostatus.NewCollector(status))
	require.Equal(t, 10.0, testkit.Metric(t, reg, "outboxd_replay_length"))
	require.Equal(t, 10.0, testkit.Metric(t, reg, "outboxd_replay_pending"))
	require.Zero(t, testkit.Metric(t, reg, "outboxd_replay_lag"))
	js, err := json.Marshal(snap)
	require.NoError(t, err)
	require.Contains(t, string(js), `"replay":{"name":"`+keys.Replay()+`","length":10,"pending":10,"lag":0,"read":10,"ratePerSecond":2}`)

	// The console's history samples the lane, and its rate between two
	// samples.
	h, err := ostatus.NewHistory(status, &ostatus.HistoryConfig{Every: ostatus.HistoryEveryShortest}, nil)
	require.NoError(t, err)
	require.NoError(t, h.Start(ctx))
	t.Cleanup(func() { require.NoError(t, h.Stop(ctx)) })
	require.Eventually(t, func() bool {
		mu.Lock()
		now = now.Add(time.Second) // the samples' clock moves
		mu.Unlock()
		for _, sm := range h.Page().Samples {
			if sm.ReplayedPerSecond != nil && sm.ReplayLength != nil && *sm.ReplayLength == 10 && *sm.ReplayPending == 10 && *sm.ReplayLag == 0 {
				return *sm.ReplayedPerSecond == 0 // nothing read since the sample before
			}
		}
		return false
	}, 10*time.Second, 5*time.Millisecond)
}

func ptr[T any](v T) *T { return &v }
