package reconciler_test

import (
	"context"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/outboxd/outboxd/outbox"
	"github.com/outboxd/outboxd/reconciler"
	"github.com/outboxd/outboxd/store"
)

// TestRequeueCap: an original that never reaches syncedAt is re-published
// MaxRequeues times, then parked as requeue_exhausted and counted; an
// operator's redrive gives it a fresh budget.
func TestRequeueCap(t *testing.T) {
	t.Parallel()
	ctx := context.Background()

	t.Run("ParksAfterMaxRequeues", func(t *testing.T) {
		t.Parallel()
		b := setup(t)
		cfg := b.config()
		cfg.MaxRequeues = 2
		r := b.reconciler(t, cfg)
		ids := b.writeAged(t, 2)
		b.markSynced(t, ids[1], t0) // the other one keeps failing downstream
		for i := range 2 {
			rep, err := r.Sweep(ctx)
			require.NoError(t, err)
			require.Equal(t, 1, rep.Published, "requeue %d", i+1)
			require.Zero(t, rep.Exhausted)
			b.clock.Advance(requeueAfter + time.Second)
		}
		rep, err := r.Sweep(ctx)
		require.NoError(t, err)
		require.Zero(t, rep.Published)
		require.Equal(t, 1, rep.Exhausted)
		require.False(t, rep.Failed(), "parking is not a failure of the sweep")
		require.Equal(t, int64(1), rep.Failures[store.CategoryRequeueExhausted])
		require.Contains(t, rep.String(), "parked as requeue_exhausted 1")

		ev := b.event(t, ids[0])
		require.Equal(t, outbox.StateFailed, ev.State())
		require.Equal(t, store.CategoryRequeueExhausted, ev.SyncFailure.Category)
		require.Equal(t, int64(2), ev.RequeueCount, "requeueCount counts publishes: the parking claim is undone")
		require.Len(t, b.published(t), 2)
		require.Equal(t, float64(1), b.metric(t, "outboxd_reconciler_requeue_exhausted_total"))
		require.Equal(t, float64(2), b.metric(t, "outboxd_reconciler_max_requeues"))
		count, sum := b.histogram(t, "outboxd_reconciler_requeue_count")
		require.Equal(t, uint64(2), count)
		require.Equal(t, float64(1+2), sum, "the first requeue observes 1, the second 2")

		b.clock.Advance(requeueAfter + time.Second)
		rep, err = r.Sweep(ctx)
		require.NoError(t, err)
		require.Zero(t, rep.Scanned, "a parked original is no candidate")

		// The operator redrives it: pending again, with a fresh budget.
		n, err := b.st.Redrive(ctx, ids[:1])
		require.NoError(t, err)
		require.Equal(t, int64(1), n)
		rep, err = r.Sweep(ctx)
		require.NoError(t, err)
		require.Equal(t, 1, rep.Published)
		require.Equal(t, int64(1), b.event(t, ids[0]).RequeueCount)
	})

	t.Run("InvalidMaxRequeues", func(t *testing.T) {
		t.Parallel()
		b := setup(t)
		_, err := reconciler.New(b.st, b.rdb, &reconciler.Config{MaxRequeues: -1}, nil)
		require.ErrorContains(t, err, "MaxRequeues")
	})
}

// TestSweepRecorded: the end of the last sweep is the store's sweep mark,
// where the status of any process reads it, written by the service after
// each sweep and by RecordSweep after a single one, whoever holds the
// lease.
func TestSweepRecorded(t *testing.T) {
	t.Parallel()
	ctx := context.Background()

	t.Run("OneSweep", func(t *testing.T) {
		t.Parallel()
		b := setup(t)
		r := b.reconciler(t, nil)
		_, err := r.Sweep(ctx)
		require.NoError(t, err)
		require.NoError(t, r.RecordSweep(ctx))
		at, err := store.LastSweep(ctx, b.st, b.stream)
		require.NoError(t, err)
		require.NotNil(t, at)
		require.True(t, b.clock.Now().Equal(*at))
		ls, err := b.st.ReadLease(ctx, reconciler.LeaseName(b.stream))
		require.NoError(t, err)
		require.Nil(t, ls, "no lease taken to record")

		// While another replica holds the lease, a later sweep still
		// records.
		other, err := b.st.AcquireLease(ctx, reconciler.LeaseName(b.stream), "other", b.clock.Now(), time.Hour)
		require.NoError(t, err)
		require.True(t, other.Held())
		b.clock.Advance(time.Second)
		require.NoError(t, r.RecordSweep(ctx))
		at, err = store.LastSweep(ctx, b.st, b.stream)
		require.NoError(t, err)
		require.True(t, b.clock.Now().Equal(*at))
	})

	t.Run("Service", func(t *testing.T) {
		t.Parallel()
		b := setup(t)
		cfg := b.config()
		cfg.Every, cfg.LeaseTTL = 10*time.Millisecond, 300*time.Millisecond
		r := b.reconciler(t, cfg)
		require.NoError(t, r.Start(ctx))
		defer r.Stop(ctx) //nolint:errcheck
		require.Eventually(t, func() bool {
			at, err := store.LastSweep(ctx, b.st, b.stream)
			return err == nil && at != nil
		}, 5*time.Second, 10*time.Millisecond)
	})
}
