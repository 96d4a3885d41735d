package testkit

import (
	"context"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/outboxd/outboxd/outbox"
	"github.com/outboxd/outboxd/store"
)

// Event reads the original id from st and fails t when it is missing or
// corrupt.
func Event(t testing.TB, st store.Store, id string) *outbox.Event {
	t.Helper()
	got, err := st.LoadEvents(context.Background(), []string{id})
	require.NoError(t, err)
	require.Contains(t, got, id, "no original %s", id)
	require.NoError(t, got[id].Err)
	return got[id].Event
}

// RequireStored checks that st holds n originals and n undispatched outbox
// entries (nothing relayed yet).
func RequireStored(t testing.TB, st store.Store, n int64) {
	t.Helper()
	c, err := st.Counts(store.WithCurrentCounts(context.Background()))
	require.NoError(t, err)
	require.Equal(t, n, c.Total, "originals")
	require.Equal(t, n, c.Undispatched, "outbox entries")
}

// WriteOccurred writes through w one original of source "src" and device
// per occurrence time, and returns them as st stores them.
func WriteOccurred(t testing.TB, w *outbox.Writer, st store.Store, device string, occurred ...time.Time) []*outbox.Event {
	t.Helper()
	inputs := make([]outbox.Input, len(occurred))
	for i, at := range occurred {
		inputs[i] = outbox.Input{SourceKey: "src", DeviceKey: device, OccurredAt: at.Format(time.RFC3339Nano)}
	}
	res, err := w.Write(context.Background(), inputs)
	require.NoError(t, err)
	out := make([]*outbox.Event, len(res))
	for i, r := range res {
		out[i] = Event(t, st, r.ID)
	}
	return out
}
