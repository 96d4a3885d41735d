package worker

import (
	"context"
	"testing"
	"time"

	"github.com/stretchr/testify/require"
	"golang.org/x/time/rate"

	"github.com/outboxd/outboxd/internal/stream"
	"github.com/outboxd/outboxd/internal/testkit"
	"github.com/outboxd/outboxd/outbox"
)

// TestNextGivesTheLaneItsTurn: next reads the stream first; a read of the
// stream with less than a batch (no backlog) gives the replay lane the
// next turn even when the stream has new entries by then, so a stream
// that never stays empty for long does not starve the lane; a full batch
// (a backlog) does not.
func TestNextGivesTheLaneItsTurn(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	rdb, prefix := testkit.NewRedis(t)
	rc, err := stream.NewClient(rdb, nil)
	require.NoError(t, err)
	w, err := newWorker(testkit.NewStore(t), rc, testkit.NewPostgres(t).Pool,
		&Config{Stream: prefix + ":stream", Consumer: "c", BatchSize: 3, ReplayRate: rate.Inf}, nil)
	require.NoError(t, err)
	require.NoError(t, w.r.ensureGroup(ctx))
	w.r.held = map[string]heldEntry{}
	keys := stream.NewKeys(prefix+":stream", "")
	add := func(k stream.Keys, n int) []string {
		msgs := make([]string, n)
		for i := range msgs {
			msgs[i] = (&outbox.Event{ID: outbox.NewEventID()}).Message(outbox.OriginOutbox).Encode()
		}
		require.NoError(t, rc.Publisher(k, nil, nil).Publish(ctx, msgs))
		return msgs
	}
	next := func() (string, int) {
		g, msgs, _, err := w.r.next(ctx, time.Millisecond)
		require.NoError(t, err)
		return w.r.lane(g), len(msgs)
	}

	add(keys.ReplayLane(), 2)
	add(keys, 2)
	lane, n := next()
	require.Equal(t, [2]any{stream.LaneLive, 2}, [2]any{lane, n}, "the stream first")
	add(keys, 3) // the stream has entries again…
	lane, n = next()
	require.Equal(t, [2]any{stream.LaneReplay, 2}, [2]any{lane, n}, "…but its last read found no backlog: the lane's turn")
	add(keys.ReplayLane(), 1)
	lane, n = next()
	require.Equal(t, [2]any{stream.LaneLive, 3}, [2]any{lane, n})
	add(keys, 1)
	lane, n = next()
	require.Equal(t, [2]any{stream.LaneLive, 1}, [2]any{lane, n}, "a full batch is a backlog: the stream again")
	lane, n = next()
	require.Equal(t, [2]any{stream.LaneReplay, 1}, [2]any{lane, n})
}
