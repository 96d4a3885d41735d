package testkit_test

import (
	"context"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/outboxd/outboxd/internal/testkit"
	"github.com/outboxd/outboxd/outbox"
	"github.com/outboxd/outboxd/store"
)

// TestCheckerCanFail proves the checker sees each kind of damage.
func TestCheckerCanFail(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	st := testkit.NewStore(t)
	pg := testkit.NewPostgres(t)
	res, err := outbox.NewWriter(st, nil).Write(ctx, []outbox.Input{
		{SourceKey: "s", DeviceKey: "d", OccurredAt: "2026-11-01T10:00:00Z"},
		{SourceKey: "s", DeviceKey: "d", OccurredAt: "2026-11-01T11:00:00Z"},
	})
	require.NoError(t, err)
	keys := []string{res[0].IdempotencyKey, res[1].IdempotencyKey}

	v, err := testkit.Check(ctx, st, pg.Pool, nil, "", "", keys)
	require.NoError(t, err)
	require.False(t, v.OK())
	require.Equal(t, 2, v.Lost)
	require.EqualValues(t, 2, v.Unsynced)
	require.EqualValues(t, 2, v.Undispatched)

	// Project by hand, with a double count and an unexpected row.
	_, err = pg.Pool.Exec(ctx, `INSERT INTO events VALUES
		($1, $2, 's', 'd', 'event', '2026-11-01T10:00:00Z', '{}', now()),
		($3, $4, 's', 'd', 'event', '2026-11-01T11:00:00Z', '{}', now()),
		('x', 'nobody', 's', 'd', 'event', '2026-11-01T12:00:00Z', '{}', now())`,
		res[0].ID, keys[0], res[1].ID, keys[1])
	require.NoError(t, err)
	_, err = pg.Pool.Exec(ctx, `INSERT INTO device_daily_stats VALUES ('s', 'd', '2026-11-01', 4, now(), now())`)
	require.NoError(t, err)
	_, err = st.MarkSynced(ctx, []string{res[0].ID, res[1].ID}, time.Now())
	require.NoError(t, err)
	lease, err := st.AcquireLease(ctx, outbox.StreamDefault, "test", time.Now(), time.Minute)
	require.NoError(t, err)
	entries, err := st.Undispatched(ctx, outbox.StreamDefault, store.Partition{}, "", 10)
	require.NoError(t, err)
	require.NoError(t, st.MarkDispatched(ctx, lease, []string{entries[0].ID, entries[1].ID}, time.Now()))

	v, err = testkit.Check(ctx, st, pg.Pool, nil, "", "", keys)
	require.NoError(t, err)
	require.Equal(t, 0, v.Lost)
	require.Equal(t, 1, v.Unexpected)
	require.Len(t, v.StatsMismatch, 1)
	require.False(t, v.OK())

	_, err = pg.Pool.Exec(ctx, `DELETE FROM events WHERE event_id = 'x'; UPDATE device_daily_stats SET event_count = 2`)
	require.NoError(t, err)
	v, err = testkit.Check(ctx, st, pg.Pool, nil, "", "", keys)
	require.NoError(t, err)
	require.True(t, v.OK(), v.String())
}
