package httpapi

import (
	"context"
	"net/http"
	"sync"
	"time"

	"go.uber.org/zap"
)

// readyTimeout bounds each readiness check, even one whose client does not
// heed its context.
const readyTimeout = 2 * time.Second

func (h *handler) healthz(w http.ResponseWriter, r *http.Request) {
	writeJSON(w, r, http.StatusOK, map[string]string{"status": "ok"})
}

// readyz runs every readiness check at once and answers 200 when all pass,
// 503 with Retry-After otherwise. The answer names each check and says ok
// or unavailable; the reason goes to the log only: the route is open to
// anyone who can reach the port.
func (h *handler) readyz(w http.ResponseWriter, r *http.Request) {
	results := make(map[string]string, len(h.cfg.Ready))
	var mu sync.Mutex
	var wg sync.WaitGroup
	ok := true
	for _, c := range h.cfg.Ready {
		wg.Go(func() {
			_, err := within(r.Context(), readyTimeout, func(ctx context.Context) (struct{}, error) {
				return struct{}{}, c.Func(ctx)
			})
			mu.Lock()
			defer mu.Unlock()
			if err != nil {
				ok = false
				results[c.Name] = "unavailable"
				h.logger.Warn("not ready", zap.String("check", c.Name), zap.Error(err))
				return
			}
			results[c.Name] = "ok"
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
