package operator_test

import (
	"context"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"
	"github.com/stretchr/testify/require"

	"github.com/outboxd/outboxd/internal/operator"
	"github.com/outboxd/outboxd/internal/testkit"
	"github.com/outboxd/outboxd/outbox"
)

// TestDLQReplay: a record whose projection keeps failing is parked and
// dead-lettered; once the cause is fixed, replaying the dead letter
// projects it exactly once and empties the entry, and the duplicate
// delivery a crash between the publish and the entry's removal would make
// changes nothing. On the SQLite store and on the MongoDB store (lungo).
func TestDLQReplay(t *testing.T) {
	t.Parallel()
	onBothStores(t, func(t *testing.T, b *pipelineBundle) {
		ctx := context.Background()
		events := b.write(t, "d1", hours(3)...)
		bad := events[1]
		b.startPoisoning(t, bad)
		require.Zero(t, b.rowCount(t, bad.ID))

		page, err := b.op.ListDLQ(ctx, operator.DLQQuery{Category: outbox.CategoryPoison})
		require.NoError(t, err)
		require.Len(t, page.Entries, 1)
		dl := page.Entries[0]
		require.Equal(t, bad.ID, dl.EventID)
		require.Equal(t, outbox.CategoryPoison, dl.Category)
		require.Equal(t, outbox.StateFailed, dl.Original)
		require.Equal(t, int64(2), dl.Deliveries)
		require.NotEmpty(t, dl.Code)
		page, err = b.op.ListDLQ(ctx, operator.DLQQuery{Category: outbox.CategoryNonRetryable})
		require.NoError(t, err)
		require.Empty(t, page.Entries, "the filter keeps other categories out")

		parked, err := b.op.ListEvents(ctx, operator.EventsQuery{State: outbox.StateFailed})
		require.NoError(t, err)
		require.Len(t, parked.Events, 1, "the parked originals")
		require.Equal(t, bad.ID, parked.Events[0].ID)
		require.Equal(t, outbox.CategoryPoison, parked.Events[0].SyncFailure.Category)

		one, err := b.op.DeadLetter(ctx, dl.ID)
		require.NoError(t, err)
		require.NotNil(t, one.Event)
		require.Equal(t, bad.IdempotencyKey, one.Event.IdempotencyKey)

		b.breaker.Store(nil) // the cause is fixed
		mark := b.laneLastID(t)
		res, err := b.op.ReplayDLQ(ctx, operator.DLQAction{IDs: []string{dl.ID}})
		require.NoError(t, err)
		require.Equal(t, 1, res.Replayed)
		require.Equal(t, []operator.DLQResult{{ID: dl.ID, EventID: bad.ID, Outcome: operator.OutcomeReplayed}}, res.Results)
		b.waitDrained(t, events...)
		require.Zero(t, b.rdb.XLen(ctx, b.keys.DLQ()).Val(), "the entry is gone")
		msgs := b.laneSince(t, mark)
		require.Len(t, msgs, 1)
		require.Equal(t, outbox.OriginDLQReplay, msgs[0].Origin)
		require.Equal(t, bad.IdempotencyKey, msgs[0].IdempotencyKey)
		require.Equal(t, 1, b.rowCount(t, bad.ID))
		require.Nil(t, testkit.Event(t, b.st, bad.ID).SyncFailure)
		b.check(t, events)

		// A crash after the publish, before the entry's removal, leaves
		// the entry: replayed again, the event is delivered twice.
		require.NoError(t, b.rdb.XAdd(ctx, &redis.XAddArgs{Stream: b.keys.Name(), Values: bad.Message(outbox.OriginDLQReplay).Values()}).Err())
		b.waitDrained(t, events...)
		require.Equal(t, 1, b.rowCount(t, bad.ID))
		b.check(t, events)

		res, err = b.op.ReplayDLQ(ctx, operator.DLQAction{IDs: []string{dl.ID}})
		require.NoError(t, err)
		require.Equal(t, 1, res.NotFound, "replayed entries are gone")
	})
}

// TestDLQMissingOriginalAndDrop: a dead letter whose original does not
// exist says so, is kept by a replay, and is dropped; a listing pages.
func TestDLQMissingOriginalAndDrop(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	b := setupPipeline(t, testkit.NewStore(t))
	ghost := &outbox.Event{ID: outbox.NewEventID(), IdempotencyKey: "ghost", SourceKey: "s", DeviceKey: "d", OccurredAt: day0, CreatedAt: day0}
	require.NoError(t, b.rdb.XAdd(ctx, &redis.XAddArgs{Stream: b.keys.Name(), Values: ghost.Message(outbox.OriginOutbox).Values()}).Err())
	require.NoError(t, b.rdb.XAdd(ctx, &redis.XAddArgs{Stream: b.keys.Name(), Values: map[string]any{"payload": "not json"}}).Err())
	b.start(t, nil)
	require.Eventually(t, func() bool { return b.rdb.XLen(ctx, b.keys.DLQ()).Val() == 2 }, waitFor, 10*time.Millisecond)

	page, err := b.op.ListDLQ(ctx, operator.DLQQuery{Limit: 1})
	require.NoError(t, err)
	require.Len(t, page.Entries, 1)
	require.NotEmpty(t, page.Next, "one more follows")
	require.Equal(t, int64(2), page.Length)
	require.Equal(t, operator.OriginalMissing, page.Entries[0].Original)
	named := []string{page.Entries[0].EventID}
	page, err = b.op.ListDLQ(ctx, operator.DLQQuery{After: page.Next})
	require.NoError(t, err)
	require.Len(t, page.Entries, 1)
	require.Equal(t, operator.OriginalMissing, page.Entries[0].Original)
	require.Empty(t, page.Next)
	require.ElementsMatch(t, []string{ghost.ID, ""}, append(named, page.Entries[0].EventID), "the entry of a bad message names no event")

	res, err := b.op.ReplayDLQ(ctx, operator.DLQAction{All: true})
	require.NoError(t, err)
	require.Equal(t, 2, res.OriginalMissing)
	require.True(t, res.Done)
	require.Equal(t, int64(2), b.rdb.XLen(ctx, b.keys.DLQ()).Val(), "kept")

	res, err = b.op.DropDLQ(ctx, operator.DLQAction{All: true, Code: "bad_message"})
	require.NoError(t, err)
	require.Equal(t, 1, res.Dropped, "only the code asked for")
	res, err = b.op.DropDLQ(ctx, operator.DLQAction{All: true})
	require.NoError(t, err)
	require.Equal(t, 1, res.Dropped)
	require.Zero(t, b.rdb.XLen(ctx, b.keys.DLQ()).Val())

	_, err = b.op.DeadLetter(ctx, "1-0")
	require.ErrorIs(t, err, operator.ErrNotFound)
}
