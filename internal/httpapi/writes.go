package httpapi

import (
	"context"
	"errors"
	"fmt"
	"sync/atomic"
	"time"

	"github.com/outboxd/outboxd/internal/stream"
	"github.com/outboxd/outboxd/store"
)

// ErrRefusingWrites is the error of a readiness check while its backend
// answers but refuses writes: the store refused ingest's last write (disk
// full, read-only, unavailable), or Redis is at its maxmemory
// (stream.ErrFull). GET /readyz shows such a check as "refusing writes".
var ErrRefusingWrites = errors.New("refusing writes")

// Results of a readiness check in the body of GET /readyz.
const (
	readyOK        = "ok"
	readyDown      = "unavailable"
	readyRefusing  = "refusing writes"
	readyStoreName = "store"
)

// readyResult is what GET /readyz shows for a check that returned err.
func readyResult(err error) string {
	switch {
	case err == nil:
		return readyOK
	case errors.Is(err, ErrRefusingWrites), errors.Is(err, stream.ErrFull):
		return readyRefusing
	}
	return readyDown
}

// writeHealth is what ingest learned of the store's writes from its own:
// a write the store refused (store.IsUnavailable: disk full, read-only,
// locked, unreachable) makes the instance not ready ("store: refusing
// writes") until a write succeeds, or for hold at most. The hold (the
// Retry-After of the 503s, Config.RetryAfter) lets traffic come back to an
// instance that a load balancer took out of rotation: the first write
// then tells again, so readiness needs no write of its own.
type writeHealth struct {
	hold time.Duration
	// refusedAt is when the last write was refused (unix ns), 0 once a
	// write succeeded.
	refusedAt atomic.Int64
}

// record notes the outcome of one ingest write; errors of the request (a
// bad body, a reused key, the client gone) tell nothing of the store.
func (w *writeHealth) record(err error) {
	switch {
	case w == nil:
	case err == nil:
		w.refusedAt.Store(0)
	case store.IsUnavailable(err):
		w.refusedAt.Store(time.Now().UnixNano())
	}
}

// check is the readiness of ingest's writes: an error wrapping
// ErrRefusingWrites while the last write was refused, within hold.
func (w *writeHealth) check(context.Context) error {
	at := w.refusedAt.Load()
	if at == 0 {
		return nil
	}
	if ago := time.Since(time.Unix(0, at)); ago < w.hold {
		return fmt.Errorf("%w: the store refused ingest's last write %s ago", ErrRefusingWrites, ago.Round(time.Millisecond))
	}
	return nil
}
