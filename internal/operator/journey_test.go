package operator_test

import (
	"context"
	"strings"
	"testing"

	"github.com/redis/go-redis/v9"
	"github.com/stretchr/testify/require"

	"github.com/outboxd/outboxd/internal/operator"
	"github.com/outboxd/outboxd/internal/stream"
	"github.com/outboxd/outboxd/internal/testkit"
	"github.com/outboxd/outboxd/outbox"
)

// journey returns the journey of ref.
func (b *pipelineBundle) journey(t *testing.T, ref string) *operator.Journey {
	t.Helper()
	j, err := b.op.Journey(context.Background(), ref)
	require.NoError(t, err)
	return j
}

// TestJourney follows originals through the whole pipeline: one synced at
// once, and one dead-lettered as poison, then replayed, each with its
// outbox entry, its stream entries and their delivery state, its dead
// letter, its read-model row and its day's statistics. On both stores.
func TestJourney(t *testing.T) {
	t.Parallel()
	onBothStores(t, func(t *testing.T, b *pipelineBundle) {
		events := b.write(t, "d1", hours(3)...)
		good, bad := events[0], events[1]
		b.startPoisoning(t, bad)

		j := b.journey(t, good.ID)
		require.Equal(t, "id", j.MatchedBy)
		require.Equal(t, good.ID, j.Original.ID)
		require.Equal(t, outbox.StateSynced, j.Original.State)
		require.JSONEq(t, `{}`, string(j.Original.Payload))
		require.Len(t, j.Outbox, 1)
		require.Equal(t, b.keys.Name(), j.Outbox[0].Stream)
		require.NotNil(t, j.Outbox[0].DispatchedAt, "dispatched when")
		require.Len(t, j.Stream.Entries, 1)
		require.Equal(t, string(outbox.OriginOutbox), j.Stream.Entries[0].Origin)
		require.Equal(t, operator.EntryAcknowledged, j.Stream.Entries[0].Status)
		require.False(t, j.Stream.Partial)
		require.Empty(t, j.Stream.DeadLetters)
		require.NotNil(t, j.ReadModel.Row)
		require.Equal(t, good.ID, j.ReadModel.Row.EventID)
		require.False(t, j.ReadModel.Row.ProjectedAt.IsZero())
		require.NotNil(t, j.ReadModel.Stats)
		require.Equal(t, "2026-10-01", j.ReadModel.Stats.Day)
		require.Equal(t, int64(2), j.ReadModel.Stats.EventCount, "the day of d1 counts the two synced originals")

		j = b.journey(t, bad.IdempotencyKey)
		require.Equal(t, "idempotencyKey", j.MatchedBy)
		require.Equal(t, outbox.StateFailed, j.Original.State)
		require.Equal(t, outbox.CategoryPoison, j.Original.SyncFailure.Category)
		require.Len(t, j.Stream.DeadLetters, 1)
		dl := j.Stream.DeadLetters[0]
		require.Len(t, j.Stream.Entries, 1)
		require.Equal(t, dl.EntryID, j.Stream.Entries[0].ID)
		require.Equal(t, operator.EntryDeadLettered, j.Stream.Entries[0].Status)
		require.Equal(t, int64(2), j.Stream.Entries[0].Deliveries)
		require.Nil(t, j.ReadModel.Row, "not projected")
		require.Equal(t, int64(2), j.ReadModel.Stats.EventCount)

		b.breaker.Store(nil)
		_, err := b.op.ReplayDLQ(context.Background(), operator.DLQAction{IDs: []string{dl.ID}})
		require.NoError(t, err)
		b.waitDrained(t, events...)
		j = b.journey(t, bad.ID)
		require.Equal(t, outbox.StateSynced, j.Original.State)
		require.Len(t, j.Stream.Entries, 2, "the first delivery and the replay")
		require.Equal(t, stream.LaneLive, j.Stream.Entries[0].Lane)
		require.Equal(t, stream.LaneReplay, j.Stream.Entries[1].Lane, "replays go into the replay lane")
		require.Equal(t, string(outbox.OriginDLQReplay), j.Stream.Entries[1].Origin)
		require.Equal(t, operator.EntryAcknowledged, j.Stream.Entries[1].Status)
		require.Empty(t, j.Stream.DeadLetters, "replayed dead letters are removed")
		require.NotNil(t, j.ReadModel.Row)
		require.Equal(t, int64(3), j.ReadModel.Stats.EventCount)
	})
}

// TestJourneyDeliveries: the delivery state of stream entries (held by a
// consumer, acknowledged, not delivered yet), and a scan of the stream
// that stops at its bound says that the answer is partial.
func TestJourneyDeliveries(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	b := setupPipeline(t, testkit.NewStore(t))
	ev := b.write(t, "d1", day0)[0]
	name, group := b.keys.Name(), b.keys.Group()
	require.NoError(t, b.rdb.XGroupCreateMkStream(ctx, name, group, "0").Err())
	first, err := b.rdb.XAdd(ctx, &redis.XAddArgs{Stream: name, Values: ev.Message(outbox.OriginOutbox).Values()}).Result()
	require.NoError(t, err)
	_, err = b.rdb.XReadGroup(ctx, &redis.XReadGroupArgs{Group: group, Consumer: "c1", Streams: []string{name, ">"}, Count: 1}).Result()
	require.NoError(t, err)
	require.NoError(t, b.rdb.HSet(ctx, b.keys.Failures(), first, 1).Err())
	second, err := b.rdb.XAdd(ctx, &redis.XAddArgs{Stream: name, Values: ev.Message(outbox.OriginReplay).Values()}).Result()
	require.NoError(t, err)

	j := b.journey(t, ev.ID)
	require.Len(t, j.Stream.Entries, 2)
	held, waiting := j.Stream.Entries[0], j.Stream.Entries[1]
	require.Equal(t, first, held.ID)
	require.Equal(t, operator.EntryPending, held.Status)
	require.Equal(t, int64(1), held.Deliveries)
	require.Equal(t, int64(1), held.FailedDeliveries)
	require.Equal(t, "c1", held.Consumer)
	require.NotNil(t, held.IdleSeconds)
	require.Equal(t, second, waiting.ID)
	require.Equal(t, operator.EntryWaiting, waiting.Status)
	require.Equal(t, string(outbox.OriginReplay), waiting.Origin)
	require.Equal(t, 2, j.Stream.Scanned)
	require.Len(t, j.Outbox, 1)
	require.Nil(t, j.Outbox[0].DispatchedAt, "no dispatcher ran")
	require.Nil(t, j.ReadModel.Row)
	require.Nil(t, j.ReadModel.Stats)

	require.NoError(t, b.rdb.XAck(ctx, name, group, first).Err())
	j = b.journey(t, ev.ID)
	require.Equal(t, operator.EntryAcknowledged, j.Stream.Entries[0].Status)
	require.False(t, j.Stream.Partial)

	_, err = b.rdb.Pipelined(ctx, func(p redis.Pipeliner) error {
		for range operator.JourneyScanMax {
			p.XAdd(ctx, &redis.XAddArgs{Stream: name, Values: map[string]any{outbox.PayloadField: "other"}})
		}
		return nil
	})
	require.NoError(t, err)
	j = b.journey(t, ev.ID)
	require.True(t, j.Stream.Partial, "the scan stopped before the original's creation")
	require.Equal(t, operator.JourneyScanMax, j.Stream.Scanned)
	require.Empty(t, j.Stream.Entries, "its entries are older than the part read")
}

// TestJourneyRefs: a reference that names no original is not found, as is
// one as long as the longest stored key; one longer cannot be a key and
// is invalid.
func TestJourneyRefs(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	b := setupPipeline(t, testkit.NewStore(t))
	// Longer than any stored key: a named client's longest (outbox.ClientKey).
	longest := len(outbox.ClientKeyPrefix) + outbox.MaxClientNameLength + 1 + outbox.MaxKeyLength
	for _, ref := range []string{"nobody", outbox.NewEventID(), strings.Repeat("k", longest)} {
		_, err := b.op.Journey(ctx, ref)
		require.ErrorIs(t, err, operator.ErrNotFound, ref)
	}
	_, err := b.op.Journey(ctx, strings.Repeat("k", longest+1))
	require.ErrorIs(t, err, operator.ErrInvalid)
	var oe *operator.Error
	require.ErrorAs(t, err, &oe)
	require.Equal(t, "ref", oe.Fields[0].Field)
}
