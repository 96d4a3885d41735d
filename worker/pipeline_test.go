package worker_test

import (
	"context"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgxpool"
	"github.com/prometheus/client_golang/prometheus"
	"github.com/stretchr/testify/require"

	"github.com/outboxd/outboxd/internal/readmodel"
	"github.com/outboxd/outboxd/internal/testkit"
	"github.com/outboxd/outboxd/outbox"
	"github.com/outboxd/outboxd/worker"
)

// onePool returns a pool of one connection on b's database, in pgx's query
// mode mode: a test of it sees every transaction go through that
// connection, and NewConnsCount tells whether one was lost on the way.
func (b *testBundle) onePool(t *testing.T, mode pgx.QueryExecMode) *pgxpool.Pool {
	t.Helper()
	return b.pg.PoolWith(t, func(cfg *pgxpool.Config) {
		cfg.MaxConns, cfg.MinConns = 1, 0
		cfg.ConnConfig.DefaultQueryExecMode = mode
	})
}

// TestWorkerPipelinedTransaction: the default projector is a
// PipelinedProjector, so the worker sends each projection transaction as
// one pipeline (BEGIN and its timeouts, the projection, COMMIT). A
// statement that fails aborts the transaction, which the worker rolls back:
// nothing of it stays, the failure is judged as it would be in a pgx.Tx,
// and the connection goes back to the pool (a pool of one connection opens
// no other).
func TestWorkerPipelinedTransaction(t *testing.T) {
	t.Parallel()
	ctx := context.Background()

	t.Run("RecordFailureRolledBack", func(t *testing.T) {
		t.Parallel()
		b := setup(t)
		reg := prometheus.NewRegistry()
		good := b.write(t, "d1", 5)
		// Valid JSON that PostgreSQL's jsonb refuses (22P05: \u0000 cannot
		// be converted to text): the record fails in the database, after
		// BEGIN, inside the pipeline. Ingest refuses such payloads; the
		// store takes it as written.
		broken := *good[0]
		broken.ID, broken.IdempotencyKey, broken.Payload = outbox.NewEventID(), "nul", []byte(`{"note":"a\u0000b"}`)
		require.NoError(t, b.st.WriteTx(ctx, func(ctx context.Context, tx outbox.Tx) error {
			return tx.InsertEvents(ctx, []outbox.Event{broken})
		}))
		pool := b.onePool(t, pgx.QueryExecModeCacheStatement)
		cfg := b.config("c")
		cfg.MaxDeliveries, cfg.RecordBackoff, cfg.Registerer = 2, 20*time.Millisecond, reg
		b.publish(t, append(good, &broken)...)
		b.startOn(t, pool, cfg)
		requireDeadLetter(t, reg, b.waitDeadLetters(t, 1)[0], broken.ID, outbox.CategoryPoison, "postgres_22P05", 2)
		b.events, b.parked = good, 1
		b.check(t)
		require.Equal(t, int64(1), pool.Stat().NewConnsCount(), "the failed transactions were rolled back on their connection, not dropped with it")
	})

	// A pooler or a hook that deallocates the connection's prepared
	// statements between two transactions: the next transaction fails with
	// 26000, an infrastructure failure charged to no record; the worker
	// closes that connection and the retry prepares them on a new one. The
	// same for the pipeline's statements and for those pgx caches for a
	// pgx.Tx (a custom projector).
	for name, projector := range map[string]worker.Projector{
		"Pipelined": readmodel.NewProjector(),
		"Tx": worker.ProjectorFunc(func(ctx context.Context, tx pgx.Tx, events []*outbox.Event) error {
			return readmodel.NewProjector().Project(ctx, tx, events)
		}),
	} {
		t.Run("PreparedStatementsGone/"+name, func(t *testing.T) {
			t.Parallel()
			b := setup(t)
			reg := prometheus.NewRegistry()
			pool := b.onePool(t, pgx.QueryExecModeCacheStatement)
			cfg := b.config("c")
			cfg.Registerer, cfg.MaxDeliveries, cfg.Projector = reg, 1, projector
			first := b.write(t, "d1", 3)
			b.publish(t, first...)
			b.startOn(t, pool, cfg)
			b.events = first
			b.waitConverged(t)
			_, err := pool.Exec(ctx, "DEALLOCATE ALL", pgx.QueryExecModeSimpleProtocol)
			require.NoError(t, err)
			second := b.write(t, "d2", 3)
			b.publish(t, second...)
			b.events = append(first, second...)
			b.waitConverged(t)
			b.check(t)
			require.Zero(t, b.rdb.XLen(ctx, b.keys().DLQ()).Val(), "nothing charged to the records")
			require.Equal(t, int64(2), pool.Stat().NewConnsCount(), "the reset connection closed, one new")
			require.Equal(t, 1.0, testkit.Metric(t, reg, "outboxd_worker_retries_total", "reason", "infrastructure"))
		})
	}

	// In every query mode of pgx: the cache modes pipeline the transaction
	// (preparing its statements inside a transaction first, so that a lock
	// held elsewhere meets the timeouts there too), the others, chosen for
	// a connection pooler, run it as a pgx.Tx.
	for _, mode := range []pgx.QueryExecMode{pgx.QueryExecModeCacheStatement, pgx.QueryExecModeCacheDescribe,
		pgx.QueryExecModeDescribeExec, pgx.QueryExecModeExec, pgx.QueryExecModeSimpleProtocol} {
		t.Run("TimeoutsStayInTheTransaction/"+mode.String(), func(t *testing.T) {
			t.Parallel()
			b := setup(t)
			reg := prometheus.NewRegistry()
			pool := b.onePool(t, mode)
			cfg := b.config("c")
			cfg.Registerer, cfg.LockTimeout, cfg.StatementTimeout = reg, worker.TimeoutOff, 100*time.Millisecond
			// Another transaction holds the events table: with no
			// lock_timeout the projection waits until statement_timeout
			// ends it.
			locker, err := b.pg.Pool.Begin(ctx)
			require.NoError(t, err)
			defer func() { _ = locker.Rollback(ctx) }()
			_, err = locker.Exec(ctx, `LOCK TABLE events IN EXCLUSIVE MODE`)
			require.NoError(t, err)
			b.publish(t, b.write(t, "d", 2)...)
			b.startOn(t, pool, cfg)
			require.Eventually(t, func() bool {
				return testkit.Metric(t, reg, "outboxd_worker_pg_timeouts_total", "kind", "statement") >= 1
			}, waitFor, 10*time.Millisecond)
			require.NoError(t, locker.Commit(ctx))
			b.waitConverged(t)
			var lock, statement string
			require.NoError(t, pool.QueryRow(ctx, `SELECT current_setting('lock_timeout'), current_setting('statement_timeout')`).Scan(&lock, &statement))
			require.Equal(t, [2]string{"0", "0"}, [2]string{lock, statement}, "SET LOCAL: the connection keeps the server's settings")
			require.Equal(t, int64(1), pool.Stat().NewConnsCount())
			require.Zero(t, b.rdb.XLen(ctx, b.keys().DLQ()).Val())
		})
	}
}
