package operator_test

import (
	"context"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/outboxd/outboxd/internal/operator"
	"github.com/outboxd/outboxd/internal/readmodel"
	"github.com/outboxd/outboxd/internal/testkit"
	"github.com/outboxd/outboxd/outbox"
)

// TestReplayRoutes: a replay re-publishes an original of a routed type to
// the replay lane of its route's stream, the others to the default
// stream's; invalid routes are refused.
func TestReplayRoutes(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	b := setup(t)
	routed := b.keys.Name() + ":routed"
	routes := outbox.Routes{"c": routed}
	_, err := operator.New(&operator.Config{Store: b.st, Routes: outbox.Routes{"c": ""}}, nil)
	require.ErrorContains(t, err, "Routes")
	op, err := operator.New(&operator.Config{Store: b.st, Redis: b.rc, ReadModel: readmodel.New(b.pg.Pool),
		Stream: b.keys.Name(), Group: b.keys.Group(), Routes: routes}, testkit.Logger(t))
	require.NoError(t, err)
	w := outbox.NewWriter(b.st, &outbox.WriterConfig{Stream: b.keys.Name(), Routes: routes})
	var ids []string
	for i, typ := range []string{"a", "c"} {
		res, err := w.Write(ctx, []outbox.Input{{SourceKey: "src", DeviceKey: string(rune('a' + i)), Type: typ, OccurredAt: "2026-11-01T10:00:00Z"}})
		require.NoError(t, err)
		ids = append(ids, res[0].ID)
	}
	day := time.Date(2026, 11, 1, 0, 0, 0, 0, time.UTC)
	res, err := op.Replay(ctx, operator.ReplayQuery{EventsQuery: operator.EventsQuery{From: day, To: day.Add(24 * time.Hour)}})
	require.NoError(t, err)
	require.Equal(t, 2, res.Published)
	lane := func(key string) []string {
		msgs, err := b.rdb.XRange(ctx, key, "-", "+").Result()
		require.NoError(t, err)
		var out []string
		for _, m := range msgs {
			msg, err := outbox.DecodeMessage(m.Values)
			require.NoError(t, err)
			require.Equal(t, outbox.OriginReplay, msg.Origin)
			out = append(out, msg.EventID)
		}
		return out
	}
	require.Equal(t, []string{ids[0]}, lane(b.keys.Replay()))
	require.Equal(t, []string{ids[1]}, lane(routed+":replay"))
}
