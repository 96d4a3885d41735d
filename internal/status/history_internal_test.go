package status

import (
	"context"
	"encoding/json"
	"net/http"
	"net/http/httptest"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/stretchr/testify/require"

	"github.com/outboxd/outboxd/internal/httpapi"
	"github.com/outboxd/outboxd/internal/testkit"
	"github.com/outboxd/outboxd/outbox"
	"github.com/outboxd/outboxd/reconciler"
	"github.com/outboxd/outboxd/worker"
)

// historyBundle is a History over a fresh store, a latency histogram and a
// clock the test moves.
type historyBundle struct {
	h       *History
	writer  *outbox.Writer
	synced  func(ids []string)
	latency *prometheus.HistogramVec
	sweep   atomic.Pointer[reconciler.Report]
	mu      sync.Mutex
	now     time.Time
}

func setupHistory(t *testing.T, size int) *historyBundle {
	t.Helper()
	st := testkit.NewSQLite(t)
	b := &historyBundle{now: time.Date(2026, 11, 1, 12, 0, 0, 0, time.UTC)}
	b.writer = outbox.NewWriter(st, nil)
	b.synced = func(ids []string) {
		_, err := st.MarkSynced(context.Background(), ids, b.clock())
		require.NoError(t, err)
	}
	reg := prometheus.NewRegistry()
	b.latency = prometheus.NewHistogramVec(prometheus.HistogramOpts{Name: worker.LatencyMetric, Help: "latency",
		Buckets: []float64{0.1, 1, 10}, ConstLabels: prometheus.Labels{"stream": "s"}}, []string{"origin"})
	reg.MustRegister(b.latency)
	status := &Status{Store: st, Stream: "s", Group: "g", Gatherer: reg, Now: b.clock, LastSweep: b.sweep.Load}
	var err error
	b.h, err = NewHistory(status, &HistoryConfig{Size: size}, nil)
	require.NoError(t, err)
	return b
}

func (b *historyBundle) clock() time.Time {
	b.mu.Lock()
	defer b.mu.Unlock()
	return b.now
}

func (b *historyBundle) advance(d time.Duration) {
	b.mu.Lock()
	defer b.mu.Unlock()
	b.now = b.now.Add(d)
}

// write stores n originals and marks the first synced of them synced.
func (b *historyBundle) write(t *testing.T, n, synced int) {
	t.Helper()
	inputs := make([]outbox.Input, n)
	for i := range inputs {
		inputs[i] = outbox.Input{SourceKey: "s", DeviceKey: "d", OccurredAt: b.clock().Add(-time.Duration(i+1) * time.Minute).Format(time.RFC3339)}
	}
	res, err := b.writer.Write(context.Background(), inputs)
	require.NoError(t, err)
	ids := make([]string, synced)
	for i := range ids {
		ids[i] = res[i].ID
	}
	b.synced(ids)
}

// TestHistorySamples: each sample holds the figures of the status and the
// rates since the one before; the latency comes from the histogram's
// buckets of the normal path's origins only; the ring keeps the newest
// samples, oldest first; each new sweep report is kept once.
func TestHistorySamples(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	b := setupHistory(t, 3)
	b.h.sample(ctx)
	page := b.h.Page()
	require.Len(t, page.Samples, 1)
	first := page.Samples[0]
	require.Nil(t, first.IngestedPerSecond, "no rate without a sample before")
	require.Nil(t, first.Latency)
	require.Equal(t, int64(0), *first.Pending)
	require.Nil(t, first.StreamLength, "no Redis: no stream figures")
	require.Empty(t, page.Sweeps)

	b.write(t, 10, 4)
	for _, v := range []float64{0.05, 0.05, 0.05, 5} {
		b.latency.WithLabelValues(string(outbox.OriginOutbox)).Observe(v)
	}
	b.latency.WithLabelValues(string(outbox.OriginReplay)).Observe(1000) // an operator replay: left out
	b.sweep.Store(&reconciler.Report{Stream: "s", Scanned: 1})
	b.advance(2 * time.Second)
	b.h.sample(ctx)
	page = b.h.Page()
	require.Len(t, page.Samples, 2)
	s := page.Samples[1]
	require.InDelta(t, 5.0, *s.IngestedPerSecond, 1e-9)
	require.InDelta(t, 2.0, *s.SyncedPerSecond, 1e-9)
	require.Equal(t, int64(6), *s.Pending)
	require.Equal(t, int64(10), *s.Undispatched, "no dispatcher ran")
	require.NotNil(t, s.Latency)
	require.Equal(t, int64(4), s.Latency.Count)
	require.InDelta(t, 5.15/4, s.Latency.MeanSeconds, 1e-9)
	require.InDelta(t, 0.1*2/3, s.Latency.P50Seconds, 1e-9, "rank 2 of 3 in the bucket up to 0.1 s")
	require.InDelta(t, 1+9*0.8, s.Latency.P95Seconds, 1e-9, "rank 3.8 in the bucket from 1 s to 10 s")
	require.Len(t, page.Sweeps, 1)

	for range 3 {
		b.advance(2 * time.Second)
		b.h.sample(ctx)
	}
	page = b.h.Page()
	require.Len(t, page.Samples, 3, "the ring keeps the newest")
	for i := 1; i < len(page.Samples); i++ {
		require.True(t, page.Samples[i-1].At.Before(page.Samples[i].At), "oldest first")
		require.Nil(t, page.Samples[i].Latency, "nothing synced since")
		require.Zero(t, *page.Samples[i].IngestedPerSecond)
	}
	require.Len(t, page.Sweeps, 1, "the same report is kept once")
	b.sweep.Store(&reconciler.Report{Stream: "s", Scanned: 2})
	b.h.sample(ctx)
	page = b.h.Page()
	require.Len(t, page.Sweeps, 2)
	require.Equal(t, 2, page.Sweeps[0].Scanned, "newest first")
}

// TestHistoryQuantile checks the bucket interpolation of histogram_quantile.
func TestHistoryQuantile(t *testing.T) {
	t.Parallel()
	bounds := []float64{1, 2, 4}
	for _, tc := range []struct {
		name string
		q    float64
		cum  []uint64
		n    uint64
		want float64
	}{
		{"FirstBucket", 0.5, []uint64{4, 4, 4}, 4, 0.5},
		{"MiddleBucket", 0.5, []uint64{0, 4, 4}, 4, 1.5},
		{"Upper", 1, []uint64{0, 0, 2}, 2, 4},
		{"BeyondTheLastBound", 0.99, []uint64{1, 1, 1}, 10, 4},
	} {
		t.Run(tc.name, func(t *testing.T) {
			require.InDelta(t, tc.want, quantile(tc.q, bounds, tc.cum, tc.n), 1e-9)
		})
	}
}

// TestHistoryService: the sampler's lifecycle (package startstop): it
// samples at start and on its ticker, stops at once, and serves its page.
func TestHistoryService(t *testing.T) {
	t.Parallel()
	st := testkit.NewSQLite(t)
	h, err := NewHistory(&Status{Store: st, Stream: "s"}, &HistoryConfig{Every: HistoryEveryShortest}, nil)
	require.NoError(t, err)
	require.NoError(t, h.Stop(context.Background()), "a stop before the start is harmless")
	ctx, cancel := context.WithCancel(context.Background())
	require.NoError(t, h.Start(ctx))
	require.Eventually(t, func() bool { return len(h.Page().Samples) >= 3 }, 10*time.Second, 5*time.Millisecond)
	cancel()
	select {
	case <-h.Stopped():
	case <-time.After(10 * time.Second):
		t.Fatal("the sampler did not stop when its context ended")
	}
	require.NoError(t, h.Start(context.Background()))
	require.NoError(t, h.Stop(context.Background()))
	require.NoError(t, h.Stop(context.Background()), "stop twice")

	handler, err := httpapi.New(&httpapi.Config{Status: &Status{Store: st, Stream: "s"}, History: h}, nil)
	require.NoError(t, err)
	rec := httptest.NewRecorder()
	handler.ServeHTTP(rec, httptest.NewRequest(http.MethodGet, "/v1/status/history", nil))
	require.Equal(t, http.StatusOK, rec.Code)
	var page HistoryPage
	require.NoError(t, json.Unmarshal(rec.Body.Bytes(), &page))
	require.InDelta(t, HistoryEveryShortest.Seconds(), page.EverySeconds, 1e-9)
	require.GreaterOrEqual(t, len(page.Samples), 3)

	_, err = NewHistory(&Status{Store: st}, &HistoryConfig{Size: 1}, nil)
	require.Error(t, err)
	_, err = NewHistory(nil, nil, nil)
	require.Error(t, err)
}
