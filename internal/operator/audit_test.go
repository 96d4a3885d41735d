package operator_test

import (
	"context"
	"fmt"
	"slices"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/prometheus/client_golang/prometheus"
	"github.com/stretchr/testify/require"

	"github.com/outboxd/outboxd/internal/operator"
	"github.com/outboxd/outboxd/internal/readmodel"
	"github.com/outboxd/outboxd/internal/testkit"
	"github.com/outboxd/outboxd/outbox"
)

var _ operator.AuditReadModel = (*readmodel.DB)(nil)

// auditBundle is a test bundle with an audit over its stores.
type auditBundle struct {
	*testBundle
	reg   *prometheus.Registry
	audit *operator.Audit
	clock time.Time
}

func setupAudit(t *testing.T, sample int) *auditBundle {
	t.Helper()
	b := &auditBundle{testBundle: setup(t), reg: prometheus.NewRegistry(), clock: time.Date(2026, 11, 3, 0, 0, 0, 0, time.UTC)}
	b.w = outbox.NewWriter(b.st, &outbox.WriterConfig{Stream: b.keys.Name(), Now: func() time.Time { return b.clock }})
	var err error
	b.audit, err = operator.NewAudit(&operator.AuditConfig{Store: b.st, ReadModel: readmodel.New(b.pg.Pool), Stream: b.keys.Name(),
		Sample: sample, Every: operator.AuditEveryShortest, Now: func() time.Time { return b.clock.Add(time.Hour) }, Registerer: b.reg}, testkit.Logger(t))
	require.NoError(t, err)
	return b
}

// synced writes n originals of source, one by one a minute apart (or all
// in one transaction, sharing their createdAt, with together), projects
// them with the default projector and marks them synced, as the worker
// would.
func (b *auditBundle) synced(t *testing.T, source string, n int, together bool) []*outbox.Event {
	t.Helper()
	ctx := context.Background()
	inputs := make([]outbox.Input, n)
	for i := range inputs {
		inputs[i] = outbox.Input{SourceKey: source, DeviceKey: fmt.Sprintf("d%d", i%3),
			OccurredAt: time.Date(2026, 10, 1+i%4, 10, i, 0, 0, time.UTC).Format(time.RFC3339)}
	}
	var ids []string
	if together {
		res, err := b.w.Write(ctx, inputs)
		require.NoError(t, err)
		for _, r := range res {
			ids = append(ids, r.ID)
		}
	} else {
		for _, in := range inputs {
			b.clock = b.clock.Add(time.Minute)
			res, err := b.w.Write(ctx, []outbox.Input{in})
			require.NoError(t, err)
			ids = append(ids, res[0].ID)
		}
	}
	events := make([]*outbox.Event, len(ids))
	for i, id := range ids {
		events[i] = testkit.Event(t, b.st, id)
	}
	require.NoError(t, pgx.BeginTxFunc(ctx, b.pg.Pool, pgx.TxOptions{}, func(tx pgx.Tx) error {
		return readmodel.NewProjector().Project(ctx, tx, events)
	}))
	_, err := b.st.MarkSynced(ctx, ids, b.clock)
	require.NoError(t, err)
	return events
}

// TestAuditFindsEachKindOfDrift: an exact read model audits clean; a row
// deleted, a row changed, a row without an original and a statistics row
// changed by hand are each found, counted by kind in the metrics and the
// recorded report, with the commands that repair them.
func TestAuditFindsEachKindOfDrift(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	b := setupAudit(t, 1000)
	events := b.synced(t, "src", 12, false)

	rep, err := b.audit.Run(ctx)
	require.NoError(t, err)
	require.Equal(t, 12, rep.Checked)
	require.Equal(t, 0, rep.DriftTotal(), "%+v", rep.Findings)
	require.Equal(t, 4*3, rep.StatsChecked, "4 days of 3 devices")
	require.Empty(t, rep.Repair)
	require.EqualValues(t, 12, testkit.Metric(t, b.reg, "outboxd_audit_checked_total"))
	require.NotZero(t, testkit.Metric(t, b.reg, "outboxd_audit_last_run_timestamp_seconds"))

	// Damage: events[0]'s row deleted (its day's count now exceeds its
	// rows), events[1]'s row changed, a row without an original on
	// events[2]'s day (counted, so only the row is wrong), and events[3]'s
	// day counted 5 more.
	day := func(ev *outbox.Event) string { return ev.OccurredAt.UTC().Format(time.DateOnly) }
	exec := func(sql string, args ...any) {
		_, err := b.pg.Pool.Exec(ctx, sql, args...)
		require.NoError(t, err)
	}
	exec(`DELETE FROM events WHERE event_id = $1`, events[0].ID)
	exec(`UPDATE events SET type = 'changed' WHERE event_id = $1`, events[1].ID)
	orphan := outbox.NewEventID()
	exec(`INSERT INTO events (event_id, idempotency_key, source_key, device_key, type, occurred_at, payload, created_at)
		VALUES ($1, 'nobody', $2, $3, 'event', $4, '{}', now())`, orphan, events[2].SourceKey, events[2].DeviceKey, events[2].OccurredAt)
	exec(`UPDATE device_daily_stats SET event_count = event_count + 1 WHERE source_key = $1 AND device_key = $2 AND day = $3`,
		events[2].SourceKey, events[2].DeviceKey, day(events[2]))
	exec(`UPDATE device_daily_stats SET event_count = event_count + 5 WHERE source_key = $1 AND device_key = $2 AND day = $3`,
		events[3].SourceKey, events[3].DeviceKey, day(events[3]))

	rep, err = b.audit.Run(ctx)
	require.NoError(t, err)
	require.Equal(t, map[string]int{operator.AuditMissing: 1, operator.AuditContent: 1, operator.AuditExtra: 1, operator.AuditStats: 2}, rep.Drift)
	byKind := map[string][]string{}
	for _, f := range rep.Findings {
		byKind[f.Kind] = append(byKind[f.Kind], f.EventID+f.Day)
	}
	require.Equal(t, []string{events[0].ID + day(events[0])}, byKind[operator.AuditMissing])
	require.Equal(t, []string{events[1].ID + day(events[1])}, byKind[operator.AuditContent])
	require.Equal(t, []string{orphan + day(events[2])}, byKind[operator.AuditExtra])
	require.ElementsMatch(t, []string{day(events[0]), day(events[3])}, byKind[operator.AuditStats])
	require.InDelta(t, 3.0/12, rep.DriftRatio, 1e-9)
	require.Len(t, rep.Repair, 3)
	require.Contains(t, rep.Repair[0], "outboxd verify --from ")
	require.Contains(t, rep.Repair[0], "--repair --yes")
	require.Contains(t, rep.Repair[1], "outboxd replay --from "+events[1].OccurredAt.UTC().Truncate(24*time.Hour).Format(time.RFC3339))
	require.Contains(t, rep.Repair[1], "--rebuild --yes")

	for kind, n := range map[string]float64{operator.AuditMissing: 1, operator.AuditContent: 1, operator.AuditExtra: 1, operator.AuditStats: 2} {
		require.EqualValues(t, n, testkit.Metric(t, b.reg, "outboxd_audit_drift_total", "kind", kind), kind)
	}
	require.EqualValues(t, 24, testkit.Metric(t, b.reg, "outboxd_audit_checked_total"))

	last, err := operator.LastAudit(ctx, readmodel.New(b.pg.Pool), b.keys.Name())
	require.NoError(t, err)
	require.Equal(t, rep.Drift, last.Drift)
	require.Equal(t, rep.Repair, last.Repair)
}

// TestAuditCoversTheHistoryOverRuns: with a sample smaller than the
// history, each run compares the newest originals first and then older
// windows where the last run stopped, so a few runs compare every original
// once the history is walked (and the walk wraps to the newest again) —
// whether the originals were written minutes apart or all in one
// millisecond (one transaction, one createdAt).
func TestAuditCoversTheHistoryOverRuns(t *testing.T) {
	t.Parallel()
	for _, together := range []bool{false, true} {
		t.Run(fmt.Sprintf("OneTransaction=%v", together), func(t *testing.T) {
			t.Parallel()
			ctx := context.Background()
			b := setupAudit(t, 4)
			events := b.synced(t, "src", 11, together)
			// Every row gone: each run's findings name what it compared.
			_, err := b.pg.Pool.Exec(ctx, `DELETE FROM events`)
			require.NoError(t, err)

			seen := map[string]int{}
			first := true
			wrapped := false
			for run := 0; run < 5 && !wrapped; run++ {
				rep, err := b.audit.Run(ctx)
				require.NoError(t, err)
				require.LessOrEqual(t, rep.Checked, 4)
				require.Equal(t, rep.Checked, rep.Drift[operator.AuditMissing])
				for _, f := range rep.Findings {
					if f.Kind == operator.AuditMissing {
						seen[f.EventID]++
					}
				}
				if first && !together {
					// The first run compares the newest.
					var newest []string
					for _, ev := range events[len(events)-4:] {
						newest = append(newest, ev.ID)
					}
					var got []string
					for _, f := range rep.Findings {
						if f.Kind == operator.AuditMissing {
							got = append(got, f.EventID)
						}
					}
					require.ElementsMatch(t, newest, got)
				}
				first = false
				wrapped = rep.Wrapped
			}
			require.True(t, wrapped, "the walk reached the oldest original within 5 runs")
			for _, ev := range events {
				require.Equal(t, 1, seen[ev.ID], "original %s compared once over the walk", ev.ID)
			}

			// Originals written after the walk are compared by the next run
			// (the newest first), before older ones.
			b.clock = b.clock.Add(2 * time.Hour)
			fresh := b.synced(t, "later", 2, false)
			_, err = b.pg.Pool.Exec(ctx, `DELETE FROM events`)
			require.NoError(t, err)
			b.clock = b.clock.Add(time.Hour)
			rep, err := b.audit.Run(ctx)
			require.NoError(t, err)
			var got []string
			for _, f := range rep.Findings {
				got = append(got, f.EventID)
			}
			for _, ev := range fresh {
				require.True(t, slices.Contains(got, ev.ID), "a new original is compared by the next run")
			}
		})
	}
}

// TestAuditConfig: defaults, and an invalid value is an error naming the
// field.
func TestAuditConfig(t *testing.T) {
	t.Parallel()
	b := setup(t)
	rm := readmodel.New(b.pg.Pool)
	_, err := operator.NewAudit(&operator.AuditConfig{Store: b.st, ReadModel: rm}, nil)
	require.NoError(t, err)
	_, err = operator.NewAudit(&operator.AuditConfig{Store: b.st, ReadModel: rm, Sample: -1}, nil)
	require.ErrorContains(t, err, "Sample must be from 1 to 100000")
	_, err = operator.NewAudit(&operator.AuditConfig{Store: b.st, ReadModel: rm, Sample: operator.AuditSampleMax + 1}, nil)
	require.ErrorContains(t, err, "Sample")
	_, err = operator.NewAudit(&operator.AuditConfig{Store: b.st, ReadModel: rm, Every: -time.Second}, nil)
	require.ErrorContains(t, err, "Every must be at least 1s")
	_, err = operator.NewAudit(&operator.AuditConfig{Store: b.st}, nil)
	require.Error(t, err)
}

// TestAuditService: started, the audit runs on its schedule and records
// each run; it stops at once, stops twice, and starts again.
func TestAuditService(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	b := setupAudit(t, 100)
	b.synced(t, "src", 3, false)
	for range 2 {
		require.NoError(t, b.audit.Start(ctx))
		require.Eventually(t, func() bool {
			last, err := operator.LastAudit(ctx, readmodel.New(b.pg.Pool), b.keys.Name())
			return err == nil && last != nil && last.Checked > 0
		}, waitFor, 10*time.Millisecond)
		require.NoError(t, b.audit.Stop(ctx))
		require.NoError(t, b.audit.Stop(ctx))
		<-b.audit.Stopped()
	}
	require.Greater(t, testkit.Metric(t, b.reg, "outboxd_audit_checked_total"), 0.0)
}
