package dispatcher_test

import (
	"context"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/outboxd/outboxd/internal/tracing"
	"github.com/outboxd/outboxd/outbox"
)

// TestRelayCarriesTheContextWithTracingOff: tracing is off in this
// process (this package's tests never turn it on), and an entry stored
// with its ingest request's trace context (by an ingest that traces) is
// relayed with that context in its message, so a worker that traces still
// joins the event's trace; an entry without one is relayed as it was
// stored (docs/tracing.md). The worker drains both; the checker ends it.
func TestRelayCarriesTheContextWithTracingOff(t *testing.T) {
	t.Parallel()
	require.False(t, tracing.Enabled())
	ctx := context.Background()
	for _, kind := range kinds {
		t.Run(kind, func(t *testing.T) {
			t.Parallel()
			b := setup(t, &setupOpts{kind: kind})
			const tp = "00-4bf92f3577b34da6a3ce929d0e0e4736-00f067aa0ba902b7-01"
			events, entries, err := b.writer.Records([]outbox.Input{
				{SourceKey: b.source, DeviceKey: "traced", OccurredAt: "2026-11-01T10:00:00Z"},
				{SourceKey: b.source, DeviceKey: "untraced", OccurredAt: "2026-11-01T10:00:00Z"},
			})
			require.NoError(t, err)
			events[0].TraceParent, entries[0].TraceParent = tp, tp
			require.NoError(t, b.st.WriteTx(ctx, func(ctx context.Context, tx outbox.Tx) error {
				if err := tx.InsertEvents(ctx, events); err != nil {
					return err
				}
				return tx.InsertEntries(ctx, entries)
			}))
			for _, ev := range events {
				b.keys.Store(ev.IdempotencyKey, true)
			}
			p := b.startWorker()
			b.start(b.config())
			b.waitRelayed([]string{events[0].ID, events[1].ID}, 20*time.Second)

			msgs, err := b.rdb.XRange(ctx, b.stream, "-", "+").Result()
			require.NoError(t, err)
			got := map[string]string{}
			for _, m := range msgs {
				msg, err := outbox.DecodeMessage(m.Values)
				require.NoError(t, err)
				got[msg.EventID] = msg.TraceParent
			}
			require.Equal(t, map[string]string{events[0].ID: tp, events[1].ID: ""}, got)
			b.requireConverged(p)
		})
	}
}
