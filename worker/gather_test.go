package worker_test

import (
	"context"
	"sync"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/outboxd/outboxd/internal/fault"
	"github.com/outboxd/outboxd/internal/testkit"
	"github.com/outboxd/outboxd/store"
	"github.com/outboxd/outboxd/worker"
)

// countedSync is a store that records the ids of each MarkSynced call.
type countedSync struct {
	store.Store
	mu    sync.Mutex
	calls [][]string
}

func (c *countedSync) MarkSynced(ctx context.Context, ids []string, at time.Time) (int64, error) {
	c.mu.Lock()
	c.calls = append(c.calls, append([]string(nil), ids...))
	c.mu.Unlock()
	return c.Store.MarkSynced(ctx, ids, at)
}

// sizes returns the number of ids of each MarkSynced call so far.
func (c *countedSync) sizes() []int {
	c.mu.Lock()
	defer c.mu.Unlock()
	out := make([]int, len(c.calls))
	for i, ids := range c.calls {
		out[i] = len(ids)
	}
	return out
}

// TestTailsGathered: under a light load (batches smaller than the batch
// size), the tails of the batches of Config.TailGather are written as
// one: one MarkSynced and one XACK for all, syncedAt always before the
// XACK, and a stop or a crash loses nothing.
func TestTailsGathered(t *testing.T) {
	t.Parallel()

	// trickle publishes n events one at a time, each once the one before
	// is projected (so that each is a batch of its own), checking meanwhile
	// that no entry is acknowledged before its original is synced.
	trickle := func(t *testing.T, b *testBundle, n int) {
		t.Helper()
		for i := 1; i <= n; i++ {
			b.publish(t, b.write(t, "d1", 1)...)
			require.Eventually(t, func() bool {
				rows, _ := b.rows(t)
				acked := b.entriesRead(t) - b.pending(t)
				synced := int64(len(b.events)) - b.unsynced(t)
				require.LessOrEqual(t, acked, synced, "an entry acknowledged before its syncedAt")
				return rows == int64(i)
			}, waitFor, 2*time.Millisecond)
		}
	}
	config := func(b *testBundle, gather time.Duration) *worker.Config {
		cfg := b.config("c")
		cfg.TailGather, cfg.ClaimIdle = gather, time.Minute
		return cfg
	}

	t.Run("SmallBatchesMarkedOnce", func(t *testing.T) {
		t.Parallel()
		st := &countedSync{Store: testkit.NewStore(t)}
		rdb, prefix := testkit.NewRedis(t)
		b := setupOn(t, st, rdb, prefix)
		b.start(t, config(b, worker.TailGatherMax))
		trickle(t, b, 5)
		b.waitConverged(t)
		sizes := st.sizes()
		require.Less(t, len(sizes), 5, "fewer writes of syncedAt than batches: %v", sizes)
		total := 0
		for _, n := range sizes {
			total += n
		}
		require.Equal(t, 5, total, "each original marked once: %v", sizes)
	})

	// Without the gather every batch writes its own tail.
	t.Run("OffWritesEachBatch", func(t *testing.T) {
		t.Parallel()
		st := &countedSync{Store: testkit.NewStore(t)}
		rdb, prefix := testkit.NewRedis(t)
		b := setupOn(t, st, rdb, prefix)
		b.start(t, config(b, -1))
		trickle(t, b, 3)
		b.waitConverged(t)
		require.Equal(t, []int{1, 1, 1}, st.sizes())
	})

	// A stop writes the gathered tails at once.
	t.Run("StopWritesGathered", func(t *testing.T) {
		t.Parallel()
		b := setup(t)
		w, err := worker.New(b.st, b.rdb, b.pg.Pool, config(b, worker.TailGatherMax), testkit.Logger(t))
		require.NoError(t, err)
		require.NoError(t, w.Start(context.Background()))
		trickle(t, b, 2)
		started := time.Now()
		require.NoError(t, w.Stop(context.Background()))
		require.Less(t, time.Since(started), worker.TailGatherMax, "the stop did not wait out the gather")
		require.Zero(t, b.unsynced(t))
		require.Zero(t, b.pending(t))
		b.check(t)
	})

	// A crash between the gathered syncedAt and the XACK leaves every
	// gathered entry pending and synced; the restart acknowledges them and
	// projects nothing twice.
	t.Run("CrashAfterSyncedAt", func(t *testing.T) {
		t.Parallel()
		b := setup(t)
		faults := &fault.Set{}
		faults.Arm(worker.FaultAfterSyncedAt, 1)
		cfg := config(b, worker.TailGatherMax)
		worker.SetFaults(cfg, faults)
		w, err := worker.New(b.st, b.rdb, b.pg.Pool, cfg, testkit.Logger(t))
		require.NoError(t, err)
		require.NoError(t, w.Start(context.Background()))
		trickle(t, b, 3)
		select {
		case <-w.Stopped():
		case <-time.After(waitFor):
			t.Fatal("fault point did not stop the worker")
		}
		require.ErrorIs(t, w.Err(), fault.ErrInjected)
		require.Zero(t, b.unsynced(t), "the gathered syncedAt written")
		require.Equal(t, int64(3), b.pending(t), "no gathered entry acknowledged")

		b.start(t, config(b, worker.TailGatherMax)) // same name: drains its own PEL
		b.waitConverged(t)
	})

	t.Run("TooLong", func(t *testing.T) {
		t.Parallel()
		b := setup(t)
		cfg := config(b, worker.TailGatherMax+time.Millisecond)
		_, err := worker.New(b.st, b.rdb, b.pg.Pool, cfg, testkit.Logger(t))
		require.ErrorContains(t, err, "TailGather")
	})
}
