package stream_test

import (
	"context"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"
	"github.com/stretchr/testify/require"

	"github.com/outboxd/outboxd/internal/stream"
	"github.com/outboxd/outboxd/outbox"
)

func TestDeadLetter(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	at := time.Date(2026, 10, 1, 9, 30, 0, 123456789, time.UTC)
	dl := stream.DeadLetter{Category: outbox.CategoryPoison, Code: "projection_failed", Error: "a bug",
		EntryID: "1-1", EventID: outbox.NewEventID(), Stream: "s", Group: "g", Consumer: "c",
		Deliveries: 3, At: at, Payload: `{"eventId":"x"}`}

	t.Run("EncodeDecode", func(t *testing.T) {
		t.Parallel()
		b := setup(t, nil)
		id, err := b.rdb.XAdd(ctx, &redis.XAddArgs{Stream: b.keys.DLQ(), Values: dl.Encode()}).Result()
		require.NoError(t, err)
		got, err := b.c.DeadLetters(ctx, b.keys, "", 10)
		require.NoError(t, err)
		want := dl
		want.ID = id
		require.Equal(t, []stream.DeadLetter{want}, got)
		fields, err := b.rdb.XRange(ctx, b.keys.DLQ(), "-", "+").Result()
		require.NoError(t, err)
		require.Equal(t, map[string]any{"category": "poison", "code": "projection_failed", "error": "a bug", "entryId": "1-1",
			"eventId": dl.EventID, "stream": "s", "group": "g", "consumer": "c", "deliveries": "3",
			"at": "2026-10-01T09:30:00.123456789Z", "payload": `{"eventId":"x"}`}, fields[0].Values, "one set of fields")
	})

	t.Run("DecodesEarlierVersionsAndGaps", func(t *testing.T) {
		t.Parallel()
		var d stream.DeadLetter
		// Written before the code field: its code was in reason.
		d.Decode(stream.Entry{ID: "1700000000000-0", Values: map[string]any{"reason": "trimmed", "category": "non_retryable", "deliveries": "x"}})
		require.Equal(t, "trimmed", d.Code)
		require.Equal(t, "1700000000000-0", d.ID)
		require.Zero(t, d.Deliveries)
		require.Equal(t, time.UnixMilli(1700000000000).UTC(), d.At, "an unreadable time is the entry's")
		d.Decode(stream.Entry{ID: "1-0", Values: map[string]any{"code": "bad_message", "reason": "old"}})
		require.Equal(t, "bad_message", d.Code, "code wins")
		require.Empty(t, d.Category, "decoding starts afresh")
	})

	t.Run("ReadByIDAndDelete", func(t *testing.T) {
		t.Parallel()
		b := setup(t, nil)
		var ids []string
		for range 3 {
			id, err := b.rdb.XAdd(ctx, &redis.XAddArgs{Stream: b.keys.DLQ(), Values: dl.Encode()}).Result()
			require.NoError(t, err)
			ids = append(ids, id)
		}
		page, err := b.c.DeadLetters(ctx, b.keys, ids[0], 1)
		require.NoError(t, err)
		require.Len(t, page, 1)
		require.Equal(t, ids[1], page[0].ID, "after is exclusive")
		got, err := b.c.DeadLettersByID(ctx, b.keys, []string{ids[2], "1-0"})
		require.NoError(t, err)
		require.Equal(t, ids[2], got[0].ID)
		require.Nil(t, got[1])
		require.NoError(t, b.c.DeleteDeadLetters(ctx, b.keys, ids[:2]))
		require.NoError(t, b.c.DeleteDeadLetters(ctx, b.keys, nil))
		n, err := b.c.Len(ctx, b.keys.DLQ())
		require.NoError(t, err)
		require.Equal(t, int64(1), n)
		entries, _, _, err := b.c.ScanBack(ctx, b.keys.DLQ(), time.Time{}, 10, func(e stream.Entry) bool {
			return stream.DeadLetterEventID(e) == dl.EventID
		})
		require.NoError(t, err)
		require.Len(t, entries, 1)
	})
}
