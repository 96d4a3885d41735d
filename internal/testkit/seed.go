package testkit

import (
	"context"
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/outboxd/outboxd/outbox"
	"github.com/outboxd/outboxd/store"
)

// Seed stores the originals and outbox entries for inputs in bulk, the way
// w.Write would but without its per-key lookup, in transactions of 5,000.
// Keys must be new. It returns the originals in input order.
func Seed(t testing.TB, st store.Store, w *outbox.Writer, inputs []outbox.Input) []outbox.Event {
	t.Helper()
	ctx := context.Background()
	events, entries, err := w.Records(inputs)
	require.NoError(t, err)
	const chunk = 5_000
	for i := 0; i < len(events); i += chunk {
		j := min(i+chunk, len(events))
		require.NoError(t, st.WriteTx(ctx, func(ctx context.Context, tx outbox.Tx) error {
			if err := tx.InsertEvents(ctx, events[i:j]); err != nil {
				return err
			}
			return tx.InsertEntries(ctx, entries[i:j])
		}))
	}
	return events
}
