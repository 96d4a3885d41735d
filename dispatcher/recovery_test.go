package dispatcher_test

import (
	"context"
	"os"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/outboxd/outboxd/internal/stream"
	"github.com/outboxd/outboxd/internal/testkit"
	"github.com/outboxd/outboxd/reconciler"
)

// envRecoveryEvents sets how many events the recovery tests
// (TestRecoveryAfterRedisLostData, TestRecoveryAfterRedisEvicted) lose
// (3,000 by default).
const envRecoveryEvents = "OUTBOXD_RECOVERY_EVENTS"

// recoveryTarget is the recovery target: every accepted event synced within
// 60 s of Redis accepting writes again, with default settings.
const recoveryTarget = 60 * time.Second

// TestRecoveryAfterRedisLostData: 3,000 events relayed and not yet
// consumed are lost with Redis (killed, restarted empty, no persistence).
// The worker that starts recreates the group and records the reset in the
// store; the reconciler, with its default schedule (every minute, min-age
// 5m, 1,000 per sweep), sweeps at once and back to back: every accepted
// event is synced within 60 s of Redis accepting writes again, and the
// checker is clean.
func TestRecoveryAfterRedisLostData(t *testing.T) {
	t.Parallel()
	requireRecovery(t, "lost with Redis (killed, restarted empty)", nil, func(_ *testBundle, srv *testkit.RedisServer) {
		srv.Stop()
		srv.Start() // empty
	})
}

// TestRecoveryAfterRedisEvicted: a Redis with maxmemory-policy allkeys-lru
// (the misconfiguration of item 4) whose maxmemory becomes too small for
// the stream evicts it, consumer group and unread entries with it (Redis's
// own eviction, not a DEL); then its memory is raised. As after a restart
// without persistence, every accepted event is synced within 60 s of Redis
// accepting writes again with the default reconciler, and the checker is
// clean.
func TestRecoveryAfterRedisEvicted(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	var before int64 // used_memory before the load
	evict := func(b *testBundle, _ *testkit.RedisServer) {
		require.NoError(t, b.rdb.ConfigSet(ctx, "maxmemory-policy", "allkeys-lru").Err())
		mem, err := b.rc.Memory(ctx)
		require.NoError(t, err)
		before = mem.Used
	}
	requireRecovery(t, "evicted (allkeys-lru, maxmemory too small)", evict, func(b *testBundle, _ *testkit.RedisServer) {
		mem, err := b.rc.Memory(ctx)
		require.NoError(t, err)
		require.True(t, mem.Evicts(), "the policy the test set: %q", mem.Policy)
		// Room for half the stream: Redis evicts it at its next command.
		require.NoError(t, b.rdb.ConfigSet(ctx, "maxmemory", strconv.FormatInt(before+(mem.Used-before)/2, 10)).Err())
		require.Eventually(t, func() bool { return b.rdb.Exists(ctx, b.stream).Val() == 0 }, 10*time.Second, 10*time.Millisecond,
			"Redis did not evict the stream")
		require.Positive(t, evictedKeys(t, b), "the stream vanished without an eviction")
		require.NoError(t, b.rdb.ConfigSet(ctx, "maxmemory", "0").Err()) // memory raised
	})
}

// requireRecovery runs one loss of Redis's data: n events (3,000, or
// envRecoveryEvents) written, relayed by a dispatcher and not consumed,
// with a reconciler of the default settings running; then lose takes
// Redis's data away and returns once Redis accepts writes again (prepare,
// when set, runs before the load). A worker started then recreates the
// group and records the reset; every accepted event must be synced within
// recoveryTarget, and the checker be clean.
func requireRecovery(t *testing.T, what string, prepare, lose func(*testBundle, *testkit.RedisServer)) {
	t.Helper()
	ctx := context.Background()
	srv := testkit.NewRedisServer(t)
	b := setup(t, &setupOpts{redis: srv.Client()})
	if prepare != nil {
		prepare(b, srv)
	}
	require.NoError(t, b.rdb.XGroupCreateMkStream(ctx, b.stream, stream.GroupDefault, "0").Err())
	b.start(b.config())
	r, err := reconciler.New(b.st, b.rdb, &reconciler.Config{Stream: b.stream}, testkit.Logger(t))
	require.NoError(t, err)
	require.NoError(t, r.Start(ctx))
	t.Cleanup(func() { require.NoError(t, r.Stop(context.Background())) })

	n := 3000
	if v, err := strconv.Atoi(os.Getenv(envRecoveryEvents)); err == nil && v > 0 {
		n = v // the figure of docs/operations.md: 34,000
	}
	b.write(n, 500)
	b.waitDispatched(5 * time.Minute) // relayed, not consumed
	lose(b, srv)
	back := time.Now()
	p := b.startWorker()
	var keys []string
	b.keys.Range(func(k, _ any) bool { keys = append(keys, k.(string)); return true })
	testkit.RequireConverged(t, p, keys, recoveryTarget)
	t.Logf("%d events %s: converged %s after Redis accepted writes again", n, what, time.Since(back).Round(100*time.Millisecond))
	require.Less(t, time.Since(back), recoveryTarget)
}

// evictedKeys returns INFO stats' evicted_keys of the bundle's Redis.
func evictedKeys(t *testing.T, b *testBundle) int64 {
	t.Helper()
	info, err := b.rdb.Info(context.Background(), "stats").Result()
	require.NoError(t, err)
	for line := range strings.SplitSeq(info, "\r\n") {
		if v, ok := strings.CutPrefix(line, "evicted_keys:"); ok {
			n, err := strconv.ParseInt(v, 10, 64)
			require.NoError(t, err)
			return n
		}
	}
	t.Fatal("INFO stats has no evicted_keys")
	return 0
}
