package worker_test

import (
	"context"
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"net/http/httptest"
	"sync"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/outboxd/outboxd/internal/dlqhook"
	"github.com/outboxd/outboxd/internal/testkit"
	"github.com/outboxd/outboxd/outbox"
	"github.com/outboxd/outboxd/worker"
)

// TestWorkerDeadLetterHook: a poison record's dead letter reaches the
// webhook, which fails twice first, with its category, code and event.
func TestWorkerDeadLetterHook(t *testing.T) {
	t.Parallel()
	var mu sync.Mutex
	calls := 0
	var got []dlqhook.Notice
	ts := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		body, _ := io.ReadAll(r.Body)
		mu.Lock()
		defer mu.Unlock()
		if calls++; calls <= 2 {
			w.WriteHeader(http.StatusBadGateway)
			return
		}
		var n dlqhook.Notice
		require.NoError(t, json.Unmarshal(body, &n))
		got = append(got, n)
	}))
	t.Cleanup(ts.Close)
	hook, err := dlqhook.New(dlqhook.Config{URL: ts.URL, Backoff: 5 * time.Millisecond}, testkit.Logger(t))
	require.NoError(t, err)
	require.NoError(t, hook.Start(context.Background()))
	t.Cleanup(func() { require.NoError(t, hook.Stop(context.Background())) })

	b := setup(t)
	events := b.write(t, "d", 3)
	bad := events[1]
	cfg := b.config("w")
	cfg.MaxDeliveries, cfg.DeadLetterHook = 2, hook
	cfg.Projector = failOn(func(ev *outbox.Event, _ bool) error {
		if ev.ID == bad.ID {
			return fmt.Errorf("%w: a poisoned event", worker.ErrRecord)
		}
		return nil
	})
	b.publish(t, events...)
	b.start(t, cfg)
	require.Eventually(t, func() bool { mu.Lock(); defer mu.Unlock(); return len(got) == 1 }, waitFor, 10*time.Millisecond)
	mu.Lock()
	defer mu.Unlock()
	require.Equal(t, 3, calls, "delivered on the third attempt")
	require.Equal(t, bad.ID, got[0].EventID)
	require.Equal(t, outbox.CategoryPoison, got[0].Category)
	require.Equal(t, "projection_failed", got[0].Code)
	require.Equal(t, b.stream, got[0].Stream)
	require.EqualValues(t, 2, got[0].Deliveries)
}
