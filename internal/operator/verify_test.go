package operator_test

import (
	"context"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/outboxd/outboxd/internal/operator"
	"github.com/outboxd/outboxd/internal/testkit"
	"github.com/outboxd/outboxd/outbox"
)

// verifyAll runs every chunk of a verify and returns the drift and how
// many each phase checked.
func (b *pipelineBundle) verifyAll(t *testing.T, q operator.VerifyQuery) ([]operator.Drift, map[string]int) {
	t.Helper()
	var drift []operator.Drift
	checked := map[string]int{}
	for range 100 {
		res, err := b.op.Verify(context.Background(), q)
		require.NoError(t, err)
		drift = append(drift, res.Drift...)
		checked[res.Phase] += res.Checked
		if res.Done {
			return drift, checked
		}
		q.After = res.Next
	}
	t.Fatal("verify never ended")
	return nil, nil
}

// TestVerifyRepair: verify finds a row deleted by hand (and its day's
// count, now one too high) and a row nobody accepted; repair re-publishes
// the original and recomputes the statistics, so the day ends counted
// once per row.
func TestVerifyRepair(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	b := setupPipeline(t, testkit.NewStore(t))
	b.start(t, nil)
	events := b.write(t, "d1", hours(5)...)
	b.waitDrained(t, events...)
	drift, checked := b.verifyAll(t, operator.VerifyQuery{Limit: 2})
	require.Empty(t, drift)
	require.Equal(t, 5, checked[operator.PhaseOriginals])
	require.Equal(t, 5, checked[operator.PhaseRows])

	_, err := b.pg.Pool.Exec(ctx, `DELETE FROM events WHERE event_id = $1`, events[2].ID)
	require.NoError(t, err)
	orphan := outbox.NewEventID()
	_, err = b.pg.Pool.Exec(ctx, `INSERT INTO events (event_id, idempotency_key, source_key, device_key, type, occurred_at, payload, created_at)
		VALUES ($1, 'nobody', 'src', 'd9', 'event', $2, '{}', $2)`, orphan, day0)
	require.NoError(t, err)

	drift, _ = b.verifyAll(t, operator.VerifyQuery{Limit: 2})
	kinds := map[string][]string{}
	for _, d := range drift {
		kinds[d.Kind] = append(kinds[d.Kind], d.EventID+d.DeviceKey)
		require.False(t, d.Repaired)
	}
	require.Equal(t, map[string][]string{
		operator.DriftMissingRow: {events[2].ID + "d1"},
		operator.DriftOrphanRow:  {orphan + "d9"},
		operator.DriftStats:      {"d1", "d9"}, // d1 counts 5 for 4 rows; d9 has a row and no count
	}, kinds)

	// A window that leaves the deleted row's day out sees nothing of it.
	drift, _ = b.verifyAll(t, operator.VerifyQuery{From: day0.Add(24 * time.Hour)})
	require.Empty(t, drift)

	drift, _ = b.verifyAll(t, operator.VerifyQuery{From: day0, To: day0.Add(24 * time.Hour), Repair: true})
	for _, d := range drift {
		require.Equal(t, d.Kind != operator.DriftOrphanRow, d.Repaired, "%+v", d)
	}
	b.waitDrained(t, events...)
	require.Equal(t, 1, b.rowCount(t, events[2].ID))
	var counted int64
	require.NoError(t, b.pg.Pool.QueryRow(ctx, `SELECT event_count FROM device_daily_stats WHERE device_key = 'd1'`).Scan(&counted))
	require.Equal(t, int64(5), counted, "the row projected again is counted once")

	drift, _ = b.verifyAll(t, operator.VerifyQuery{})
	require.Len(t, drift, 1, "only the row nobody accepted is left, for a person: %+v", drift)
	require.Equal(t, operator.DriftOrphanRow, drift[0].Kind)
}
