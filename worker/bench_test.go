package worker_test

import (
	"context"
	"fmt"
	"os"
	"strconv"
	"sync"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/redis/go-redis/v9"
	"github.com/stretchr/testify/require"
	"go.uber.org/zap"

	"github.com/outboxd/outboxd/internal/testkit"
	"github.com/outboxd/outboxd/outbox"
	"github.com/outboxd/outboxd/worker"
)

// benchEventsEnv overrides the backlog size of BenchmarkProjectBacklog.
const benchEventsEnv = "OUTBOXD_BENCH_EVENTS"

// benchEventsDefault is the backlog size; OUTBOXD_BENCH_EVENTS=100000 gives
// the 100k figure. The originals are seeded in bulk on the SQLite store
// (testkit.Seed, not timed).
const benchEventsDefault = 20_000

// BenchmarkProjectBacklog measures how fast workers drain a backlog of
// stream entries into PostgreSQL (decode, one store read, one transaction,
// one syncedAt write, one XACK per batch), with 1 and 2 workers, against the
// raw PostgreSQL limit: the default projector's one-statement unnest insert
// of the same rows, without Redis or the store. Run with -benchtime 1x.
func BenchmarkProjectBacklog(b *testing.B) {
	n := benchEventsDefault
	if v, err := strconv.Atoi(os.Getenv(benchEventsEnv)); err == nil && v > 0 {
		n = v
	}
	ctx := context.Background()
	st := testkit.NewSQLite(b)
	rdb, prefix := testkit.NewRedis(b)
	pg := testkit.NewPostgres(b)
	stream := prefix + ":stream"

	// Originals in the store, seeded in bulk with the records ingest builds.
	started := time.Now()
	writer := outbox.NewWriter(st, &outbox.WriterConfig{Stream: stream})
	base := time.Date(2026, 1, 1, 0, 0, 0, 0, time.UTC)
	inputs := make([]outbox.Input, n)
	for j := range inputs {
		inputs[j] = outbox.Input{
			SourceKey: "src", DeviceKey: "d" + strconv.Itoa(j%100),
			OccurredAt: base.Add(time.Duration(j) * time.Minute).Format(time.RFC3339),
			Payload:    []byte(`{"t":21.5,"n":3}`),
		}
	}
	seeded := testkit.Seed(b, st, writer, inputs)
	events := make([]*outbox.Event, len(seeded))
	for i := range seeded {
		events[i] = &seeded[i]
	}
	b.Logf("%d originals written in %s", n, time.Since(started).Round(time.Millisecond))

	// The backlog: one entry per original.
	for i := 0; i < n; i += 1000 {
		_, err := rdb.Pipelined(ctx, func(p redis.Pipeliner) error {
			for _, ev := range events[i:min(i+1000, n)] {
				p.XAdd(ctx, &redis.XAddArgs{Stream: stream, Values: ev.Message(outbox.OriginOutbox).Values()})
			}
			return nil
		})
		require.NoError(b, err)
	}

	reset := func() {
		_, err := pg.Pool.Exec(ctx, "TRUNCATE events, device_daily_stats")
		require.NoError(b, err)
		_, err = st.DB().ExecContext(ctx, "UPDATE events SET synced_at = NULL")
		require.NoError(b, err)
	}
	rows := func() int64 {
		var c int64
		require.NoError(b, pg.Pool.QueryRow(ctx, "SELECT count(*) FROM events").Scan(&c))
		return c
	}
	run := 0
	// drain starts workers on a fresh group (so the whole stream is a
	// backlog) and returns events/s once every row is in and the PEL empty.
	drain := func(workers int) float64 {
		reset()
		run++
		group := fmt.Sprintf("bench-%d", run)
		start := time.Now()
		var ws []*worker.Worker
		for i := range workers {
			w, err := worker.New(st, rdb, pg.Pool, &worker.Config{
				Stream: stream, Group: group, Consumer: fmt.Sprint("c", i), Block: 100 * time.Millisecond,
			}, zap.NewNop())
			require.NoError(b, err)
			require.NoError(b, w.Start(ctx))
			ws = append(ws, w)
		}
		tick := time.NewTicker(2 * time.Millisecond)
		defer tick.Stop()
		for ; ; <-tick.C {
			if rows() == int64(n) {
				p, err := rdb.XPending(ctx, stream, group).Result()
				require.NoError(b, err)
				if p.Count == 0 {
					break
				}
			}
		}
		elapsed := time.Since(start)
		for _, w := range ws {
			require.NoError(b, w.Stop(ctx))
		}
		c, err := st.Counts(ctx)
		require.NoError(b, err)
		require.Zero(b, c.Pending)
		var stats int64
		require.NoError(b, pg.Pool.QueryRow(ctx, "SELECT sum(event_count) FROM device_daily_stats").Scan(&stats))
		require.Equal(b, int64(n), stats)
		return float64(n) / elapsed.Seconds()
	}
	// raw projects the same rows, batches of BatchSizeDefault, with conns
	// connections and nothing else.
	raw := func(conns int) float64 {
		reset()
		p := worker.NewEventsProjector()
		start := time.Now()
		var wg sync.WaitGroup
		for c := range conns {
			wg.Go(func() {
				for i := c * worker.BatchSizeDefault; i < n; i += conns * worker.BatchSizeDefault {
					batch := events[i:min(i+worker.BatchSizeDefault, n)]
					require.NoError(b, pgx.BeginFunc(ctx, pg.Pool, func(tx pgx.Tx) error { return p.Project(ctx, tx, batch) }))
				}
			})
		}
		wg.Wait()
		elapsed := time.Since(start)
		require.Equal(b, int64(n), rows())
		return float64(n) / elapsed.Seconds()
	}

	b.ResetTimer()
	var w1, w2, r1, r2 float64
	for range b.N {
		w1 += drain(1)
		w2 += drain(2)
		r1 += raw(1)
		r2 += raw(2)
	}
	k := float64(b.N)
	b.ReportMetric(w1/k, "events/s_1worker")
	b.ReportMetric(w2/k, "events/s_2workers")
	b.ReportMetric(r1/k, "raw_rows/s_1conn")
	b.ReportMetric(r2/k, "raw_rows/s_2conns")
	b.ReportMetric(w1/r1, "ratio_1worker/raw")
	b.ReportMetric(w2/r2, "ratio_2workers/raw")
	b.ReportMetric(float64(n), "backlog")
}
