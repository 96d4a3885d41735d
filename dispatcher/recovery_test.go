package dispatcher_test

import (
	"context"
	"os"
	"strconv"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/outboxd/outboxd/internal/testkit"
	"github.com/outboxd/outboxd/reconciler"
	"github.com/outboxd/outboxd/stream"
)

// envRecoveryEvents sets how many events TestRecoveryAfterRedisLostData
// loses (3,000 by default).
const envRecoveryEvents = "OUTBOXD_RECOVERY_EVENTS"

// TestRecoveryAfterRedisLostData: 3,000 events relayed and not yet
// consumed are lost with Redis (killed, restarted empty, no persistence).
// The worker that starts recreates the group and records the reset in the
// store; the reconciler, with its default schedule (every minute, min-age
// 5m, 1,000 per sweep), sweeps at once and back to back: every accepted
// event is synced within 60 s of Redis accepting writes again, and the
// checker is clean.
func TestRecoveryAfterRedisLostData(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	srv := testkit.NewRedisServer(t)
	b := setup(t, &setupOpts{redis: srv.Client()})
	require.NoError(t, b.rdb.XGroupCreateMkStream(ctx, b.stream, stream.GroupDefault, "0").Err())
	b.start(b.config())
	r, err := reconciler.New(b.st, b.rc, &reconciler.Config{Stream: b.stream}, testkit.Logger(t))
	require.NoError(t, err)
	require.NoError(t, r.Start(ctx))
	t.Cleanup(func() { require.NoError(t, r.Stop(context.Background())) })

	n := 3000
	if v, err := strconv.Atoi(os.Getenv(envRecoveryEvents)); err == nil && v > 0 {
		n = v // the figure of docs/operations.md: 34,000
	}
	b.write(n, 500)
	b.waitDispatched(5 * time.Minute) // relayed, not consumed
	srv.Stop()
	srv.Start() // empty
	back := time.Now()
	p := b.startWorker()
	var keys []string
	b.keys.Range(func(k, _ any) bool { keys = append(keys, k.(string)); return true })
	testkit.RequireConverged(t, p, keys, 60*time.Second)
	t.Logf("%d events lost: converged %s after Redis came back empty", n, time.Since(back).Round(100*time.Millisecond))
	require.Less(t, time.Since(back), 60*time.Second)
}
