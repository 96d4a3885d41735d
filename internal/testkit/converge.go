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
// timeout for the checker of docs/reliability.md to find, for the accepted
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

// Never fails t when condition holds at any poll during waitFor. Unlike
// require.Never it calls condition on the test's own goroutine, one call at
// a time, and returns only after the last call has finished: testify runs
// each call on a goroutine of its own that may still be running when
// Never returns, so a condition that fails t (a require inside a helper)
// or reads a client the test's cleanup closes panics the binary after the
// test has ended.
func Never(t testing.TB, condition func() bool, waitFor, tick time.Duration, msgAndArgs ...any) {
	t.Helper()
	deadline := time.Now().Add(waitFor)
	for {
		if condition() {
			require.Fail(t, "condition satisfied", msgAndArgs...)
		}
		if time.Now().After(deadline) {
			return
		}
		time.Sleep(tick)
	}
}
