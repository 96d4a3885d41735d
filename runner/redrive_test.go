package runner

import (
	"context"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"
	"github.com/stretchr/testify/require"

	"github.com/outboxd/outboxd/internal/stream"
	"github.com/outboxd/outboxd/internal/testkit"
	"github.com/outboxd/outboxd/outbox"
)

// TestRedriveInDev: `outboxd dev --redrive infrastructure=1s:2` redrives by
// itself the dead letter of an original the worker did not find (written to
// the store after its message was consumed), which is then synced and
// projected once; the unreadable message's dead letter (non_retryable, no
// rule) stays.
func TestRedriveInDev(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	b := startDev(t, "", "--min-age", "1h", "--every", "1s", "--max-deliveries", "1", "--redrive", "infrastructure=1s:2")
	st := b.openStore(t)
	rdb, _ := testkit.NewRedis(t)
	w := outbox.NewWriter(st, &outbox.WriterConfig{Stream: b.stream})
	recs, _, err := w.Records([]outbox.Input{{SourceKey: "s", DeviceKey: "late", OccurredAt: "2026-11-01T10:00:00Z"}})
	require.NoError(t, err)
	late := recs[0]
	dlq := stream.NewKeys(b.stream, "").DLQ()
	require.NoError(t, rdb.XAdd(ctx, &redis.XAddArgs{Stream: b.stream, Values: late.Message(outbox.OriginOutbox).Values()}).Err())
	require.NoError(t, rdb.XAdd(ctx, &redis.XAddArgs{Stream: b.stream, Values: map[string]any{outbox.PayloadField: "not json"}}).Err())
	require.Eventually(t, func() bool { return rdb.XLen(ctx, dlq).Val() == 2 }, 30*time.Second, 20*time.Millisecond)
	require.NoError(t, st.WriteTx(ctx, func(ctx context.Context, tx outbox.Tx) error {
		return tx.InsertEvents(ctx, []outbox.Event{late})
	}))

	require.Eventually(t, func() bool {
		got, err := st.LoadEvents(ctx, []string{late.ID})
		l, ok := got[late.ID]
		return err == nil && ok && l.Err == nil && l.Event.State() == outbox.StateSynced && rdb.XLen(ctx, dlq).Val() == 1
	}, 30*time.Second, 20*time.Millisecond, "redriven and synced: %s", b.stderr)
	var rows int64
	require.NoError(t, b.pg.Pool.QueryRow(ctx, `SELECT count(*) FROM events WHERE event_id = $1`, late.ID).Scan(&rows))
	require.Equal(t, int64(1), rows)
	left, err := rdb.XRange(ctx, dlq, "-", "+").Result()
	require.NoError(t, err)
	require.Equal(t, outbox.CategoryNonRetryable, left[0].Values["category"])
	require.Equal(t, "1", rdb.HGet(ctx, stream.NewKeys(b.stream, "").Redrives(), late.ID).Val())
}
