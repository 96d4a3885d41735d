package operator_test

import (
	"context"
	"fmt"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/prometheus/client_golang/prometheus"
	"github.com/stretchr/testify/require"

	"github.com/outboxd/outboxd/internal/operator"
	"github.com/outboxd/outboxd/internal/readmodel"
	"github.com/outboxd/outboxd/internal/testkit"
	"github.com/outboxd/outboxd/outbox"
	"github.com/outboxd/outboxd/worker"
)

// redriveBundle is setup's bundle with one clock for the worker (the dead
// letters' time) and the operator (the redrive policy's), a worker that
// fails the events in failing, and a Redriver of policy.
type redriveBundle struct {
	*testBundle
	clock    atomic.Int64 // nanoseconds
	failing  sync.Map     // event id → true
	redriver *operator.Redriver
	reg      *prometheus.Registry
}

func setupRedrive(t *testing.T, policy operator.RedrivePolicy) *redriveBundle {
	t.Helper()
	b := &redriveBundle{testBundle: setup(t), reg: prometheus.NewRegistry()}
	b.clock.Store(b.now.UnixNano())
	now := func() time.Time { return time.Unix(0, b.clock.Load()).UTC() }
	op, err := operator.New(&operator.Config{Store: b.st, Redis: b.rc, ReadModel: readmodel.New(b.pg.Pool),
		Stream: b.keys.Name(), Group: b.keys.Group(), Role: "reconcile", Now: now}, testkit.Logger(t))
	require.NoError(t, err)
	b.redriver, err = operator.NewRedriver(op, &operator.RedriverConfig{Policy: policy, Every: time.Hour, Registerer: b.reg}, testkit.Logger(t))
	require.NoError(t, err)
	b.op = op

	projector := readmodel.NewProjector()
	w, err := worker.New(b.st, b.rdb, b.pg.Pool, &worker.Config{
		Stream: b.keys.Name(), Group: b.keys.Group(), Consumer: "c", Block: 20 * time.Millisecond,
		MaxDeliveries: 1, RecordBackoff: 10 * time.Millisecond, Now: now,
		Projector: worker.ProjectorFunc(func(ctx context.Context, tx pgx.Tx, events []*outbox.Event) error {
			for _, ev := range events {
				if _, ok := b.failing.Load(ev.ID); ok {
					return fmt.Errorf("%w: a projection bug", worker.ErrRecord)
				}
			}
			return projector.Project(ctx, tx, events)
		}),
	}, testkit.Logger(t))
	require.NoError(t, err)
	require.NoError(t, w.Start(context.Background()))
	t.Cleanup(func() { require.NoError(t, w.Stop(context.Background())) })
	return b
}

func (b *redriveBundle) advance(d time.Duration) { b.clock.Add(int64(d)) }

// waitDead waits until the dead-letter stream holds exactly the dead
// letters of ids and returns them.
func (b *redriveBundle) waitDead(t *testing.T, ids ...string) []operator.DeadLetter {
	t.Helper()
	var page *operator.DLQPage
	require.Eventually(t, func() bool {
		var err error
		page, err = b.op.ListDLQ(context.Background(), operator.DLQQuery{})
		if err != nil || len(page.Entries) != len(ids) {
			return false
		}
		for i, dl := range page.Entries {
			if dl.EventID != ids[i] {
				return false
			}
		}
		return true
	}, waitFor, 5*time.Millisecond)
	return page.Entries
}

// rowsAndCount returns the read model's rows of ev and the count of its
// device's day.
func (b *redriveBundle) rowsAndCount(t *testing.T, ev *outbox.Event) (rows, count int64) {
	t.Helper()
	ctx := context.Background()
	require.NoError(t, b.pg.Pool.QueryRow(ctx, `SELECT count(*) FROM events WHERE event_id = $1`, ev.ID).Scan(&rows))
	err := b.pg.Pool.QueryRow(ctx, `SELECT coalesce(sum(event_count), 0) FROM device_daily_stats WHERE source_key = $1 AND device_key = $2`,
		ev.SourceKey, ev.DeviceKey).Scan(&count)
	require.NoError(t, err)
	return rows, count
}

// TestRedrivePolicy: dead letters of a category with a rule come back by
// themselves once the rule's period passed, at most its cap of times per
// event; a held category never does.
func TestRedrivePolicy(t *testing.T) {
	t.Parallel()
	ctx := context.Background()

	// An original the worker did not find (written to the store after its
	// message was consumed: a lagging secondary) is dead-lettered as
	// infrastructure; the rule re-drives it once 10 minutes passed, not
	// before, and it is projected once.
	t.Run("InfrastructureComesBackAfterItsPeriod", func(t *testing.T) {
		t.Parallel()
		b := setupRedrive(t, operator.RedrivePolicy{Rules: []operator.RedriveRule{{Category: outbox.CategoryInfrastructure, After: 10 * time.Minute, Max: 3}}})
		recs, _, err := b.w.Records([]outbox.Input{{SourceKey: "src", DeviceKey: "late", OccurredAt: "2026-11-01T10:00:00Z"}})
		require.NoError(t, err)
		late := recs[0]
		require.NoError(t, b.rc.Publisher(b.keys, nil, nil).PublishEvents(ctx, []*outbox.Event{&late}, outbox.OriginOutbox))
		dl := b.waitDead(t, late.ID)[0]
		require.Equal(t, outbox.CategoryInfrastructure, dl.Category)
		require.Equal(t, "original_missing", dl.Code)
		require.NoError(t, b.st.WriteTx(ctx, func(ctx context.Context, tx outbox.Tx) error {
			return tx.InsertEvents(ctx, []outbox.Event{late})
		}))

		b.advance(9 * time.Minute)
		res, err := b.redriver.Pass(ctx)
		require.NoError(t, err)
		require.Zero(t, res.Redriven[outbox.CategoryInfrastructure], "not before its period")
		b.waitDead(t, late.ID)

		b.advance(time.Minute)
		res, err = b.redriver.Pass(ctx)
		require.NoError(t, err)
		require.Equal(t, 1, res.Redriven[outbox.CategoryInfrastructure])
		require.Eventually(t, func() bool { return testkit.Event(t, b.st, late.ID).State() == outbox.StateSynced }, waitFor, 5*time.Millisecond)
		b.waitDead(t)
		rows, count := b.rowsAndCount(t, &late)
		require.Equal(t, [2]int64{1, 1}, [2]int64{rows, count}, "projected once, counted once")
		n, err := b.rc.Redrives(ctx, b.keys, []string{late.ID})
		require.NoError(t, err)
		require.Equal(t, []int64{1}, n)
		require.Equal(t, 1.0, testkit.Metric(t, b.reg, "outboxd_dlq_redriven_total", "category", outbox.CategoryInfrastructure))

		// Again: nothing left to re-drive, the event is not published twice.
		b.advance(time.Hour)
		res, err = b.redriver.Pass(ctx)
		require.NoError(t, err)
		require.Zero(t, res.Redriven[outbox.CategoryInfrastructure])
	})

	// A rule's cap: an event that fails every time is re-driven Max times,
	// then its dead letter stays (capped) until an operator replays it,
	// which starts its count again.
	t.Run("CappedStopsAtTheCap", func(t *testing.T) {
		t.Parallel()
		b := setupRedrive(t, operator.RedrivePolicy{Rules: []operator.RedriveRule{{Category: outbox.CategoryPoison, After: time.Minute, Max: 2}}})
		evs := b.write(t, "bad")
		bad := evs[0]
		b.failing.Store(bad.ID, true) // before any delivery: the worker reads it only below
		require.NoError(t, b.rc.Publisher(b.keys, nil, nil).PublishEvents(ctx, []*outbox.Event{bad}, outbox.OriginOutbox))
		for i := range 2 {
			dl := b.waitDead(t, bad.ID)[0]
			require.Equal(t, int64(i), dl.Redrives)
			require.Eventually(t, func() bool { return testkit.Event(t, b.st, bad.ID).State() == outbox.StateFailed }, waitFor, 5*time.Millisecond)
			b.advance(2 * time.Minute)
			res, err := b.redriver.Pass(ctx)
			require.NoError(t, err)
			require.Equal(t, 1, res.Redriven[outbox.CategoryPoison], "redrive %d", i+1)
			// It fails again and comes back as a new dead letter.
			require.Eventually(t, func() bool {
				page, err := b.op.ListDLQ(ctx, operator.DLQQuery{})
				return err == nil && len(page.Entries) == 1 && page.Entries[0].ID != dl.ID
			}, waitFor, 5*time.Millisecond)
		}
		dl := b.waitDead(t, bad.ID)[0]
		require.Equal(t, int64(2), dl.Redrives)
		b.advance(time.Hour)
		res, err := b.redriver.Pass(ctx)
		require.NoError(t, err)
		require.Zero(t, res.Redriven[outbox.CategoryPoison])
		require.Equal(t, 1, res.Capped)
		require.Equal(t, dl.ID, b.waitDead(t, bad.ID)[0].ID, "kept at the cap")
		require.Equal(t, 2.0, testkit.Metric(t, b.reg, "outboxd_dlq_redriven_total", "category", outbox.CategoryPoison))
		require.Equal(t, 1.0, testkit.Metric(t, b.reg, "outboxd_dlq_redrive_capped"))

		// An operator's replay starts the count again.
		_, err = b.op.ReplayDLQ(ctx, operator.DLQAction{IDs: []string{dl.ID}})
		require.NoError(t, err)
		n, err := b.rc.Redrives(ctx, b.keys, []string{bad.ID})
		require.NoError(t, err)
		require.Equal(t, []int64{0}, n)
	})

	// A held category is never re-driven, however old, while another
	// category's rule runs; a rule may not name it.
	t.Run("HeldNeverComesBack", func(t *testing.T) {
		t.Parallel()
		policy := operator.RedrivePolicy{Rules: []operator.RedriveRule{{Category: outbox.CategoryInfrastructure, After: time.Minute, Max: 3}},
			Hold: []string{outbox.CategoryPoison}}
		b := setupRedrive(t, policy)
		evs := b.write(t, "held")
		b.failing.Store(evs[0].ID, true)
		require.NoError(t, b.rc.Publisher(b.keys, nil, nil).PublishEvents(ctx, []*outbox.Event{evs[0]}, outbox.OriginOutbox))
		dl := b.waitDead(t, evs[0].ID)[0]
		require.Equal(t, outbox.CategoryPoison, dl.Category)
		for range 3 {
			b.advance(24 * time.Hour)
			res, err := b.redriver.Pass(ctx)
			require.NoError(t, err)
			require.Empty(t, res.Redriven[outbox.CategoryPoison])
			require.Zero(t, res.Capped)
		}
		require.Equal(t, dl.ID, b.waitDead(t, evs[0].ID)[0].ID)
		require.Equal(t, outbox.StateFailed, testkit.Event(t, b.st, evs[0].ID).State())
		n, err := b.rc.Redrives(ctx, b.keys, []string{evs[0].ID})
		require.NoError(t, err)
		require.Equal(t, []int64{0}, n)

		policy.Rules = append(policy.Rules, operator.RedriveRule{Category: outbox.CategoryPoison, After: time.Minute, Max: 1})
		require.ErrorContains(t, policy.Validate(), `category "poison" is held`)
	})
}

func TestParseRedriveRule(t *testing.T) {
	t.Parallel()
	r, err := operator.ParseRedriveRule("infrastructure=10m:3")
	require.NoError(t, err)
	require.Equal(t, operator.RedriveRule{Category: "infrastructure", After: 10 * time.Minute, Max: 3}, r)
	r, err = operator.ParseRedriveRule("poison=1h")
	require.NoError(t, err)
	require.Equal(t, operator.RedriveMaxDefault, r.Max)
	for _, bad := range []string{"", "infrastructure", "=10m", "x=", "x=soon", "x=10m:0", "x=10m:many", "x=10ms"} {
		_, err := operator.ParseRedriveRule(bad)
		require.Error(t, err, bad)
	}
}
