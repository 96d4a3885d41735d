package operator_test

import (
	"context"
	"encoding/json"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"
	"github.com/stretchr/testify/require"

	"github.com/outboxd/outboxd/internal/operator"
	"github.com/outboxd/outboxd/internal/stream"
	"github.com/outboxd/outboxd/internal/testkit"
	"github.com/outboxd/outboxd/outbox"
)

// TestListDLQFilters: dlq list finds a failure by its error text, code,
// type, source, device, time and a field of its original's payload; each
// filter keeps exactly the dead letters it names, and a bad filter is a
// clear error.
func TestListDLQFilters(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	b := setup(t)
	rdb, _ := testkit.NewRedis(t)
	res, err := b.w.Write(ctx, []outbox.Input{
		{SourceKey: "plant-a", DeviceKey: "d1", Type: "temperature", OccurredAt: "2026-11-01T10:00:00Z", Payload: json.RawMessage(`{"reading":{"unit":"C","v":21.5}}`)},
		{SourceKey: "plant-a", DeviceKey: "d2", Type: "humidity", OccurredAt: "2026-11-01T10:00:00Z", Payload: json.RawMessage(`{"reading":{"unit":"%","v":40}}`)},
		{SourceKey: "plant-b", DeviceKey: "d1", Type: "temperature", OccurredAt: "2026-11-01T10:00:00Z", Payload: json.RawMessage(`{"reading":{"unit":"F","v":70}}`)},
	})
	require.NoError(t, err)
	at := time.Date(2026, 11, 2, 0, 0, 0, 0, time.UTC)
	for i, r := range res {
		ev := testkit.Event(t, b.st, r.ID)
		dl := stream.DeadLetter{Category: outbox.CategoryPoison, Code: []string{"postgres_22003", "projection_failed", "postgres_22003"}[i],
			Error: []string{"numeric field overflow", "a Projection bug", "numeric field overflow"}[i], EventID: ev.ID,
			At: at.Add(time.Duration(i) * time.Hour), Payload: ev.Message(outbox.OriginOutbox).Encode()}
		require.NoError(t, rdb.XAdd(ctx, &redis.XAddArgs{Stream: b.keys.DLQ(), Values: dl.Encode()}).Err())
	}
	list := func(q operator.DLQQuery) []string {
		t.Helper()
		page, err := b.op.ListDLQ(ctx, q)
		require.NoError(t, err)
		var devices []string
		for _, dl := range page.Entries {
			var msg outbox.Message
			require.NoError(t, json.Unmarshal([]byte(dl.Payload), &msg))
			devices = append(devices, msg.SourceKey+"/"+msg.DeviceKey)
		}
		return devices
	}
	for _, tc := range []struct {
		name string
		q    operator.DLQQuery
		want []string
	}{
		{"All", operator.DLQQuery{}, []string{"plant-a/d1", "plant-a/d2", "plant-b/d1"}},
		{"ErrorText", operator.DLQQuery{Error: "projection BUG"}, []string{"plant-a/d2"}},
		{"Code", operator.DLQQuery{Code: "postgres_22003"}, []string{"plant-a/d1", "plant-b/d1"}},
		{"Source", operator.DLQQuery{SourceKey: "plant-b"}, []string{"plant-b/d1"}},
		{"Device", operator.DLQQuery{SourceKey: "plant-a", DeviceKey: "d1"}, []string{"plant-a/d1"}},
		{"Type", operator.DLQQuery{Type: "humidity"}, []string{"plant-a/d2"}},
		{"Time", operator.DLQQuery{Since: at.Add(30 * time.Minute), Until: at.Add(90 * time.Minute)}, []string{"plant-a/d2"}},
		{"PayloadString", operator.DLQQuery{Payload: "reading.unit=F"}, []string{"plant-b/d1"}},
		{"PayloadNumber", operator.DLQQuery{Payload: "reading.v=21.5"}, []string{"plant-a/d1"}},
		{"Combined", operator.DLQQuery{Type: "temperature", Code: "postgres_22003", Payload: "reading.unit=C"}, []string{"plant-a/d1"}},
		{"None", operator.DLQQuery{Payload: "reading.missing=1"}, nil},
	} {
		t.Run(tc.name, func(t *testing.T) {
			require.Equal(t, tc.want, list(tc.q))
		})
	}
	_, err = b.op.ListDLQ(ctx, operator.DLQQuery{Payload: "reading.unit"})
	require.ErrorIs(t, err, operator.ErrInvalid)
	_, err = b.op.ListDLQ(ctx, operator.DLQQuery{Since: at, Until: at})
	require.ErrorIs(t, err, operator.ErrInvalid)
}
