package stream_test

import (
	"context"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/outboxd/outboxd/internal/stream"
	"github.com/outboxd/outboxd/outbox"
)

// TestPublisherRoutes: with routes each event goes to its type's stream,
// in the publisher's lane and partitions; the others to its own stream.
func TestPublisherRoutes(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	b := setup(t, nil)
	other := b.keys.Name() + ":other"
	routes := outbox.Routes{"c": other}
	day := time.Date(2026, 10, 1, 0, 0, 0, 0, time.UTC)
	var events []*outbox.Event
	for _, typ := range []string{"a", "c", "b", "c"} {
		events = append(events, &outbox.Event{ID: outbox.NewEventID(), IdempotencyKey: outbox.NewEventID(), SourceKey: "s", DeviceKey: typ + "-dev",
			Type: typ, OccurredAt: day, CreatedAt: day})
	}
	ids := func(key string) []string {
		msgs, err := b.rdb.XRange(ctx, key, "-", "+").Result()
		require.NoError(t, err)
		var out []string
		for _, m := range msgs {
			msg, err := stream.Entry{ID: m.ID, Values: m.Values}.Message()
			require.NoError(t, err)
			out = append(out, msg.EventID)
		}
		return out
	}

	p := b.c.Publisher(b.keys, &stream.PublisherConfig{Routes: routes}, nil)
	require.NoError(t, p.PublishEvents(ctx, events, outbox.OriginReconciler))
	require.Equal(t, []string{events[0].ID, events[2].ID}, ids(b.keys.Stream()))
	require.Equal(t, []string{events[1].ID, events[3].ID}, ids(other))

	lane := b.c.Publisher(b.keys.Split(2).ReplayLane(), &stream.PublisherConfig{Routes: routes}, nil)
	require.NoError(t, lane.PublishEvents(ctx, events[1:2], outbox.OriginReplay))
	k := stream.NewKeys(other, "g").Split(2).ReplayLane().ForEvent("s", "c-dev")
	require.Equal(t, []string{events[1].ID}, ids(k.Stream()), "the routed stream's partition's replay lane")
}
