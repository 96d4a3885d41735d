package stream_test

import (
	"context"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"
	"github.com/stretchr/testify/require"

	"github.com/outboxd/outboxd/internal/failpolicy"
	"github.com/outboxd/outboxd/internal/stream"
	"github.com/outboxd/outboxd/outbox"
)

func TestGroup(t *testing.T) {
	t.Parallel()
	ctx := context.Background()

	t.Run("EnsureAndRead", func(t *testing.T) {
		t.Parallel()
		b := setup(t, nil)
		ids := b.add(t, b.keys.Stream(), "{}", 3) // before the group: read all the same
		g := b.c.Group(b.keys, "c")
		created, err := g.Ensure(ctx)
		require.NoError(t, err)
		require.True(t, created)
		created, err = g.Ensure(ctx)
		require.NoError(t, err, "BUSYGROUP is no error")
		require.False(t, created)

		got, err := g.Read(ctx, ">", 2, -1)
		require.NoError(t, err)
		require.Equal(t, ids[:2], entryIDs(got))
		got, err = g.Read(ctx, "0", 10, -1)
		require.NoError(t, err)
		require.Equal(t, ids[:2], entryIDs(got), "its own pending entries")
		got, err = g.Read(ctx, ">", 10, 0) // never BLOCK 0 (forever): a millisecond
		require.NoError(t, err)
		require.Equal(t, ids[2:], entryIDs(got))
		started := time.Now()
		got, err = g.Read(ctx, ">", 10, 0)
		require.NoError(t, err)
		require.Empty(t, got, "nothing new is no error")
		require.Less(t, time.Since(started), 5*time.Second)

		_, err = b.c.Group(stream.NewKeys(b.keys.Stream()+"-none", "g"), "c").Read(ctx, ">", 1, -1)
		require.True(t, stream.IsNoGroup(err), "%v", err)
	})

	t.Run("OwnPendingAndEntries", func(t *testing.T) {
		t.Parallel()
		b := setup(t, nil)
		ids := b.add(t, b.keys.Stream(), "p", 5)
		mine, other := b.c.Group(b.keys, "c"), b.c.Group(b.keys, "d")
		none, err := mine.OwnPending(ctx, "", 10)
		require.NoError(t, err, "no group: nothing pending")
		require.Empty(t, none)
		_, err = mine.Ensure(ctx)
		require.NoError(t, err)
		_, err = mine.Read(ctx, ">", 3, -1)
		require.NoError(t, err)
		_, err = other.Read(ctx, ">", 2, -1)
		require.NoError(t, err)

		got, err := mine.OwnPending(ctx, "", 2)
		require.NoError(t, err)
		require.Equal(t, ids[:2], got, "its own, a page at a time")
		got, err = mine.OwnPending(ctx, got[1], 10)
		require.NoError(t, err)
		require.Equal(t, ids[2:3], got, "after the page, not the other consumer's")
		deliveries, err := b.c.Deliveries(ctx, b.keys, ids[:1])
		require.NoError(t, err)
		require.Equal(t, int64(1), deliveries[0].Deliveries, "listing delivers nothing")

		require.NoError(t, b.rdb.XDel(ctx, b.keys.Stream(), ids[1]).Err())
		entries, err := mine.Entries(ctx, ids[:3])
		require.NoError(t, err)
		require.Equal(t, ids[:3], entryIDs(entries))
		require.NotNil(t, entries[0].Values)
		require.Nil(t, entries[1].Values, "deleted: no values")
		require.NotNil(t, entries[2].Values)
	})

	t.Run("FinishIsOneTransaction", func(t *testing.T) {
		t.Parallel()
		b := setup(t, nil)
		ids := b.add(t, b.keys.Stream(), "p", 3)
		g := b.c.Group(b.keys, "c")
		_, err := g.Ensure(ctx)
		require.NoError(t, err)
		_, err = g.Read(ctx, ">", 3, -1)
		require.NoError(t, err)
		require.NoError(t, b.rdb.HSet(ctx, b.keys.Failures(), ids[0], 1).Err())

		budgets, err := g.Budgets(ctx, ids)
		require.NoError(t, err)
		require.Equal(t, []int64{1, 0, 0}, budgets)
		acked, err := g.Finish(ctx, stream.Finish{
			DeadLetters: []stream.DeadLetter{{Category: outbox.CategoryNonRetryable, Code: "bad_message", EntryID: ids[0], Payload: "p"}},
			Ack:         ids[:2], Charge: map[string]int64{ids[2]: 2},
		})
		require.NoError(t, err)
		require.Equal(t, int64(2), acked)
		budgets, err = g.Budgets(ctx, ids)
		require.NoError(t, err)
		require.Equal(t, []int64{0, 0, 2}, budgets, "acknowledged entries leave the budgets")
		dls, err := b.c.DeadLetters(ctx, b.keys, "", 10)
		require.NoError(t, err)
		require.Len(t, dls, 1)
		require.Equal(t, [3]string{b.keys.Stream(), "g", "c"}, [3]string{dls[0].Stream, dls[0].Group, dls[0].Consumer}, "filled in")
		p, err := b.rdb.XPending(ctx, b.keys.Stream(), "g").Result()
		require.NoError(t, err)
		require.Equal(t, int64(1), p.Count)
		acked, err = g.Finish(ctx, stream.Finish{Ack: ids[:1]})
		require.NoError(t, err)
		require.Zero(t, acked, "acknowledged already")
		acked, err = g.Finish(ctx, stream.Finish{})
		require.NoError(t, err)
		require.Zero(t, acked)

		// A command that fails makes Finish fail (Redis runs the others:
		// MULTI/EXEC has no rollback; the worker delivers the batch again).
		require.NoError(t, b.rdb.Set(ctx, b.keys.Failures(), "not a hash", 0).Err())
		_, err = g.Finish(ctx, stream.Finish{Ack: ids[2:]})
		require.True(t, redis.HasErrorPrefix(err, "WRONGTYPE"), "%v", err)
	})

	t.Run("ReclaimTouchAndConsumers", func(t *testing.T) {
		t.Parallel()
		b := setup(t, nil)
		ids := b.add(t, b.keys.Stream(), "p", 3)
		dead, live := b.c.Group(b.keys, "dead"), b.c.Group(b.keys, "live")
		_, err := dead.Ensure(ctx)
		require.NoError(t, err)
		_, err = dead.Read(ctx, ">", 3, -1)
		require.NoError(t, err)
		// One of them is trimmed while pending: it comes back without values.
		require.NoError(t, b.rdb.XDel(ctx, b.keys.Stream(), ids[1]).Err())
		seen := map[string]bool{}
		require.Eventually(t, func() bool {
			got, _, err := live.Reclaim(ctx, "0-0", 20*time.Millisecond, 10)
			require.NoError(t, err)
			for _, e := range got {
				require.Equal(t, e.ID == ids[1], e.Values == nil, "trimmed: %s", e.ID)
				seen[e.ID] = true
			}
			return len(seen) == 3
		}, 5*time.Second, 10*time.Millisecond)

		// Touching restarts the idle time, not the delivery count.
		pendingOf := func() []redis.XPendingExt {
			p, err := b.rdb.XPendingExt(ctx, &redis.XPendingExtArgs{Stream: b.keys.Stream(), Group: "g", Start: "-", End: "+", Count: 10}).Result()
			require.NoError(t, err)
			return p
		}
		require.Eventually(t, func() bool {
			for _, p := range pendingOf() {
				if p.Idle < 100*time.Millisecond {
					return false
				}
			}
			return true
		}, 5*time.Second, 10*time.Millisecond)
		before := pendingOf()
		require.NoError(t, live.Touch(ctx, 50*time.Millisecond, 100))
		after := pendingOf()
		require.Len(t, after, 2)
		for i, p := range after {
			require.Equal(t, "live", p.Consumer)
			require.Less(t, p.Idle, before[i].Idle)
			require.Equal(t, before[i].RetryCount, p.RetryCount)
		}

		consumers, err := live.Consumers(ctx)
		require.NoError(t, err)
		pending := map[string]int64{}
		for _, c := range consumers {
			pending[c.Name] = c.Pending
		}
		require.Equal(t, map[string]int64{"dead": 0, "live": 2}, pending)
		removed, err := live.RemoveConsumer(ctx, "live")
		require.NoError(t, err)
		require.False(t, removed, "it holds entries")
		removed, err = live.RemoveConsumer(ctx, "dead")
		require.NoError(t, err)
		require.True(t, removed)
	})

	t.Run("Deliveries", func(t *testing.T) {
		t.Parallel()
		b := setup(t, nil)
		ids := b.add(t, b.keys.Stream(), "p", 3)
		got, err := b.c.Deliveries(ctx, b.keys, ids[:1])
		require.NoError(t, err)
		require.Equal(t, []stream.Delivery{{}}, got, "no group: waiting")
		g := b.c.Group(b.keys, "c")
		_, err = g.Ensure(ctx)
		require.NoError(t, err)
		_, err = g.Read(ctx, ">", 2, -1)
		require.NoError(t, err)
		require.NoError(t, b.rdb.HSet(ctx, b.keys.Failures(), ids[0], 1).Err())
		_, err = g.Finish(ctx, stream.Finish{Ack: ids[1:2]})
		require.NoError(t, err)
		got, err = b.c.Deliveries(ctx, b.keys, ids)
		require.NoError(t, err)
		require.True(t, got[0].Pending)
		require.Equal(t, "c", got[0].Consumer)
		require.Equal(t, [2]int64{1, 1}, [2]int64{got[0].Deliveries, got[0].Failed})
		require.Equal(t, stream.Delivery{Delivered: true}, got[1], "acknowledged")
		require.Equal(t, stream.Delivery{}, got[2], "waiting")
		none, err := b.c.Deliveries(ctx, b.keys, nil)
		require.NoError(t, err)
		require.Empty(t, none)
	})

	t.Run("Figures", func(t *testing.T) {
		t.Parallel()
		b := setup(t, nil)
		f := b.c.Figures(ctx, b.keys)
		require.NoError(t, f.StreamErr)
		require.NoError(t, f.DLQErr)
		require.Zero(t, f.Length)
		require.Nil(t, f.DLQOldest)
		b.add(t, b.keys.Stream(), "p", 2)
		dlq := b.add(t, b.keys.DLQ(), "p", 1)
		g := b.c.Group(b.keys, "c")
		_, err := g.Ensure(ctx)
		require.NoError(t, err)
		_, err = g.Read(ctx, ">", 1, -1)
		require.NoError(t, err)
		f = b.c.Figures(ctx, b.keys)
		require.Equal(t, [3]int64{2, 1, 1}, [3]int64{f.Length, f.Pending, f.DLQLength})
		at, ok := stream.IDTime(dlq[0])
		require.True(t, ok)
		require.Equal(t, at, *f.DLQOldest)
		require.NoError(t, b.rdb.Set(ctx, b.keys.Stream(), "x", 0).Err())
		f = b.c.Figures(ctx, b.keys)
		require.Error(t, f.StreamErr)
		require.NoError(t, f.DLQErr)
	})

	// The replay lane's figures: no lane yet, a lane no worker read yet
	// (every entry is lag), then the group's progress on it; and the
	// halted retries of the group's workers.
	t.Run("FiguresOfTheReplayLane", func(t *testing.T) {
		t.Parallel()
		b := setup(t, nil)
		f := b.c.Figures(ctx, b.keys)
		require.NoError(t, f.Replay.Err)
		require.Equal(t, int64(0), *f.Replay.Lag, "no lane: nothing to read")
		lane := b.keys.ReplayLane()
		b.add(t, lane.Stream(), "p", 3)
		f = b.c.Figures(ctx, b.keys)
		require.Equal(t, int64(3), f.Replay.Length)
		require.Equal(t, int64(3), *f.Replay.Lag, "no group on the lane yet")
		g := b.c.Group(lane, "c")
		_, err := g.Ensure(ctx)
		require.NoError(t, err)
		got, err := g.Read(ctx, ">", 2, -1)
		require.NoError(t, err)
		_, err = g.Finish(ctx, stream.Finish{Ack: entryIDs(got[:1])})
		require.NoError(t, err)
		f = b.c.Figures(ctx, lane) // the lane's keys name the same stream
		require.NoError(t, f.Replay.Err)
		require.Equal(t, stream.LaneFigures{Length: 3, Pending: 1, Lag: f.Replay.Lag, Read: 2}, f.Replay)
		require.Equal(t, int64(1), *f.Replay.Lag)
		require.Zero(t, f.Length, "the stream is another key")
		require.Empty(t, f.Halts)

		_, err = b.c.Streak(b.keys, stream.ComponentWorker).Fail(ctx, failpolicy.Failure{Code: "postgres_57P01", Class: failpolicy.ClassInfrastructure, Source: failpolicy.SourcePostgres}, 1)
		require.NoError(t, err)
		f = b.c.Figures(ctx, b.keys)
		require.NoError(t, f.HaltsErr)
		require.Equal(t, []stream.Halt{{Component: stream.ComponentWorker, Class: failpolicy.ClassInfrastructure, Code: "postgres_57P01", Source: failpolicy.SourcePostgres}}, f.Halts)
	})

	// ReadNew waits on the stream and its replay lane at once and returns
	// each one's entries.
	t.Run("ReadNewOfTheStreamAndItsLane", func(t *testing.T) {
		t.Parallel()
		b := setup(t, nil)
		live, lane := b.c.Group(b.keys, "c"), b.c.Group(b.keys.ReplayLane(), "c")
		for _, g := range []*stream.Group{live, lane} {
			_, err := g.Ensure(ctx)
			require.NoError(t, err)
		}
		laneIDs := b.add(t, b.keys.Replay(), "r", 2)
		got, err := stream.ReadNew(ctx, 10, time.Second, live, lane)
		require.NoError(t, err)
		require.Empty(t, got[0])
		require.Equal(t, laneIDs, entryIDs(got[1]), "an idle stream wakes for its lane")
		liveIDs := b.add(t, b.keys.Stream(), "l", 3)
		laneIDs = b.add(t, b.keys.Replay(), "r", 1)
		got, err = stream.ReadNew(ctx, 2, -1, live, lane)
		require.NoError(t, err)
		require.Equal(t, liveIDs[:2], entryIDs(got[0]), "at most count of each")
		require.Equal(t, laneIDs, entryIDs(got[1]))
		got, err = stream.ReadNew(ctx, 10, time.Millisecond, live, lane)
		require.NoError(t, err)
		require.Equal(t, liveIDs[2:], entryIDs(got[0]))
		require.Empty(t, got[1])
		_, err = stream.ReadNew(ctx, 1, -1, live, b.c.Group(b.keys.ReplayLane(), "other"))
		require.Error(t, err, "one consumer only")
	})

	t.Run("ScanBack", func(t *testing.T) {
		t.Parallel()
		b := setup(t, nil)
		ids := b.add(t, b.keys.Stream(), "a", 3)
		b.add(t, b.keys.Stream(), "b", 2)
		match := func(e stream.Entry) bool { return e.Payload() == "a" }
		found, scanned, partial, err := b.c.ScanBack(ctx, b.keys.Stream(), time.Time{}, 100, match)
		require.NoError(t, err)
		require.Equal(t, ids, entryIDs(found), "oldest first")
		require.Equal(t, 5, scanned)
		require.False(t, partial)
		found, scanned, partial, err = b.c.ScanBack(ctx, b.keys.Stream(), time.Time{}, 3, match)
		require.NoError(t, err)
		require.Equal(t, ids[2:], entryIDs(found))
		require.Equal(t, 3, scanned)
		require.True(t, partial, "stopped at the bound")
		found, _, _, err = b.c.ScanBack(ctx, b.keys.Stream(), time.Now().Add(time.Hour), 100, match)
		require.NoError(t, err)
		require.Empty(t, found, "nothing added since")
	})
}

func entryIDs(entries []stream.Entry) []string {
	out := make([]string, len(entries))
	for i, e := range entries {
		out[i] = e.ID
	}
	return out
}
