package reconciler_test

import (
	"context"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/outboxd/outboxd/internal/stream"
)

// TestReconcilerLeavesHeldAlone: an unsynced original whose entry a worker
// holds for a later delivery (stream.Keys.Held) is not published again,
// and its claim is undone (requeueCount unchanged), so that no copy goes
// through, or to the dead-letter stream, twice; once the mark has passed,
// the next sweep publishes it.
func TestReconcilerLeavesHeldAlone(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	b := setup(t)
	ids := b.writeAged(t, 3)
	rc, err := stream.NewClient(b.rdb, nil)
	require.NoError(t, err)
	keys := stream.NewKeys(b.stream, "")
	require.NoError(t, rc.MarkHeld(ctx, keys, map[string]time.Time{ids[0]: b.clock.Now().Add(time.Hour)}))

	r := b.reconciler(t, nil)
	rep, err := r.Sweep(ctx)
	require.NoError(t, err)
	require.Equal(t, 1, rep.Held)
	require.ElementsMatch(t, ids[1:], b.published(t), "the held event is not published")
	ev := b.event(t, ids[0])
	require.Zero(t, ev.RequeueCount, "the held event's claim is undone")
	require.Nil(t, ev.LastRequeuedAt)

	b.clock.Advance(time.Hour + time.Second)
	rep, err = r.Sweep(ctx)
	require.NoError(t, err)
	require.Zero(t, rep.Held)
	require.Contains(t, b.published(t), ids[0], "published once the mark has passed")
}
