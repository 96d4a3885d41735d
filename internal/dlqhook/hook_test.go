package dlqhook_test

import (
	"context"
	"encoding/json"
	"io"
	"net/http"
	"net/http/httptest"
	"sync"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/stretchr/testify/require"

	"github.com/outboxd/outboxd/internal/dlqhook"
	"github.com/outboxd/outboxd/internal/stream"
	"github.com/outboxd/outboxd/internal/testkit"
)

// server is a webhook that fails its first failures calls (500), then
// answers 204, and keeps the notices it accepted.
type server struct {
	mu       sync.Mutex
	calls    int
	failures int
	got      []dlqhook.Notice
}

func (s *server) ServeHTTP(w http.ResponseWriter, r *http.Request) {
	body, _ := io.ReadAll(r.Body)
	s.mu.Lock()
	defer s.mu.Unlock()
	s.calls++
	if s.failures < 0 || s.calls <= s.failures {
		w.WriteHeader(http.StatusInternalServerError)
		return
	}
	var n dlqhook.Notice
	if json.Unmarshal(body, &n) == nil && r.Header.Get("Content-Type") == "application/json" {
		s.got = append(s.got, n)
	}
	w.WriteHeader(http.StatusNoContent)
}

// TestHook: a notice reaches a webhook that fails twice first, on its
// third attempt; one that always fails is given up after its attempts;
// the metrics count both; a bad URL is a config error.
func TestHook(t *testing.T) {
	t.Parallel()
	keys := stream.NewKeys("s", "g")
	at := time.Date(2026, 11, 2, 3, 4, 5, 0, time.UTC)
	dl := stream.DeadLetter{Category: "poison", Code: "projection_failed", Error: "boom", EntryID: "1-0", EventID: "e1", Deliveries: 3, At: at}
	for _, tc := range []struct {
		name                string
		failures            int
		delivered, attempts float64
	}{
		{"FailsTwiceThenDelivers", 2, 1, 3},
		{"AlwaysFailsGivenUp", -1, 0, 4},
	} {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			srv := &server{failures: tc.failures}
			ts := httptest.NewServer(srv)
			t.Cleanup(ts.Close)
			reg := prometheus.NewRegistry()
			h, err := dlqhook.New(dlqhook.Config{URL: ts.URL, Attempts: 4, Backoff: 5 * time.Millisecond, Registerer: reg}, testkit.Logger(t))
			require.NoError(t, err)
			require.NoError(t, h.Start(context.Background()))
			h.Notify(keys, dl)
			require.NoError(t, h.Stop(context.Background())) // sends what is queued
			h.Notify(keys, dl)                               // after the stop: dropped, no panic
			require.Equal(t, tc.attempts, testkit.Metric(t, reg, "outboxd_dlq_hook_attempts_total"))
			require.Equal(t, tc.delivered, testkit.Metric(t, reg, "outboxd_dlq_hook_notices_total", "outcome", dlqhook.OutcomeDelivered))
			require.Equal(t, 1-tc.delivered, testkit.Metric(t, reg, "outboxd_dlq_hook_notices_total", "outcome", dlqhook.OutcomeFailed))
			require.Equal(t, 1.0, testkit.Metric(t, reg, "outboxd_dlq_hook_notices_total", "outcome", dlqhook.OutcomeDropped))
			srv.mu.Lock()
			defer srv.mu.Unlock()
			require.Equal(t, int(tc.attempts), srv.calls)
			if tc.delivered == 1 {
				require.Equal(t, []dlqhook.Notice{{Stream: "s", Group: "g", EntryID: "1-0", EventID: "e1", Category: "poison",
					Code: "projection_failed", Error: "boom", Deliveries: 3, At: at}}, srv.got)
			}
		})
	}
	_, err := dlqhook.New(dlqhook.Config{URL: "ftp://x"}, nil)
	require.ErrorContains(t, err, "URL")
}
