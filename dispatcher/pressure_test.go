package dispatcher_test

import (
	"context"
	"fmt"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/stretchr/testify/require"

	"github.com/outboxd/outboxd/dispatcher"
	"github.com/outboxd/outboxd/internal/stream"
	"github.com/outboxd/outboxd/internal/testkit"
)

// TestBackpressure runs the pipeline on a Redis of the test's own with a
// maxmemory that the stream fills (noeviction): ingest goes on answering,
// the relay holds and says so (nothing marked or checkpointed), the worker
// goes on acknowledging, the leader's trim frees memory, and the pipeline
// drains by itself, without an operator; once memory is raised everything
// converges.
func TestBackpressure(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	b, d, reg := fillRedis(t)

	second := b.write(1500, 500)           // ingest does not need Redis
	second = append(second, b.postEvent()) // nor does the HTTP API

	held := b.state()
	testkit.Never(t, func() bool { return b.undispatched() < int64(len(second)) }, 500*time.Millisecond, 20*time.Millisecond,
		"nothing is marked dispatched while the relay holds")
	require.Equal(t, held.Position, b.state().Position, "the checkpoint is held")
	require.NotEmpty(t, d.Backpressure())
	require.Equal(t, 0.0, testkit.Metric(t, reg, "outboxd_dispatcher_breaker_state"), "a full Redis does not open the circuit")

	// The worker drains the stream; the trim frees memory; the relay
	// resumes by itself.
	p := b.startWorker()
	b.requireConverged(p) // (the stream is trimmed: the store and the read model tell)
	// (One condition: Redis's client buffers count in used_memory, so on a
	// loaded machine the hold may come back for a moment after the drain.)
	require.Eventually(t, func() bool {
		return d.Backpressure() == "" && testkit.Metric(t, reg, "outboxd_dispatcher_backpressure") == 0
	}, 10*time.Second, 5*time.Millisecond)
	require.Positive(t, testkit.Metric(t, reg, "outboxd_stream_trimmed_total"))
	require.Positive(t, d.Stats().Trimmed)
	require.Equal(t, 0.0, testkit.Metric(t, reg, "outboxd_retries_halted", "component", "dispatcher", "class", "infrastructure"))

	// Memory raised: more events flow at once.
	require.NoError(t, b.rdb.ConfigSet(ctx, "maxmemory", "0").Err())
	b.write(100, 50)
	b.requireConverged(p)
	require.Eventually(t, func() bool {
		return testkit.Metric(t, reg, "outboxd_stream_lag", "group", stream.GroupDefault) == 0
	}, 10*time.Second, 5*time.Millisecond)
}

// TestStandbyExportsNoLeaderFigures stops a dispatcher while Redis is
// full, and one whose retries the streak rule halted, and whose breaker
// opened, while Redis was down: a dispatcher that no longer leads holds
// nothing, retries nothing and exports none of the leader's figures
// (backpressure, Redis's memory, the groups' lag, the streak rule's run and
// halts, the breaker's state), so /v1/status and the
// alerts of a standby do not go on saying what only the new leader can
// tell. (A lease lost under load, before this, left a standby's
// backpressure at 1.)
func TestStandbyExportsNoLeaderFigures(t *testing.T) {
	t.Parallel()
	t.Run("Backpressure", func(t *testing.T) {
		t.Parallel()
		_, d, reg := fillRedis(t)
		require.Eventually(t, func() bool {
			return testkit.Metric(t, reg, "outboxd_stream_lag", "group", stream.GroupDefault) > 0
		}, 10*time.Second, 5*time.Millisecond)

		require.NoError(t, d.Stop(context.Background()))
		require.Empty(t, d.Backpressure())
		require.Equal(t, 0.0, testkit.Metric(t, reg, "outboxd_dispatcher_backpressure"))
		require.Equal(t, 0.0, testkit.Metric(t, reg, "outboxd_redis_used_memory_bytes"))
		require.Equal(t, 0.0, testkit.Metric(t, reg, "outboxd_redis_maxmemory_bytes"))
		require.Zero(t, testkit.Series(t, reg, "outboxd_stream_lag"), "a standby exports no lag")
	})

	t.Run("RetriesHaltedBreakerOpen", func(t *testing.T) {
		t.Parallel()
		srv := testkit.NewRedisServer(t)
		b := setup(t, &setupOpts{redis: srv.Client()})
		reg := prometheus.NewRegistry()
		cfg := b.config()
		cfg.Registerer, cfg.StreakLimit = reg, 2
		d := b.start(cfg)
		halted := func() float64 {
			return testkit.Metric(t, reg, "outboxd_retries_halted", "component", "dispatcher", "class", "infrastructure")
		}
		srv.Stop()
		b.write(5, 5)
		require.Eventually(t, func() bool {
			return halted() == 1 && testkit.Metric(t, reg, "outboxd_dispatcher_breaker_state") == breakerOpen
		}, 10*time.Second, 5*time.Millisecond)
		require.Positive(t, testkit.Metric(t, reg, "outboxd_error_streak", "component", "dispatcher"))

		require.NoError(t, d.Stop(context.Background()))
		require.Zero(t, halted())
		require.Zero(t, testkit.Series(t, reg, "outboxd_error_streak"), "a standby has no run")
		require.Equal(t, breakerClosed, testkit.Metric(t, reg, "outboxd_dispatcher_breaker_state"), "nor a breaker in use")
	})
}

// fillRedis starts a dispatcher on a Redis of the test's own (trimming
// every 20 ms), relays 4,000 events, then sets Redis's maxmemory to what
// it uses, and returns once the relay holds (outboxd_dispatcher_backpressure
// = 1, Redis's memory exported). The consumer groups exist before Redis
// fills (XGROUP CREATE is refused over maxmemory; a worker that starts then
// finds them); none has read anything.
func fillRedis(t *testing.T) (*testBundle, *dispatcher.Dispatcher, *prometheus.Registry) {
	t.Helper()
	ctx := context.Background()
	srv := testkit.NewRedisServer(t)
	b := setup(t, &setupOpts{redis: srv.Client()})
	keys := stream.NewKeys(b.stream, stream.GroupDefault)
	for _, k := range []stream.Keys{keys, keys.ReplayLane()} {
		require.NoError(t, b.rdb.XGroupCreateMkStream(ctx, k.Stream(), k.Group(), "0").Err())
	}
	reg := prometheus.NewRegistry()
	cfg := b.config()
	cfg.Registerer, cfg.TrimInterval, cfg.StreamRetention = reg, 20*time.Millisecond, time.Millisecond
	d := b.start(cfg)

	b.write(4000, 500)
	b.waitDispatched(30 * time.Second)
	mem, err := b.rc.Memory(ctx)
	require.NoError(t, err)
	require.NoError(t, b.rdb.ConfigSet(ctx, "maxmemory", fmt.Sprint(mem.Used)).Err())
	require.Eventually(t, func() bool { return d.Backpressure() != "" }, 10*time.Second, 5*time.Millisecond)
	require.Equal(t, 1.0, testkit.Metric(t, reg, "outboxd_dispatcher_backpressure"))
	require.Positive(t, testkit.Metric(t, reg, "outboxd_redis_maxmemory_bytes"))
	require.Positive(t, testkit.Metric(t, reg, "outboxd_redis_used_memory_bytes"))
	return b, d, reg
}
