package testkit

import (
	"context"
	"testing"

	"github.com/256dpi/lungo"
	"github.com/stretchr/testify/require"

	"github.com/outboxd/outboxd/outbox"
)

// Seed stores the originals and outbox entries for inputs in bulk, the way
// w.Write would but without its per-key lookup, which the embedded engine
// answers by scanning (quadratic for large backlogs). Keys must be new. It
// returns the originals in input order.
func Seed(t testing.TB, db lungo.IDatabase, w *outbox.Writer, inputs []outbox.Input) []outbox.Event {
	t.Helper()
	ctx := context.Background()
	events, entries, err := w.Records(inputs)
	require.NoError(t, err)
	const chunk = 10_000
	for i := 0; i < len(events); i += chunk {
		j := min(i+chunk, len(events))
		docs, outs := make([]any, 0, j-i), make([]any, 0, j-i)
		for k := i; k < j; k++ {
			docs, outs = append(docs, events[k]), append(outs, entries[k])
		}
		_, err := db.Collection(outbox.EventsCollection).InsertMany(ctx, docs)
		require.NoError(t, err)
		_, err = db.Collection(outbox.OutboxCollection).InsertMany(ctx, outs)
		require.NoError(t, err)
	}
	return events
}
