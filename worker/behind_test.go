package worker_test

import (
	"context"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/stretchr/testify/require"

	"github.com/outboxd/outboxd/internal/fault"
	"github.com/outboxd/outboxd/internal/testkit"
	"github.com/outboxd/outboxd/store"
	"github.com/outboxd/outboxd/worker"
)

// gatedSync is a store whose first MarkSynced waits until release is
// closed (or its context ends) before it writes.
type gatedSync struct {
	store.Store
	release chan struct{}
	called  atomic.Bool
	waiting chan struct{} // closed when the first MarkSynced waits
}

func (g *gatedSync) MarkSynced(ctx context.Context, ids []string, at time.Time) (int64, error) {
	if g.called.CompareAndSwap(false, true) {
		close(g.waiting)
		select {
		case <-g.release:
		case <-ctx.Done():
			return 0, ctx.Err()
		}
	}
	return g.Store.MarkSynced(ctx, ids, at)
}

// TestTailWrittenBehind: with a backlog, a batch's syncedAt and XACK are
// written while the next batch's PostgreSQL transaction runs, one tail at
// a time, and nothing is lost or counted twice.
func TestTailWrittenBehind(t *testing.T) {
	t.Parallel()

	t.Run("NextBatchProjectsWhileSyncedAtWaits", func(t *testing.T) {
		t.Parallel()
		gate := &gatedSync{Store: testkit.NewStore(t), release: make(chan struct{}), waiting: make(chan struct{})}
		rdb, prefix := testkit.NewRedis(t)
		b := setupOn(t, gate, rdb, prefix)
		b.publish(t, b.write(t, "d1", 40)...)
		cfg := b.config("c")
		cfg.BatchSize = 10
		b.start(t, cfg)
		var once sync.Once
		release := func() { once.Do(func() { close(gate.release) }) }
		t.Cleanup(release) // before the worker stops, if an assertion failed

		select {
		case <-gate.waiting:
		case <-time.After(waitFor):
			t.Fatal("the first batch's syncedAt was never written")
		}
		// The first batch's syncedAt waits; the second batch is projected
		// meanwhile, and the third waits for the first tail (one behind).
		require.Eventually(t, func() bool { rows, _ := b.rows(t); return rows == 20 }, waitFor, 5*time.Millisecond)
		require.Equal(t, int64(40), b.unsynced(t), "no syncedAt before the first tail's")
		require.Equal(t, b.entriesRead(t), b.pending(t), "no XACK before the first tail's")
		release()
		b.waitConverged(t)
	})

	// The last full batch's tail is written behind a read-ahead that finds
	// nothing: the worker settles it (its counts, its holds) before it
	// waits Block for new entries, not after.
	t.Run("LastTailSettledBeforeWaiting", func(t *testing.T) {
		t.Parallel()
		b := setup(t)
		reg := prometheus.NewRegistry()
		b.publish(t, b.write(t, "d1", 30)...)
		cfg := b.config("c")
		cfg.BatchSize, cfg.Block, cfg.Registerer = 10, 30*time.Second, reg
		w, err := worker.New(b.st, b.rdb, b.pg.Pool, cfg, testkit.Logger(t))
		require.NoError(t, err)
		require.NoError(t, w.Start(context.Background()))
		require.Eventually(t, func() bool {
			return testkit.Metric(t, reg, "outboxd_worker_processed_total", "result", "synced") == 30
		}, 10*time.Second, 5*time.Millisecond, "the last batch counted while the worker waits for entries")
		require.Zero(t, b.unsynced(t))
		require.Zero(t, b.pending(t))

		// A stop waits for the read in progress: new entries end it.
		stopped := make(chan error, 1)
		go func() { stopped <- w.Stop(context.Background()) }()
		require.Eventually(t, func() bool {
			b.publish(t, b.write(t, "d1", 1)...)
			select {
			case err := <-stopped:
				require.NoError(t, err)
				return true
			default:
				return false
			}
		}, waitFor, 50*time.Millisecond)
	})

	t.Run("FailedTailBehindStopsTheWorker", func(t *testing.T) {
		t.Parallel()
		b := setup(t)
		b.publish(t, b.write(t, "d1", 40)...)
		faults := &fault.Set{}
		faults.Arm(worker.FaultAfterSyncedAt, 1)
		cfg := b.config("crashing")
		cfg.BatchSize = 10
		worker.SetFaults(cfg, faults)
		w, err := worker.New(b.st, b.rdb, b.pg.Pool, cfg, testkit.Logger(t))
		require.NoError(t, err)
		require.NoError(t, w.Start(context.Background()))
		select {
		case <-w.Stopped():
		case <-time.After(waitFor):
			t.Fatal("a fault in the tail behind did not stop the worker")
		}
		require.ErrorIs(t, w.Err(), fault.ErrInjected)
		require.NoError(t, w.Stop(context.Background()))
		// The first batch is synced and not acknowledged; the one after it
		// was projected behind it (the loop learns of the failure when it
		// waits for the tail, after the next PostgreSQL transaction), and
		// nothing was acknowledged.
		rows, stats := b.rows(t)
		require.Equal(t, int64(20), rows)
		require.Equal(t, rows, stats)
		require.Equal(t, int64(30), b.unsynced(t))
		require.Equal(t, b.entriesRead(t), b.pending(t), "every entry read is still pending")

		cfg = b.config("crashing") // same name: drains its own PEL
		cfg.BatchSize = 10
		b.start(t, cfg)
		b.waitConverged(t)
	})
}

// entriesRead is how many entries of the stream the group has read.
func (b *testBundle) entriesRead(t *testing.T) int64 {
	t.Helper()
	groups, err := b.rdb.XInfoGroups(context.Background(), b.stream).Result()
	require.NoError(t, err)
	require.Len(t, groups, 1)
	return groups[0].EntriesRead
}
