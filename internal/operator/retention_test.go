package operator_test

import (
	"context"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/outboxd/outboxd/internal/operator"
	"github.com/outboxd/outboxd/internal/readmodel"
	"github.com/outboxd/outboxd/outbox"
)

// TestVerifyLeavesExpiredRowsOut: with an event retention, a row without
// an original that was created before the retention's horizon is counted
// as expired (its original was deleted on purpose), not as drift; a
// younger row without an original still is drift.
func TestVerifyLeavesExpiredRowsOut(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	b := setup(t)
	now := time.Now().UTC()
	for _, row := range []struct {
		key string
		age time.Duration
	}{{"expired", 40 * 24 * time.Hour}, {"lost", time.Hour}} {
		_, err := b.pg.Pool.Exec(ctx, `INSERT INTO events (event_id, idempotency_key, source_key, device_key, type, occurred_at, payload, created_at)
			VALUES ($1, $2, 'src', 'd', 'event', $3, '{}', $3)`, outbox.NewEventID(), row.key, now.Add(-row.age))
		require.NoError(t, err)
	}
	for _, tc := range []struct {
		retention time.Duration
		drift     []string
		expired   int
	}{
		{0, []string{"expired", "lost"}, 0},
		{30 * 24 * time.Hour, []string{"lost"}, 1},
	} {
		op, err := operator.New(&operator.Config{Store: b.st, Redis: b.rc, ReadModel: readmodel.New(b.pg.Pool),
			Stream: b.keys.Name(), Group: b.keys.Group(), EventRetention: tc.retention}, nil)
		require.NoError(t, err)
		res, err := op.Verify(ctx, operator.VerifyQuery{After: operator.PhaseRows + ":"})
		require.NoError(t, err)
		require.Equal(t, operator.PhaseRows, res.Phase)
		require.Equal(t, 2, res.Checked)
		require.Equal(t, tc.expired, res.Expired, "retention %s", tc.retention)
		var drift []string
		for _, d := range res.Drift {
			require.Equal(t, operator.DriftOrphanRow, d.Kind)
			drift = append(drift, d.EventID)
		}
		require.Len(t, drift, len(tc.drift), "retention %s", tc.retention)
	}
}
