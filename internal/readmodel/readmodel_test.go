package readmodel_test

import (
	"context"
	"fmt"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/stretchr/testify/require"

	"github.com/outboxd/outboxd/internal/readmodel"
	"github.com/outboxd/outboxd/internal/testkit"
	"github.com/outboxd/outboxd/outbox"
	"github.com/outboxd/outboxd/worker"
)

var _ worker.Projector = (*readmodel.Projector)(nil)

func TestMain(m *testing.M) { testkit.Main(m) }

// TestReadModelMaintenance exercises the functions the operator commands
// use on the default projector's tables: finding drift, removing rows with
// their counts, and recomputing statistics rows from the rows.
func TestReadModelMaintenance(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	pg := testkit.NewPostgres(t)
	p := readmodel.NewProjector()
	db := readmodel.New(pg.Pool)
	day := time.Date(2026, 10, 1, 0, 0, 0, 0, time.UTC)
	var events []*outbox.Event
	for i := range 6 {
		events = append(events, &outbox.Event{
			ID: outbox.NewEventID(), IdempotencyKey: fmt.Sprintf("k%d", i), SourceKey: "s", DeviceKey: fmt.Sprintf("d%d", i%2),
			Type: "event", OccurredAt: day.Add(time.Duration(i) * 5 * time.Hour), Payload: []byte(`{}`), CreatedAt: day,
		})
	}
	project := func() {
		t.Helper()
		require.NoError(t, pgx.BeginFunc(ctx, pg.Pool, func(tx pgx.Tx) error { return p.Project(ctx, tx, events) }))
	}
	drift := func(from, to *time.Time) []readmodel.StatsDrift {
		t.Helper()
		out, err := db.StatsDrift(ctx, from, to, 100)
		require.NoError(t, err)
		return out
	}
	project()
	require.NoError(t, db.Ping(ctx))
	require.Empty(t, drift(nil, nil), "the projector's statistics match its rows")

	t.Run("ProjectedAndRows", func(t *testing.T) {
		got, err := db.Projected(ctx, []string{events[0].ID, outbox.NewEventID()})
		require.NoError(t, err)
		require.Equal(t, map[string]bool{events[0].ID: true}, got)
		from, to := day.Add(5*time.Hour), day.Add(20*time.Hour) // events 1..3
		rows, err := db.Rows(ctx, &from, &to, "", 2)
		require.NoError(t, err)
		require.Len(t, rows, 2)
		more, err := db.Rows(ctx, &from, &to, rows[1].EventID, 2)
		require.NoError(t, err)
		require.Len(t, more, 1)
		// Rows pages in event id order; ids are random after their second.
		last := slices.MaxFunc(events[1:4], func(a, b *outbox.Event) int { return strings.Compare(a.ID, b.ID) })
		require.Equal(t, last.ID, more[0].EventID)
		require.True(t, last.OccurredAt.Equal(more[0].OccurredAt))
		all, err := db.Rows(ctx, nil, nil, "", 100)
		require.NoError(t, err)
		require.Len(t, all, 6)
	})

	t.Run("Lookup", func(t *testing.T) {
		ev := events[5] // d1, alone on the next day
		row, stats, err := db.Lookup(ctx, ev.ID, ev.IdempotencyKey, readmodel.KeyOf(ev))
		require.NoError(t, err)
		require.Equal(t, ev.ID, row.EventID)
		require.Equal(t, [4]string{ev.IdempotencyKey, "s", "d1", "event"}, [4]string{row.IdempotencyKey, row.SourceKey, row.DeviceKey, row.Type})
		require.True(t, ev.OccurredAt.Equal(row.OccurredAt))
		require.Equal(t, time.UTC, row.ProjectedAt.Location())
		require.False(t, row.ProjectedAt.IsZero())
		require.Equal(t, readmodel.StatsKey{SourceKey: "s", DeviceKey: "d1", Day: day.Add(24 * time.Hour)}, stats.StatsKey)
		require.Equal(t, int64(1), stats.EventCount)
		require.True(t, ev.OccurredAt.Equal(stats.FirstOccurredAt))

		// By key: a row projected from an earlier original of the key.
		row, _, err = db.Lookup(ctx, outbox.NewEventID(), ev.IdempotencyKey, readmodel.KeyOf(ev))
		require.NoError(t, err)
		require.Equal(t, ev.ID, row.EventID)
		row, stats, err = db.Lookup(ctx, outbox.NewEventID(), "nobody", readmodel.StatsKey{SourceKey: "s", DeviceKey: "none", Day: day})
		require.NoError(t, err)
		require.Nil(t, row)
		require.Nil(t, stats)
	})

	t.Run("DriftFoundAndRecomputed", func(t *testing.T) {
		// A row deleted by hand: its day's count is one too high.
		_, err := pg.Pool.Exec(ctx, `DELETE FROM events WHERE event_id = $1`, events[0].ID)
		require.NoError(t, err)
		// A statistics row of a day without rows.
		_, err = pg.Pool.Exec(ctx, `INSERT INTO device_daily_stats VALUES ('s', 'ghost', '2026-10-01', 3, now(), now())`)
		require.NoError(t, err)
		got := drift(nil, nil)
		require.Len(t, got, 2, "%+v", got)
		require.Equal(t, readmodel.StatsDrift{StatsKey: readmodel.StatsKey{SourceKey: "s", DeviceKey: "d0", Day: day}, Counted: 3, Rows: 2}, got[0])
		require.Equal(t, "ghost", got[1].DeviceKey)
		require.Zero(t, got[1].Rows)
		other := day.Add(48 * time.Hour)
		require.Empty(t, drift(&other, nil), "a window of other days sees none")
		end := day.Add(time.Hour)
		require.Len(t, drift(nil, &end), 2, "a window touching the day compares the whole day")

		require.NoError(t, db.RecomputeStats(ctx, []readmodel.StatsKey{got[0].StatsKey, got[1].StatsKey, got[0].StatsKey}))
		require.Empty(t, drift(nil, nil))
	})

	t.Run("UnprojectTakesTheCountsOut", func(t *testing.T) {
		removed, err := db.Unproject(ctx, []string{events[1].ID, events[2].ID, events[0].ID})
		require.NoError(t, err)
		require.Equal(t, int64(2), removed, "events[0] had no row any more")
		require.Empty(t, drift(nil, nil))
		var n int64
		require.NoError(t, pg.Pool.QueryRow(ctx, `SELECT coalesce(sum(event_count), 0) FROM device_daily_stats`).Scan(&n))
		require.Equal(t, int64(3), n)
		// Projected again: counted once.
		project()
		require.Empty(t, drift(nil, nil))
		require.NoError(t, pg.Pool.QueryRow(ctx, `SELECT sum(event_count) FROM device_daily_stats`).Scan(&n))
		require.Equal(t, int64(6), n)
	})
}
