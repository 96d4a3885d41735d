package httpapi_test

import (
	"context"
	"fmt"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/redis/go-redis/v9"
	"github.com/stretchr/testify/require"

	ostatus "github.com/outboxd/outboxd/internal/status"
	"github.com/outboxd/outboxd/internal/stream"
	"github.com/outboxd/outboxd/internal/testkit"
	"github.com/outboxd/outboxd/reconciler"
	"github.com/outboxd/outboxd/store"
)

// TestStatusLeasesBreakersAndDLQ: the status shows the dispatcher's lease
// (leader, term, checkpoint age), the reconciler's last sweep, the breaker
// states and halted retries of this process's registry, and the age of the
// oldest dead letter; the parts it cannot know are absent.
func TestStatusLeasesBreakersAndDLQ(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	st := testkit.NewStore(t)
	rdb, prefix := testkit.NewRedis(t)
	name := prefix + ":stream"
	now := time.Now().UTC().Truncate(time.Millisecond)
	rc, err := stream.NewClient(rdb, nil)
	require.NoError(t, err)
	status := &ostatus.Status{Store: st, Redis: rc, Stream: name, Group: "g",
		DispatcherLease: "dispatch:" + name, ReconcilerLease: "reconcile:" + name, Now: func() time.Time { return now }}

	snap := status.Snapshot(ctx)
	require.Nil(t, snap.Dispatcher, "no dispatcher ever ran")
	require.Nil(t, snap.Reconciler)
	require.Nil(t, snap.Breakers)
	require.Nil(t, snap.DLQ.OldestAgeSeconds, "an empty DLQ has no oldest entry")
	require.Empty(t, snap.Unavailable)

	l, err := st.AcquireLease(ctx, status.DispatcherLease, "host-1", now.Add(-5*time.Second), 15*time.Second)
	require.NoError(t, err)
	require.NoError(t, st.SaveCheckpoint(ctx, l, store.Checkpoint{At: now.Add(-2 * time.Second)}))
	r, err := st.AcquireLease(ctx, status.ReconcilerLease, "host-2", now.Add(-time.Minute), 15*time.Second)
	require.NoError(t, err)
	require.NoError(t, st.SaveCheckpoint(ctx, r, store.Checkpoint{At: now.Add(-50 * time.Second)}))
	dlqID := now.Add(-90 * time.Second).UnixMilli()
	require.NoError(t, rdb.XAdd(ctx, &redis.XAddArgs{Stream: stream.NewKeys(name, "").DLQ(), ID: fmt.Sprintf("%d-0", dlqID), Values: map[string]any{"reason": "r"}}).Err())

	reg := prometheus.NewRegistry()
	breakers := prometheus.NewGaugeVec(prometheus.GaugeOpts{Name: "outboxd_worker_breaker_state", ConstLabels: prometheus.Labels{"stream": name}}, []string{"breaker"})
	breakers.WithLabelValues("postgres").Set(2)
	other := prometheus.NewGaugeVec(prometheus.GaugeOpts{Name: "outboxd_dispatcher_breaker_state"}, []string{"stream"})
	other.WithLabelValues("another-stream").Set(2)
	halted := prometheus.NewGaugeVec(prometheus.GaugeOpts{Name: "outboxd_retries_halted", ConstLabels: prometheus.Labels{"stream": name}}, []string{"component", "class"})
	halted.WithLabelValues("worker", "record").Set(1)
	halted.WithLabelValues("dispatcher", "redis").Set(0)
	reg.MustRegister(breakers, other, halted)
	status.Gatherer = reg
	status.LastSweep = func() *reconciler.Report { return &reconciler.Report{Stream: name, Scanned: 3} }

	snap = status.Snapshot(ctx)
	d := snap.Dispatcher
	require.NotNil(t, d)
	require.Equal(t, "host-1", d.Leader)
	require.True(t, d.LeaderAlive)
	require.Equal(t, int64(1), d.Term)
	require.InDelta(t, 2, *d.CheckpointAgeSeconds, 0.001)
	rec := snap.Reconciler
	require.NotNil(t, rec)
	require.False(t, rec.LeaderAlive, "its lease expired")
	require.InDelta(t, 50, *rec.LastSweepAgeSeconds, 0.001)
	require.Equal(t, 3, rec.LastReport.Scanned)
	require.Equal(t, []ostatus.Breaker{{Component: "worker", Name: "postgres", State: "open"}}, snap.Breakers, "only this stream's")
	require.Equal(t, []ostatus.HaltedRetries{{Component: "worker", Class: "record"}}, snap.RetriesHalted)
	require.Equal(t, int64(1), snap.DLQ.Length)
	require.InDelta(t, 90, *snap.DLQ.OldestAgeSeconds, 0.001)
}
