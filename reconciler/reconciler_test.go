package reconciler_test

import (
	"context"
	"encoding/json"
	"slices"
	"sync"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/outboxd/outboxd/internal/fault"
	"github.com/outboxd/outboxd/internal/stream"
	"github.com/outboxd/outboxd/internal/testkit"
	"github.com/outboxd/outboxd/outbox"
	"github.com/outboxd/outboxd/reconciler"
	"github.com/outboxd/outboxd/store"
)

func TestReconciler(t *testing.T) {
	t.Parallel()
	ctx := context.Background()

	t.Run("Defaults", func(t *testing.T) {
		t.Parallel()
		b := setup(t)
		r, err := reconciler.New(b.st, b.rdb, nil, nil)
		require.NoError(t, err)
		// A fresh original is younger than the 5 minute default: untouched.
		b.clock.Set(time.Now())
		b.write(t)
		rep, err := r.Sweep(ctx)
		require.NoError(t, err)
		require.Equal(t, outbox.StreamDefault, rep.Stream)
		require.Zero(t, rep.Scanned)
		require.False(t, rep.Failed())
	})

	t.Run("InvalidConfigNamesTheField", func(t *testing.T) {
		t.Parallel()
		b := setup(t)
		for field, cfg := range map[string]*reconciler.Config{
			"MinAge":       {MinAge: -time.Second},
			"RequeueAfter": {RequeueAfter: -time.Second},
			"Limit":        {Limit: -1},
			"Every":        {Every: -time.Second},
			"LeaseTTL":     {LeaseTTL: time.Millisecond},
			"Interval":     {Interval: -time.Second},
			"Routes":       {Routes: outbox.Routes{"a": ""}},
		} {
			_, err := reconciler.New(b.st, b.rdb, cfg, nil)
			require.ErrorContains(t, err, field)
		}
		_, err := reconciler.New(b.st, b.rdb, &reconciler.Config{RequeueAfter: time.Microsecond}, nil)
		require.ErrorContains(t, err, "RequeueAfter")
	})

	t.Run("ClaimsOnlyOldUnclaimedUnsyncedUnparked", func(t *testing.T) {
		t.Parallel()
		// Each case writes one original at t0 and shapes it; the sweep runs
		// at now = t0 + age.
		type shape func(t *testing.T, b *testBundle, id string, now time.Time)
		synced := func(t *testing.T, b *testBundle, id string, _ time.Time) { b.markSynced(t, id, t0.Add(time.Second)) }
		failed := func(t *testing.T, b *testBundle, id string, _ time.Time) { b.park(t, id, outbox.CategoryPoison) }
		requeued := func(ago time.Duration) shape {
			return func(t *testing.T, b *testBundle, id string, now time.Time) { b.claimAt(t, id, now.Add(-ago)) }
		}
		old := minAge + time.Second
		for _, tc := range []struct {
			name    string
			age     time.Duration
			shape   shape
			claimed bool
		}{
			{name: "TooYoung", age: minAge - time.Second},
			{name: "ExactlyMinAge", age: minAge},
			{name: "Synced", age: old, shape: synced},
			{name: "Failed", age: old, shape: failed},
			{name: "RecentlyRequeued", age: old, shape: requeued(requeueAfter / 2)},
			{name: "RequeuedExactlyRequeueAfterAgo", age: old, shape: requeued(requeueAfter)},
			{name: "RequeuedLongAgo", age: old, shape: requeued(requeueAfter + time.Millisecond), claimed: true},
			{name: "NeverRequeued", age: old, claimed: true},
		} {
			t.Run(tc.name, func(t *testing.T) {
				t.Parallel()
				b := setup(t)
				id := b.write(t)
				b.clock.Advance(tc.age)
				now := b.clock.Now()
				if tc.shape != nil {
					tc.shape(t, b, id, now)
				}
				before := b.event(t, id)

				rep, err := b.reconciler(t, nil).Sweep(ctx)
				require.NoError(t, err)
				require.False(t, rep.Failed())
				after := b.event(t, id)
				if !tc.claimed {
					require.Zero(t, rep.Scanned)
					require.Empty(t, b.published(t))
					require.Equal(t, before, after)
					return
				}
				require.Equal(t, 1, rep.Scanned)
				require.Equal(t, 1, rep.Claimed)
				require.Equal(t, 1, rep.Published)
				require.Equal(t, []string{id}, b.published(t))
				require.NotNil(t, after.LastRequeuedAt)
				require.True(t, now.Equal(*after.LastRequeuedAt))
				require.Equal(t, before.RequeueCount+1, after.RequeueCount)
				require.Nil(t, after.SyncedAt)
			})
		}
	})

	t.Run("OldestFirstWithinLimitAndNextSweepContinues", func(t *testing.T) {
		t.Parallel()
		b := setup(t)
		// createdAt order differs from insertion (_id) order.
		offsets := []int{4, 0, 6, 2, 5, 1, 3}
		ids := make([]string, len(offsets))
		for i, off := range offsets {
			b.clock.Set(t0.Add(time.Duration(off) * time.Second))
			ids[i] = b.write(t)
		}
		byAge := slices.Clone(ids)
		slices.SortFunc(byAge, func(x, y string) int {
			return offsets[slices.Index(ids, x)] - offsets[slices.Index(ids, y)]
		})
		b.clock.Set(t0.Add(time.Hour))
		cfg := b.config()
		cfg.Limit = 3
		r := b.reconciler(t, cfg)

		for i, want := range []int{3, 3, 1, 0} {
			rep, err := r.Sweep(ctx)
			require.NoError(t, err)
			require.Equal(t, want, rep.Scanned, "sweep %d", i)
			require.Equal(t, want, rep.Published, "sweep %d", i)
			require.Equal(t, want == 3, rep.LimitReached, "sweep %d", i)
			require.False(t, rep.Failed())
		}
		require.Equal(t, byAge, b.published(t))
		// Reaching the limit is no failure, and the oldest unsynced age
		// counts claimed originals too.
		rep, err := r.Sweep(ctx)
		require.NoError(t, err)
		require.Equal(t, time.Hour, rep.OldestUnsyncedAge)
	})

	t.Run("ConcurrentReconcilersPublishEachOnce", func(t *testing.T) {
		t.Parallel()
		b := setup(t)
		const n, runs = 60, 4
		ids := b.writeAged(t, n)
		reports := make([]reconciler.Report, runs)
		errs := make([]error, runs)
		var wg sync.WaitGroup
		start := make(chan struct{})
		for i := range runs {
			r := b.reconciler(t, nil) // same store, same stream, own instance
			wg.Add(1)
			go func() {
				defer wg.Done()
				<-start
				reports[i], errs[i] = r.Sweep(ctx)
			}()
		}
		close(start)
		wg.Wait()

		var claimed, published, skipped, scanned int
		for i := range runs {
			require.NoError(t, errs[i])
			require.False(t, reports[i].Failed())
			claimed += reports[i].Claimed
			published += reports[i].Published
			skipped += reports[i].Skipped
			scanned += reports[i].Scanned
		}
		require.Equal(t, n, claimed)
		require.Equal(t, n, published)
		require.Equal(t, scanned-n, skipped)

		counts := map[string]int{}
		for _, id := range b.published(t) {
			counts[id]++
		}
		require.Len(t, counts, n)
		for _, id := range ids {
			require.Equal(t, 1, counts[id], "event %s", id)
			require.Equal(t, int64(1), b.event(t, id).RequeueCount)
		}
	})

	t.Run("PartialPublishRollsBackOnlyWhatWasNotAdded", func(t *testing.T) {
		t.Parallel()
		b := setup(t)
		ids := b.writeAged(t, 8)
		cfg := b.config()
		cfg.Partitions = 2
		// One partition's stream key holds a string: its XADDs fail
		// (WRONGTYPE), the other partition's go through, in the same sweep.
		keys := stream.NewKeys(b.stream, "").Split(2)
		blocked := keys.ForEvent("src", b.event(t, ids[0]).DeviceKey).Stream()
		require.NoError(t, b.rdb.Set(ctx, blocked, "not a stream", 0).Err())
		var inBlocked []string
		for _, id := range ids {
			if keys.ForEvent("src", b.event(t, id).DeviceKey).Stream() == blocked {
				inBlocked = append(inBlocked, id)
			}
		}
		require.Less(t, len(inBlocked), len(ids), "both partitions hold candidates")

		rep, err := b.reconciler(t, cfg).Sweep(ctx)
		require.NoError(t, err)
		require.Equal(t, len(ids), rep.Claimed)
		require.Equal(t, len(ids)-len(inBlocked), rep.Published)
		require.Equal(t, len(inBlocked), rep.PublishFailed)
		require.Equal(t, len(inBlocked), rep.RolledBack)
		for _, id := range ids {
			ev := b.event(t, id)
			if slices.Contains(inBlocked, id) {
				require.Nil(t, ev.LastRequeuedAt, "not added: its claim is rolled back")
				require.Zero(t, ev.RequeueCount)
				continue
			}
			require.NotNil(t, ev.LastRequeuedAt, "added: its claim stays")
			require.Equal(t, int64(1), ev.RequeueCount)
		}
		added := slices.DeleteFunc(slices.Clone(ids), func(id string) bool { return slices.Contains(inBlocked, id) })
		other := keys.ForEvent("src", b.event(t, added[0]).DeviceKey).Stream()
		require.ElementsMatch(t, added, streamIDs(t, b.rdb, other), "each added one once")
	})

	t.Run("PublishFailureRollsBackAndFails", func(t *testing.T) {
		t.Parallel()
		b := setup(t)
		srv := testkit.NewRedisServer(t)
		rdb := srv.Client()
		ids := b.writeAged(t, 3)
		// One was requeued long ago: its rollback restores that stamp.
		long := b.clock.Now().Add(-requeueAfter - time.Hour).UTC()
		b.claimAt(t, ids[1], long.Add(-requeueAfter-time.Hour))
		b.claimAt(t, ids[1], long)
		r, err := reconciler.New(b.st, rdb, b.config(), testkit.Logger(t))
		require.NoError(t, err)

		srv.Stop()
		rep, err := r.Sweep(ctx)
		require.NoError(t, err, "per-document failures are in the report")
		require.Equal(t, 3, rep.Claimed)
		require.Equal(t, 3, rep.PublishFailed)
		require.Equal(t, 3, rep.RolledBack)
		require.Zero(t, rep.Published)
		require.True(t, rep.Failed())
		require.Equal(t, float64(3), b.metric(t, "outboxd_reconciler_failed_total", "step", "publish"))
		require.Equal(t, float64(1), b.metric(t, "outboxd_reconciler_sweeps_total", "result", "failed"))

		for i, id := range ids {
			ev := b.event(t, id)
			if i == 1 {
				require.True(t, long.Equal(*ev.LastRequeuedAt))
				require.Equal(t, int64(2), ev.RequeueCount)
				continue
			}
			require.Nil(t, ev.LastRequeuedAt)
			require.Zero(t, ev.RequeueCount)
		}

		// Redis is back (empty): the same documents go out at once, without
		// waiting for RequeueAfter.
		srv.Start()
		rep, err = r.Sweep(ctx)
		require.NoError(t, err)
		require.Equal(t, 3, rep.Published)
		require.False(t, rep.Failed())
		require.ElementsMatch(t, ids, streamIDs(t, rdb, b.stream))
	})

	t.Run("FailedRollbackWaitsForRequeueAfter", func(t *testing.T) {
		t.Parallel()
		b := setup(t)
		srv := testkit.NewRedisServer(t)
		rdb := srv.Client()
		ids := b.writeAged(t, 1)
		r, err := reconciler.New(b.st, rdb, b.config(), testkit.Logger(t))
		require.NoError(t, err)

		srv.Stop()
		b.faults.Arm(reconciler.FaultRollback, 1)
		rep, err := r.Sweep(ctx)
		require.NoError(t, err)
		require.Equal(t, 1, rep.PublishFailed)
		require.Equal(t, 1, rep.RollbackFailed)
		require.True(t, rep.Failed())
		require.NotNil(t, b.event(t, ids[0]).LastRequeuedAt, "the claim stays")

		srv.Start()
		b.clock.Advance(requeueAfter - time.Millisecond)
		rep, err = r.Sweep(ctx)
		require.NoError(t, err)
		require.Zero(t, rep.Scanned)

		b.clock.Advance(2 * time.Millisecond)
		rep, err = r.Sweep(ctx)
		require.NoError(t, err)
		require.Equal(t, 1, rep.Published)
		require.Equal(t, ids, streamIDs(t, rdb, b.stream))
		require.Equal(t, int64(2), b.event(t, ids[0]).RequeueCount)
	})

	t.Run("CrashAfterClaimRepublishedAfterRequeueAfter", func(t *testing.T) {
		t.Parallel()
		b := setup(t)
		ids := b.writeAged(t, 2)
		b.faults.Arm(reconciler.FaultAfterClaim, 1)
		rep, err := b.reconciler(t, nil).Sweep(ctx)
		require.ErrorIs(t, err, fault.ErrInjected)
		require.Equal(t, 2, rep.Claimed, "the sweep claims its candidates at once")
		require.Zero(t, rep.Published)
		require.Empty(t, b.published(t))

		// A restarted reconciler finds them claimed: the crashed claims hold
		// until RequeueAfter has passed.
		r := b.reconciler(t, nil)
		rep, err = r.Sweep(ctx)
		require.NoError(t, err)
		require.Zero(t, rep.Scanned)
		require.Empty(t, b.published(t))

		b.clock.Advance(requeueAfter + time.Millisecond)
		rep, err = r.Sweep(ctx)
		require.NoError(t, err)
		require.Equal(t, 2, rep.Scanned)
		require.Equal(t, 2, rep.Published)
		require.Equal(t, ids, b.published(t))
		for _, id := range ids {
			require.Equal(t, int64(2), b.event(t, id).RequeueCount, "the crashed claim counts")
		}
	})

	t.Run("ParkedAreCountedNeverPublished", func(t *testing.T) {
		t.Parallel()
		b := setup(t)
		ids := b.writeAged(t, 5)
		for i, cat := range []string{outbox.CategoryPoison, outbox.CategoryPoison, outbox.CategoryNonRetryable, "mystery"} {
			b.park(t, ids[i], cat)
		}
		rep, err := b.reconciler(t, nil).Sweep(ctx)
		require.NoError(t, err)
		require.Equal(t, 1, rep.Published)
		require.Equal(t, []string{ids[4]}, b.published(t))
		require.Equal(t, map[string]int64{outbox.CategoryPoison: 2, outbox.CategoryNonRetryable: 1, reconciler.CategoryOther: 1,
			store.CategoryRequeueExhausted: 0}, rep.Failures)
		require.False(t, rep.Failed(), "parked originals are the worker's verdict, not a reconciler failure")
		// Only ids[4] is pending; it was written last, 1s after ids[3].
		require.Equal(t, minAge+time.Second, rep.OldestUnsyncedAge)
	})

	t.Run("ReportAndMetrics", func(t *testing.T) {
		t.Parallel()
		b := setup(t)
		b.writeAged(t, 2)
		rep, err := b.reconciler(t, nil).Sweep(ctx)
		require.NoError(t, err)
		require.Equal(t, float64(2), b.metric(t, "outboxd_reconciler_published_total", "stream", b.stream))
		require.Equal(t, float64(1), b.metric(t, "outboxd_reconciler_sweeps_total", "result", "ok"))

		raw, err := json.Marshal(rep)
		require.NoError(t, err)
		var m map[string]any
		require.NoError(t, json.Unmarshal(raw, &m))
		require.Equal(t, (minAge + 2*time.Second).Seconds(), m["oldestUnsyncedAgeSeconds"])
		require.Equal(t, float64(2), m["published"])
		require.NotContains(t, m, "OldestUnsyncedAge")
		var back reconciler.Report
		require.NoError(t, json.Unmarshal(raw, &back))
		back.Duration, rep.Duration = 0, 0
		require.Equal(t, rep, back)
		require.Contains(t, rep.String(), "published 2")
		require.Contains(t, rep.String(), "oldest unsynced 5m2s")

		// A second reconciler of the same stream shares the registered series.
		b.reconciler(t, nil)
	})

	t.Run("ServiceSweepsOnScheduleUntilStopped", func(t *testing.T) {
		t.Parallel()
		b := setup(t)
		cfg := b.config()
		// The lease runs on the real clock: the fake one jumps by minutes
		// below. The originals, stamped by the fake clock at t0, are old
		// by the real one.
		cfg.Every, cfg.LeaseTTL, cfg.Now = 10*time.Millisecond, 300*time.Millisecond, time.Now
		cfg.Lease = true
		r := b.reconciler(t, cfg)
		require.NoError(t, r.Start(ctx))
		ids := b.writeAged(t, 2)
		require.Eventually(t, func() bool { return b.rdb.XLen(ctx, b.stream).Val() == 2 }, 5*time.Second, 10*time.Millisecond)
		require.ElementsMatch(t, ids, b.published(t))
		require.NotNil(t, r.LastReport())
		require.Equal(t, float64(1), b.metric(t, "outboxd_reconciler_leader"))
		require.NoError(t, r.Stop(ctx))
		<-r.Stopped()
		require.Equal(t, float64(0), b.metric(t, "outboxd_reconciler_leader"))
		require.NoError(t, r.Stop(ctx), "Stop is idempotent")
	})

	t.Run("WithTheLeaseOnlyTheLeaderSweepsOnSchedule", func(t *testing.T) {
		t.Parallel()
		b := setup(t)
		var rs []*reconciler.Reconciler
		for range 3 { // three replicas running reconcile --every --lease
			cfg := b.config()
			// The lease runs on the real clock (writeAged moves the fake one
			// by minutes, which would expire it); the originals, stamped at
			// t0 by the fake clock, are old by the real one.
			cfg.Every, cfg.LeaseTTL, cfg.Registerer, cfg.Now = 10*time.Millisecond, 300*time.Millisecond, nil, time.Now
			cfg.Lease = true
			r := b.reconciler(t, cfg)
			require.NoError(t, r.Start(ctx))
			t.Cleanup(func() { _ = r.Stop(context.Background()) })
			rs = append(rs, r)
		}
		b.writeAged(t, 1)
		require.Eventually(t, func() bool { return b.rdb.XLen(ctx, b.stream).Val() == 1 }, 5*time.Second, 10*time.Millisecond)
		sweepers := func() int {
			n := 0
			for _, r := range rs {
				if r.LastReport() != nil {
					n++
				}
			}
			return n
		}
		require.Eventually(t, func() bool { return sweepers() == 1 }, 5*time.Second, 5*time.Millisecond, "one replica sweeps")
		testkit.Never(t, func() bool { return sweepers() > 1 }, 300*time.Millisecond, 10*time.Millisecond,
			"the others stand by while it holds the lease (30 of its sweeps)")
	})

	t.Run("RespectsContextCancellation", func(t *testing.T) {
		t.Parallel()
		b := setup(t)
		b.writeAged(t, 3)
		cctx, cancel := context.WithCancel(ctx)
		cancel()
		rep, err := b.reconciler(t, nil).Sweep(cctx)
		require.ErrorIs(t, err, context.Canceled)
		require.Zero(t, rep.Claimed)
	})
}
