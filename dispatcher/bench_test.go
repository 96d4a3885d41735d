package dispatcher_test

import (
	"context"
	"fmt"
	"os"
	"strconv"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"
	"github.com/stretchr/testify/require"

	"github.com/outboxd/outboxd/dispatcher"
	"github.com/outboxd/outboxd/internal/testkit"
	"github.com/outboxd/outboxd/outbox"
)

// EnvBenchBacklog overrides the backlog size of BenchmarkRelayBacklog.
const EnvBenchBacklog = "OUTBOXD_BENCH_BACKLOG"

// BenchmarkRelayBacklog builds a backlog of undispatched outbox entries (not
// timed), then times a dispatcher relaying all of it (start to the last
// dispatchedAt), and compares with raw pipelined XADD of the same payloads
// in pipelines of 256: the ratio is the share of Redis's speed the
// dispatcher reaches.
//
// The backlog is 20,000 entries by default; OUTBOXD_BENCH_BACKLOG=100000
// gives the 100k figure. It is seeded in bulk on the SQLite store with the
// records ingest builds (testkit.Seed, not timed).
func BenchmarkRelayBacklog(b *testing.B) {
	n := 20_000
	if v := os.Getenv(EnvBenchBacklog); v != "" {
		var err error
		n, err = strconv.Atoi(v)
		require.NoError(b, err)
	}
	ctx := context.Background()
	for range b.N {
		b.StopTimer()
		st := testkit.NewSQLite(b)
		rdb, prefix := testkit.NewRedis(b)
		stream := prefix + ":stream"
		w := outbox.NewWriter(st, &outbox.WriterConfig{Stream: stream})
		began := time.Now()
		inputs := make([]outbox.Input, n)
		for j := range inputs {
			inputs[j] = outbox.Input{SourceKey: "bench", DeviceKey: fmt.Sprintf("d%d", j), OccurredAt: "2026-11-01T10:00:00Z"}
		}
		seeded := testkit.Seed(b, st, w, inputs)
		b.Logf("backlog of %d entries built in %s", n, time.Since(began).Round(time.Millisecond))

		d, err := dispatcher.New(st, rdb, &dispatcher.Config{Stream: stream}, testkit.Logger(b))
		require.NoError(b, err)
		b.StartTimer()
		began = time.Now()
		require.NoError(b, d.Start(ctx))
		tick := time.NewTicker(2 * time.Millisecond)
		for d.Stats().Dispatched < int64(n) {
			<-tick.C
		}
		relay := time.Since(began)
		b.StopTimer()
		tick.Stop()
		stopCtx, cancel := context.WithTimeout(ctx, 30*time.Second)
		require.NoError(b, d.Stop(stopCtx))
		cancel()
		stats := d.Stats()
		xlen, err := rdb.XLen(ctx, stream).Result()
		require.NoError(b, err)
		require.GreaterOrEqual(b, xlen, int64(n))
		c, err := st.Counts(ctx)
		require.NoError(b, err)
		require.Zero(b, c.Undispatched)

		raw := rawXAdd(b, rdb, prefix+":raw", seeded[0].Message(outbox.OriginOutbox).Encode(), n)

		relayRate := float64(n) / relay.Seconds()
		rawRate := float64(n) / raw.Seconds()
		b.Logf("relayed %d entries in %s (%.0f/s; %d XADDed, %d by catch-up, history lost %d); raw XADD %s (%.0f/s); ratio %.3f",
			n, relay.Round(time.Millisecond), relayRate, stats.Relayed, stats.CaughtUp, stats.HistoryLost, raw.Round(time.Millisecond), rawRate, relayRate/rawRate)
		b.ReportMetric(relayRate, "entries/s")
		b.ReportMetric(rawRate, "xadd-entries/s")
		b.ReportMetric(relayRate/rawRate, "ratio")
	}
}

// rawXAdd adds n entries with payload to stream in pipelines of 256 and
// returns how long it took.
func rawXAdd(b *testing.B, rdb redis.UniversalClient, stream, payload string, n int) time.Duration {
	ctx := context.Background()
	began := time.Now()
	for i := 0; i < n; i += 256 {
		_, err := rdb.Pipelined(ctx, func(p redis.Pipeliner) error {
			for range min(256, n-i) {
				p.XAdd(ctx, &redis.XAddArgs{Stream: stream, Values: []any{outbox.PayloadField, payload}})
			}
			return nil
		})
		require.NoError(b, err)
	}
	return time.Since(began)
}
