package testkit

import (
	"context"
	"testing"

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
	c, err := st.Counts(context.Background())
	require.NoError(t, err)
	require.Equal(t, n, c.Total, "originals")
	require.Equal(t, n, c.Undispatched, "outbox entries")
}
