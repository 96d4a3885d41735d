package store_test

import (
	"context"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/outboxd/outboxd/internal/testkit"
	"github.com/outboxd/outboxd/outbox"
	"github.com/outboxd/outboxd/store"
	"github.com/outboxd/outboxd/store/mongostore"
)

// TestEventKeysOf: the keys WithEventKeys sets come back in the order of
// the ids asked for, and not at all when one of them is unknown (a store
// then reads by id alone).
func TestEventKeysOf(t *testing.T) {
	t.Parallel()
	ctx := store.WithEventKeys(context.Background(), map[string]string{"a": "ka", "b": "kb"})
	require.Equal(t, []string{"kb", "ka"}, store.EventKeysOf(ctx, []string{"b", "a"}))
	require.Nil(t, store.EventKeysOf(ctx, []string{"a", "c"}))
	require.Nil(t, store.EventKeysOf(context.Background(), []string{"a"}))
}

// TestReadAfterOf: the positions WithReadAfter sets come back as given;
// none leaves the context as it is.
func TestReadAfterOf(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	require.Nil(t, store.ReadAfterOf(ctx))
	require.Equal(t, ctx, store.WithReadAfter(ctx))
	require.Equal(t, []string{"1.2", "", "x"}, store.ReadAfterOf(store.WithReadAfter(ctx, "1.2", "", "x")))
	require.False(t, store.CurrentCountsOf(ctx))
	require.True(t, store.CurrentCountsOf(store.WithCurrentCounts(ctx)))
}

// TestSwitchPartitionsReadsCurrentCounts: the drain check of
// SwitchPartitions is not answered from a store's cache of the counts (nor
// from a lagging secondary): an event written after the figures were
// cached makes it refuse.
func TestSwitchPartitionsReadsCurrentCounts(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	st := testkit.NewMongo(t, &mongostore.Options{CountsTTL: time.Hour})
	name := testkit.Name("stream")
	c, err := st.Counts(ctx)
	require.NoError(t, err)
	require.Zero(t, c.Undispatched, "cached: nothing in flight")
	_, err = outbox.NewWriter(st, &outbox.WriterConfig{Stream: name}).
		Write(ctx, []outbox.Input{{SourceKey: "s", DeviceKey: "d", OccurredAt: "2026-01-02T03:04:05Z"}})
	require.NoError(t, err)
	_, err = store.SwitchPartitions(ctx, st, name, 2)
	require.ErrorIs(t, err, store.ErrNotDrained)
	n, err := st.Partitions(ctx, name)
	require.NoError(t, err)
	require.Zero(t, n, "nothing recorded")
}
