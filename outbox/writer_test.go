package outbox_test

import (
	"context"
	"encoding/json"
	"errors"
	"sync"
	"testing"
	"time"

	"github.com/256dpi/lungo"
	"github.com/stretchr/testify/require"
	"go.mongodb.org/mongo-driver/bson"

	"github.com/outboxd/outboxd/internal/fault"
	"github.com/outboxd/outboxd/internal/testkit"
	"github.com/outboxd/outboxd/outbox"
)

type writerBundle struct {
	mongo  *testkit.Mongo
	writer *outbox.Writer
	faults *fault.Set
}

func setupWriter(t *testing.T) *writerBundle {
	t.Helper()
	m := testkit.NewMongo(t, nil)
	f := &fault.Set{}
	return &writerBundle{mongo: m, faults: f, writer: outbox.NewWriter(m.DB, &outbox.WriterConfig{Faults: f})}
}

func (b *writerBundle) count(t *testing.T, coll string) int64 {
	t.Helper()
	n, err := b.mongo.DB.Collection(coll).CountDocuments(context.Background(), bson.M{})
	require.NoError(t, err)
	return n
}

func input(device string) outbox.Input {
	return outbox.Input{SourceKey: "src", DeviceKey: device, OccurredAt: "2026-11-01T10:00:00.123Z", Payload: json.RawMessage(`{"t":21.5,"n":3}`)}
}

func TestWriter(t *testing.T) {
	t.Parallel()
	ctx := context.Background()

	t.Run("WritesOriginalAndOutboxEntry", func(t *testing.T) {
		t.Parallel()
		b := setupWriter(t)
		res, err := b.writer.Write(ctx, []outbox.Input{input("d1")})
		require.NoError(t, err)
		require.False(t, res[0].Duplicate)
		ev, err := outbox.FindEvent(ctx, b.mongo.DB, res[0].ID)
		require.NoError(t, err)
		require.Equal(t, "pending", ev.State())
		require.Equal(t, int64(3), ev.Payload["n"])
		require.Equal(t, time.Date(2026, 11, 1, 10, 0, 0, 123e6, time.UTC), ev.OccurredAt.UTC())
		var entry outbox.Entry
		require.NoError(t, b.mongo.DB.Collection(outbox.OutboxCollection).FindOne(ctx, bson.M{"eventId": ev.ID}).Decode(&entry))
		require.Nil(t, entry.DispatchedAt)
		msg, err := outbox.DecodeMessage(map[string]any{outbox.PayloadField: entry.Message})
		require.NoError(t, err)
		require.Equal(t, ev.ID.Hex(), msg.EventID)
		require.Equal(t, outbox.OriginOutbox, msg.Origin)
	})

	t.Run("FailureBetweenInsertsLeavesNeither", func(t *testing.T) {
		t.Parallel()
		b := setupWriter(t)
		b.faults.Arm(outbox.FaultBetweenInserts, -1)
		_, err := b.writer.Write(ctx, []outbox.Input{input("d1"), input("d2")})
		require.ErrorIs(t, err, fault.ErrInjected)
		require.Equal(t, int64(0), b.count(t, outbox.EventsCollection))
		require.Equal(t, int64(0), b.count(t, outbox.OutboxCollection))
		b.faults.Disarm(outbox.FaultBetweenInserts)
		_, err = b.writer.Write(ctx, []outbox.Input{input("d1")})
		require.NoError(t, err)
		require.Equal(t, int64(1), b.count(t, outbox.EventsCollection))
		require.Equal(t, int64(1), b.count(t, outbox.OutboxCollection))
	})

	t.Run("ReplayReturnsFirstID", func(t *testing.T) {
		t.Parallel()
		b := setupWriter(t)
		first, err := b.writer.Write(ctx, []outbox.Input{input("d1")})
		require.NoError(t, err)
		again, err := b.writer.Write(ctx, []outbox.Input{input("d1")})
		require.NoError(t, err)
		require.Equal(t, first[0].ID, again[0].ID)
		require.True(t, again[0].Duplicate)
		require.Equal(t, int64(1), b.count(t, outbox.EventsCollection))
		require.Equal(t, int64(1), b.count(t, outbox.OutboxCollection))
	})

	t.Run("KeyReuseWithOtherContentIsMismatch", func(t *testing.T) {
		t.Parallel()
		b := setupWriter(t)
		in := input("d1")
		in.IdempotencyKey = "k1"
		first, err := b.writer.Write(ctx, []outbox.Input{in})
		require.NoError(t, err)
		in.Payload = json.RawMessage(`{"t":99}`)
		_, err = b.writer.Write(ctx, []outbox.Input{in})
		var mm *outbox.MismatchError
		require.ErrorAs(t, err, &mm)
		require.Equal(t, first[0].ID, mm.ExistingID)
		ev, err := outbox.FindEvent(ctx, b.mongo.DB, first[0].ID)
		require.NoError(t, err)
		require.Equal(t, 21.5, ev.Payload["t"])
	})

	t.Run("ConcurrentSameKeyYieldsOneOriginal", func(t *testing.T) {
		t.Parallel()
		b := setupWriter(t)
		var wg sync.WaitGroup
		ids := make([]string, 50)
		errs := make([]error, 50)
		for i := range ids {
			wg.Add(1)
			go func() {
				defer wg.Done()
				res, err := b.writer.Write(ctx, []outbox.Input{input("same")})
				errs[i] = err
				if err == nil {
					ids[i] = res[0].ID
				}
			}()
		}
		wg.Wait()
		for i := range ids {
			require.NoError(t, errs[i])
			require.Equal(t, ids[0], ids[i])
		}
		require.Equal(t, int64(1), b.count(t, outbox.EventsCollection))
		require.Equal(t, int64(1), b.count(t, outbox.OutboxCollection))
	})

	t.Run("BatchIsAllOrNothing", func(t *testing.T) {
		t.Parallel()
		b := setupWriter(t)
		bad := input("d3")
		bad.OccurredAt = "yesterday"
		_, err := b.writer.Write(ctx, []outbox.Input{input("d1"), input("d2"), bad})
		var ve *outbox.ValidationError
		require.ErrorAs(t, err, &ve)
		require.Equal(t, "events[2].occurredAt", ve.Fields[0].Field)
		require.Equal(t, int64(0), b.count(t, outbox.EventsCollection))

		// A mismatch on one item rejects the whole batch too.
		k := input("d9")
		k.IdempotencyKey = "k"
		_, err = b.writer.Write(ctx, []outbox.Input{k})
		require.NoError(t, err)
		k.Payload = json.RawMessage(`{"other":true}`)
		_, err = b.writer.Write(ctx, []outbox.Input{input("d1"), k})
		require.ErrorIs(t, err, outbox.ErrIdempotencyMismatch)
		require.Equal(t, int64(1), b.count(t, outbox.EventsCollection))
		require.Equal(t, int64(1), b.count(t, outbox.OutboxCollection))
	})

	t.Run("DuplicateWithinBatch", func(t *testing.T) {
		t.Parallel()
		b := setupWriter(t)
		res, err := b.writer.Write(ctx, []outbox.Input{input("d1"), input("d1")})
		require.NoError(t, err)
		require.Equal(t, res[0].ID, res[1].ID)
		require.False(t, res[0].Duplicate)
		require.True(t, res[1].Duplicate)
		require.Equal(t, int64(1), b.count(t, outbox.EventsCollection))
	})

	t.Run("RecordsMatchWhatWriteStores", func(t *testing.T) {
		t.Parallel()
		b := setupWriter(t)
		events, entries, err := b.writer.Records([]outbox.Input{input("d1"), input("d2")})
		require.NoError(t, err)
		require.Len(t, entries, 2)
		require.Equal(t, events[1].ID, entries[1].EventID)
		_, err = b.mongo.DB.Collection(outbox.EventsCollection).InsertMany(ctx, []any{events[0], events[1]})
		require.NoError(t, err)
		// Write sees the seeded originals as the same content: duplicates.
		res, err := b.writer.Write(ctx, []outbox.Input{input("d1"), input("d2")})
		require.NoError(t, err)
		require.True(t, res[0].Duplicate && res[1].Duplicate)
		require.Equal(t, events[0].ID.Hex(), res[0].ID)
		_, _, err = b.writer.Records([]outbox.Input{{SourceKey: "s"}})
		require.ErrorIs(t, err, outbox.ErrInvalid)
	})

	t.Run("WriteInCallersTransaction", func(t *testing.T) {
		t.Parallel()
		b := setupWriter(t)
		sess, err := b.mongo.DB.Client().StartSession()
		require.NoError(t, err)
		defer sess.EndSession(ctx)
		errAbort := errors.New("caller aborts")
		_, err = sess.WithTransaction(ctx, func(sc lungo.ISessionContext) (any, error) {
			if _, err := b.mongo.DB.Collection("orders").InsertOne(sc, bson.M{"n": 1}); err != nil {
				return nil, err
			}
			if _, err := b.writer.WriteInSession(sc, []outbox.Input{input("d1")}); err != nil {
				return nil, err
			}
			return nil, errAbort
		})
		require.ErrorIs(t, err, errAbort)
		require.Equal(t, int64(0), b.count(t, "orders"))
		require.Equal(t, int64(0), b.count(t, outbox.EventsCollection))
		require.Equal(t, int64(0), b.count(t, outbox.OutboxCollection))

		_, err = sess.WithTransaction(ctx, func(sc lungo.ISessionContext) (any, error) {
			if _, err := b.mongo.DB.Collection("orders").InsertOne(sc, bson.M{"n": 1}); err != nil {
				return nil, err
			}
			return b.writer.WriteInSession(sc, []outbox.Input{input("d1")})
		})
		require.NoError(t, err)
		require.Equal(t, int64(1), b.count(t, "orders"))
		require.Equal(t, int64(1), b.count(t, outbox.EventsCollection))
		require.Equal(t, int64(1), b.count(t, outbox.OutboxCollection))
	})
}
