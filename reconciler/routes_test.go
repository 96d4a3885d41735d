package reconciler_test

import (
	"context"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/outboxd/outboxd/outbox"
	"github.com/outboxd/outboxd/store"
)

// TestSweepRoutes: the reconciler re-publishes an unsynced original of a
// routed type to its route's stream, where the writer recorded its entry,
// and the others to the default stream; it records the partitions of
// every stream.
func TestSweepRoutes(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	b := setup(t)
	routed := b.stream + ":routed"
	routes := outbox.Routes{"c": routed}
	b.writer = outbox.NewWriter(b.st, &outbox.WriterConfig{Now: b.clock.Now, Stream: b.stream, Routes: routes})
	var ids []string
	for i, typ := range []string{"a", "c", "b", "c"} {
		res, err := b.writer.Write(ctx, []outbox.Input{{SourceKey: "src", DeviceKey: string(rune('a' + i)), Type: typ,
			OccurredAt: "2026-11-01T10:00:00Z"}})
		require.NoError(t, err)
		ids = append(ids, res[0].ID)
	}
	b.clock.Advance(minAge + time.Second)
	cfg := b.config()
	cfg.Routes = routes
	r := b.reconciler(t, cfg)
	rep, err := r.Sweep(ctx)
	require.NoError(t, err)
	require.Equal(t, 4, rep.Published)
	require.ElementsMatch(t, []string{ids[0], ids[2]}, b.published(t))
	require.ElementsMatch(t, []string{ids[1], ids[3]}, streamIDs(t, b.rdb, routed))
	entries, err := b.st.Undispatched(ctx, routed, store.Partition{}, "", 10)
	require.NoError(t, err)
	require.Len(t, entries, 2, "the writer recorded the routed entries for the same stream")

	// Starting records the routed stream's partitions (nothing is left to
	// sweep: the claims hold for RequeueAfter).
	require.NoError(t, r.Start(ctx))
	require.NoError(t, r.Stop(ctx))
	n, err := b.st.Partitions(ctx, routed)
	require.NoError(t, err)
	require.Equal(t, 1, n, "the routed stream's partitions recorded at start")
}
