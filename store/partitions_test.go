package store_test

import (
	"context"
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/outboxd/outboxd/dispatcher"
	"github.com/outboxd/outboxd/internal/stream"
	"github.com/outboxd/outboxd/internal/testkit"
	"github.com/outboxd/outboxd/outbox"
	"github.com/outboxd/outboxd/reconciler"
	"github.com/outboxd/outboxd/store"
	"github.com/outboxd/outboxd/worker"
)

func TestMain(m *testing.M) { testkit.Main(m) }

// TestComponentsRefuseAnotherNumberOfPartitions: a store that records 2
// partitions for a stream (a sidecar `dispatch --partitions 2` started
// first) makes the writer, the worker, the dispatcher and the reconciler of
// a program configured with 1 refuse, naming both numbers, instead of
// writing into or reading from a partition nobody else uses.
func TestComponentsRefuseAnotherNumberOfPartitions(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	st := testkit.NewStore(t)
	rdb, prefix := testkit.NewRedis(t)
	rc, err := stream.NewClient(rdb, nil)
	require.NoError(t, err)
	pg := testkit.NewPostgres(t)
	name := prefix + ":stream"
	require.NoError(t, store.EnsurePartitions(ctx, st, name, 2))

	mismatch := func(t *testing.T, err error) {
		t.Helper()
		require.ErrorIs(t, err, outbox.ErrPartitionsMismatch)
		require.ErrorContains(t, err, "records 2 partitions")
		require.ErrorContains(t, err, "configured with 1")
	}

	t.Run("Writer", func(t *testing.T) {
		w := outbox.NewWriter(st, &outbox.WriterConfig{Stream: name})
		_, err := w.Write(ctx, []outbox.Input{{SourceKey: "s", DeviceKey: "d", OccurredAt: "2026-01-02T03:04:05Z"}})
		mismatch(t, err)
		n, err := st.CountEvents(ctx, store.EventQuery{})
		require.NoError(t, err)
		require.Zero(t, n, "a refused write writes nothing")
	})
	t.Run("Worker", func(t *testing.T) {
		w, err := worker.New(st, rc, pg.Pool, &worker.Config{Stream: name}, testkit.Logger(t))
		require.NoError(t, err)
		mismatch(t, w.Start(ctx))
	})
	t.Run("Dispatcher", func(t *testing.T) {
		d, err := dispatcher.New(st, rc, &dispatcher.Config{Stream: name}, testkit.Logger(t))
		require.NoError(t, err)
		mismatch(t, d.Start(ctx))
	})
	t.Run("Reconciler", func(t *testing.T) {
		r, err := reconciler.New(st, rc, &reconciler.Config{Stream: name}, testkit.Logger(t))
		require.NoError(t, err)
		mismatch(t, r.Start(ctx))
	})
	t.Run("AgreeingNumberStarts", func(t *testing.T) {
		w := outbox.NewWriter(st, &outbox.WriterConfig{Stream: name, Partitions: 2})
		_, err := w.Write(ctx, []outbox.Input{{SourceKey: "s", DeviceKey: "d", OccurredAt: "2026-01-02T03:04:05Z"}})
		require.NoError(t, err)
	})
}
