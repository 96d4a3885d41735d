package worker_test

import (
	"context"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/stretchr/testify/require"

	"github.com/outboxd/outboxd/internal/testkit"
	"github.com/outboxd/outboxd/store"
)

// TestWorkerPause: an operator's pause of the group's live projection or
// of its replay lane (recorded in the store) stops that lane in every
// worker, the other lane going on, and the gauge shows it; a resume lets
// it go on.
func TestWorkerPause(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	for _, tc := range []struct {
		name  string
		stage func(group string) store.Stage
	}{
		{"Projection", func(g string) store.Stage { return store.Stage{Kind: store.StageProjection, Group: g} }},
		{"ReplayLane", func(g string) store.Stage { return store.Stage{Kind: store.StageReplay, Group: g} }},
	} {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			b := setup(t)
			stage := tc.stage(b.group)
			_, _, err := store.Pause(ctx, b.st, b.stream, stage, "alice", time.Now())
			require.NoError(t, err)
			live := b.write(t, "live", 5)
			replayed := b.write(t, "replayed", 5)
			b.publish(t, live...)
			b.publishLane(t, replayed...)
			reg := prometheus.NewRegistry()
			rec := &recorder{}
			for _, name := range []string{"w1", "w2"} {
				cfg := b.config(name)
				cfg.Projector, cfg.Registerer = rec, reg
				b.start(t, cfg)
			}
			gauge := func() float64 {
				require.Equal(t, 1, testkit.Series(t, reg, "outboxd_paused", "stage", stage.String()))
				return testkit.Metric(t, reg, "outboxd_paused", "stage", stage.String())
			}
			require.Equal(t, 1.0, gauge())
			open, held := live, replayed
			if stage.Kind == store.StageProjection {
				open, held = replayed, live
			}
			require.Eventually(t, func() bool { return len(rec.projected()) == len(open) }, waitFor, 10*time.Millisecond)
			require.ElementsMatch(t, ids(open), rec.projected(), "the lane not paused goes on")
			require.Never(t, func() bool { return len(rec.projected()) > len(open) }, 3*time.Second, 50*time.Millisecond,
				"the paused lane projected something")

			ok, err := store.Resume(ctx, b.st, b.stream, stage, time.Now())
			require.NoError(t, err)
			require.True(t, ok)
			require.Eventually(t, func() bool { return len(rec.projected()) == len(live)+len(held) }, waitFor, 10*time.Millisecond)
			require.Equal(t, 0.0, gauge())
			b.waitConverged(t)
		})
	}
}

// TestWorkerDropsCancelledReplay: entries of the replay lane added before
// a cancel of the replays are acknowledged unprojected, even when a worker
// had read them; those added after it are projected.
func TestWorkerDropsCancelledReplay(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	b := setup(t)
	old := b.write(t, "old", 4)
	b.publishLane(t, old...)
	require.NoError(t, store.RecordReplayCancel(ctx, b.st, b.stream, time.Now().Add(time.Millisecond)))
	reg := prometheus.NewRegistry()
	rec := &recorder{}
	cfg := b.config("w")
	cfg.Projector, cfg.Registerer = rec, reg
	b.start(t, cfg)
	require.Eventually(t, func() bool {
		return testkit.Metric(t, reg, "outboxd_worker_replay_cancelled_total") == float64(len(old))
	}, waitFor, 10*time.Millisecond)
	fresh := b.write(t, "fresh", 3)
	b.publishLane(t, fresh...)
	require.Eventually(t, func() bool { return len(rec.projected()) == len(fresh) }, waitFor, 10*time.Millisecond)
	require.ElementsMatch(t, ids(fresh), rec.projected(), "only the replay after the cancel is projected")
	require.Eventually(t, func() bool {
		pending, err := testkit.PendingEntries(ctx, b.rdb, b.keys().ReplayLane().Stream(), b.group)
		return err == nil && pending == 0
	}, waitFor, 10*time.Millisecond, "the lane's entries are all acknowledged")
}
