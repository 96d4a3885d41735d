package operator_test

import (
	"context"
	"sync/atomic"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/stretchr/testify/require"

	"github.com/outboxd/outboxd/internal/operator"
	"github.com/outboxd/outboxd/internal/testkit"
)

// TestReplayDuration: a replay of two chunks that took 90 seconds from its
// first chunk to its last is observed once, as 90 s, in
// outboxd_replay_duration_seconds; a dry run and a chunk that is not the
// last observe nothing.
func TestReplayDuration(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	b := setup(t)
	b.write(t, "d1", "d2")
	var clock atomic.Int64
	clock.Store(b.now.UnixNano())
	reg := prometheus.NewRegistry()
	op, err := operator.New(&operator.Config{Store: b.st, Redis: b.rc, Stream: b.keys.Name(), Group: b.keys.Group(), Registerer: reg,
		Now: func() time.Time { return time.Unix(0, clock.Load()) }}, testkit.Logger(t))
	require.NoError(t, err)
	window := operator.EventsQuery{From: time.Date(2026, 11, 1, 0, 0, 0, 0, time.UTC), To: time.Date(2026, 11, 2, 0, 0, 0, 0, time.UTC), Limit: 1}
	count := func() float64 {
		return testkit.Metric(t, reg, "outboxd_replay_duration_seconds")
	}

	_, err = op.Replay(ctx, operator.ReplayQuery{EventsQuery: window, DryRun: true})
	require.NoError(t, err)
	first, err := op.Replay(ctx, operator.ReplayQuery{EventsQuery: window})
	require.NoError(t, err)
	require.False(t, first.Done)
	require.Zero(t, count(), "neither a dry run nor a chunk before the last")

	clock.Add(int64(90 * time.Second))
	next := window
	next.After = first.Next
	last, err := op.Replay(ctx, operator.ReplayQuery{EventsQuery: next, Started: *first.Started})
	require.NoError(t, err)
	if !last.Done { // the chunk of exactly Limit reads one more, empty
		next.After = last.Next
		last, err = op.Replay(ctx, operator.ReplayQuery{EventsQuery: next, Started: *first.Started})
		require.NoError(t, err)
	}
	require.True(t, last.Done)
	require.Equal(t, 1.0, count())
	mfs, err := reg.Gather()
	require.NoError(t, err)
	var sum float64
	for _, mf := range mfs {
		if mf.GetName() == "outboxd_replay_duration_seconds" {
			sum = mf.GetMetric()[0].GetHistogram().GetSampleSum()
		}
	}
	require.Equal(t, 90.0, sum)
}
