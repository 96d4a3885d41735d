package testkit

import (
	"context"
	"sync/atomic"
	"testing"
	"time"

	"github.com/jackc/pgx/v5/pgxpool"
	"github.com/redis/go-redis/v9"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/outboxd/outboxd/store"
)

// Pipeline names what the checker reads: the store (nil when only the
// process under test can reach it), the read model, Redis and the stream
// and group of the run.
type Pipeline struct {
	Store  store.Store
	Pool   *pgxpool.Pool
	Redis  redis.UniversalClient
	Stream string
	Group  string
	// Partitions is the stream's number of partitions (0 or 1: not split).
	Partitions int
}

// RequireConverged is the last step of a fault test: it waits up to
// timeout for the checker of RELIABILITY.md to find, for the accepted
// idempotency keys, nothing lost, duplicated or unexpected, statistics
// equal to the rows, and nothing left over (no pending entry, no
// undispatched outbox entry, no unsynced original), and fails t with the
// last verdict otherwise.
func RequireConverged(t testing.TB, p Pipeline, accepted []string, timeout time.Duration) {
	t.Helper()
	var last atomic.Pointer[string]
	ok := assert.Eventually(t, func() bool {
		v, err := p.Check(context.Background(), accepted)
		s := v.String()
		if err != nil {
			s = err.Error()
		}
		last.Store(&s)
		return err == nil && v.OK()
	}, timeout, 20*time.Millisecond)
	if !ok {
		verdict := "no verdict"
		if s := last.Load(); s != nil {
			verdict = *s
		}
		require.Fail(t, "the pipeline did not converge", "last verdict: %s", verdict)
	}
}
