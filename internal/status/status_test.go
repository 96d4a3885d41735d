package status_test

import (
	"context"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"
	"github.com/stretchr/testify/require"
	"go.mongodb.org/mongo-driver/bson"

	"github.com/outboxd/outboxd/internal/clock"
	"github.com/outboxd/outboxd/internal/status"
	"github.com/outboxd/outboxd/internal/testkit"
	"github.com/outboxd/outboxd/outbox"
)

func TestMain(m *testing.M) { testkit.Main(m) }

func TestSnapshot(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	m := testkit.NewMongo(t, nil)
	rdb, prefix := testkit.NewRedis(t)
	stream, group := prefix+"-stream", prefix+"-group"
	clk := clock.NewFake(time.Date(2026, 11, 1, 12, 0, 0, 0, time.UTC))
	w := outbox.NewWriter(m.DB, &outbox.WriterConfig{Clock: clk, Stream: stream})
	var ids []string
	for _, at := range []string{"2026-11-01T10:00:00Z", "2026-11-01T10:01:00Z", "2026-11-01T10:02:00Z"} {
		res, err := w.Write(ctx, []outbox.Input{{SourceKey: "s", DeviceKey: "d", OccurredAt: at}})
		require.NoError(t, err)
		ids = append(ids, res[0].ID)
		clk.Advance(time.Minute) // createdAt 12:00, 12:01, 12:02
	}
	first, err := outbox.FindEvent(ctx, m.DB, ids[0])
	require.NoError(t, err)
	second, err := outbox.FindEvent(ctx, m.DB, ids[1])
	require.NoError(t, err)
	events := m.DB.Collection(outbox.EventsCollection)
	_, err = events.UpdateOne(ctx, bson.M{"_id": first.ID}, bson.M{"$set": bson.M{"syncedAt": clk.Now()}})
	require.NoError(t, err)
	_, err = events.UpdateOne(ctx, bson.M{"_id": second.ID}, bson.M{"$set": bson.M{"syncFailure": outbox.SyncFailure{Category: outbox.CategoryPoison}}})
	require.NoError(t, err)
	require.NoError(t, rdb.XAdd(ctx, &redis.XAddArgs{Stream: stream, Values: first.Message(outbox.OriginOutbox).Values()}).Err())
	require.NoError(t, rdb.XAdd(ctx, &redis.XAddArgs{Stream: outbox.DLQStream(stream), Values: map[string]any{"reason": "x"}}).Err())

	src := &status.Source{DB: m.DB, Redis: rdb, Stream: stream, Group: group, Clock: clk}
	snap, err := src.Snapshot(ctx)
	require.NoError(t, err)
	require.Equal(t, status.EventCounts{Total: 3, Synced: 1, Pending: 1, Failed: 1}, snap.Events)
	require.Equal(t, int64(3), snap.Outbox.Undispatched)
	// The one pending original was created at 12:02; the clock says 12:03.
	require.Equal(t, 60.0, snap.OldestPendingAgeSeconds)
	require.Equal(t, &status.StreamCounts{Name: stream, Length: 1}, snap.Stream, "no group yet: nothing pending")
	require.Equal(t, &status.DLQCounts{Name: outbox.DLQStream(stream), Length: 1}, snap.DLQ)

	// Delivered to the group, not acknowledged: pending.
	require.NoError(t, rdb.XGroupCreate(ctx, stream, group, "0").Err())
	require.NoError(t, rdb.XReadGroup(ctx, &redis.XReadGroupArgs{Group: group, Consumer: "c", Streams: []string{stream, ">"}, Count: 10, Block: -1}).Err())
	snap, err = src.Snapshot(ctx)
	require.NoError(t, err)
	require.Equal(t, int64(1), snap.Stream.Pending)
}
