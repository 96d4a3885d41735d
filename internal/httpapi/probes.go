package httpapi

import (
	"context"
	"net/http"
	"slices"
	"sync"
	"time"

	"go.uber.org/zap"

	"github.com/outboxd/outboxd/internal/clock"
)

// readyTimeout bounds each readiness check, even one whose client does not
// heed its context.
const readyTimeout = 2 * time.Second

func (h *handler) healthz(w http.ResponseWriter, r *http.Request) {
	writeJSON(w, r, http.StatusOK, map[string]string{"status": "ok"})
}

// readyz runs every readiness check at once and answers 200 when all pass,
// 503 with Retry-After otherwise. The answer names each check and says ok,
// unavailable or refusing writes (ErrRefusingWrites); the reason goes to
// the log only: the route is open to anyone who can reach the port. Where
// this handler serves ingest, the check "store" also fails while the store
// refuses ingest's writes (writeHealth), whatever the store's own check
// says.
func (h *handler) readyz(w http.ResponseWriter, r *http.Request) {
	results := make(map[string]string, len(h.cfg.Ready))
	var mu sync.Mutex
	var wg sync.WaitGroup
	ok := true
	checks := h.cfg.Ready
	if h.writes != nil {
		checks = append(slices.Clip(checks), Check{Name: readyStoreName, Func: h.writes.check})
	}
	for _, c := range checks {
		wg.Go(func() {
			_, err := clock.Within(r.Context(), readyTimeout, func(ctx context.Context) (struct{}, error) {
				return struct{}{}, c.Func(ctx)
			})
			mu.Lock()
			defer mu.Unlock()
			if err != nil {
				ok = false
				h.logger.Warn("not ready", zap.String("check", c.Name), zap.Error(err))
			}
			// Two checks of one name (the store's and ingest's writes):
			// the worse result shows, unavailable before refusing writes.
			if prev, seen := results[c.Name]; !seen || prev == readyOK || readyResult(err) == readyDown {
				results[c.Name] = readyResult(err)
			}
		})
	}
	wg.Wait()
	body := map[string]any{"status": "ok", "checks": results}
	if !ok {
		body["status"] = "unavailable"
		w.Header().Set("Retry-After", h.retryAfter)
		writeJSON(w, r, http.StatusServiceUnavailable, body)
		return
	}
	writeJSON(w, r, http.StatusOK, body)
}
