package sqlitestore_test

import (
	"context"
	"fmt"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/outboxd/outboxd/outbox"
)

// BenchmarkWriteTx500 measures the writer's transaction shape: a lookup of
// 500 idempotency keys, then 500 originals and their 500 outbox entries per
// WriteTx, on a store that already holds the previous batches. It reports
// events/s.
func BenchmarkWriteTx500(b *testing.B) {
	bundle := setup(b)
	ctx := context.Background()
	const batch = 500
	for b.Loop() {
		b.StopTimer()
		events, entries := records(batch, "s", time.Now())
		keys := make([]string, batch)
		for i, e := range events {
			keys[i] = e.IdempotencyKey
		}
		b.StartTimer()
		err := bundle.store.WriteTx(ctx, func(ctx context.Context, tx outbox.Tx) error {
			known, err := tx.LookupKeys(ctx, keys)
			if err != nil || len(known) > 0 {
				return fmt.Errorf("lookup: %w, %d known", err, len(known))
			}
			if err := tx.InsertEvents(ctx, events); err != nil {
				return err
			}
			return tx.InsertEntries(ctx, entries)
		})
		require.NoError(b, err)
	}
	b.ReportMetric(float64(b.N*batch)/b.Elapsed().Seconds(), "events/s")
}
