package stream_test

import (
	"context"
	"fmt"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/outboxd/outboxd/internal/stream"
	"github.com/outboxd/outboxd/internal/testkit"
)

// entriesOf returns the ids left in the stream key.
func (b *testBundle) entriesOf(t *testing.T, key string) []string {
	t.Helper()
	msgs, err := b.rdb.XRange(context.Background(), key, "-", "+").Result()
	require.NoError(t, err)
	ids := make([]string, len(msgs))
	for i, m := range msgs {
		ids[i] = m.ID
	}
	return ids
}

// trimmed trims the stream of keys and its replay lane and sums the
// entries removed.
func trimmed(t *testing.T, c *stream.Client, keys stream.Keys, retention time.Duration) int64 {
	t.Helper()
	res, err := c.Trim(context.Background(), keys, retention)
	require.NoError(t, err)
	var n int64
	for _, r := range res {
		n += r.Entries
	}
	return n
}

func TestTrim(t *testing.T) {
	t.Parallel()
	ctx := context.Background()

	t.Run("KeepsWhatASlowerGroupHasNotAcknowledged", func(t *testing.T) {
		t.Parallel()
		b := setup(t, nil)
		ids := b.add(t, b.keys.Stream(), "p", 10)
		ours := b.c.Group(b.keys, "w")
		_, err := ours.Ensure(ctx)
		require.NoError(t, err)
		got, err := ours.Read(ctx, ">", 10, -1)
		require.NoError(t, err)
		_, err = ours.Finish(ctx, stream.Finish{Ack: entryIDs(got)})
		require.NoError(t, err)

		// A user's own group, slower: it read 4 and acknowledged 2.
		slow := b.c.Group(stream.NewKeys(b.keys.Name(), "audit"), "a")
		require.NoError(t, b.rdb.XGroupCreate(ctx, b.keys.Stream(), "audit", "0").Err())
		_, err = slow.Read(ctx, ">", 4, -1)
		require.NoError(t, err)
		require.NoError(t, b.rdb.XAck(ctx, b.keys.Stream(), "audit", ids[0], ids[1]).Err())

		require.Equal(t, int64(2), trimmed(t, b.c, b.keys, 0))
		require.Equal(t, ids[2:], b.entriesOf(t, b.keys.Stream()), "its pending and unread entries stay")
		require.Zero(t, trimmed(t, b.c, b.keys, 0), "trimming again removes nothing more")

		// It acknowledges its pending entries but has read no further:
		// what it has not read stays.
		require.NoError(t, b.rdb.XAck(ctx, b.keys.Stream(), "audit", ids[2], ids[3]).Err())
		require.Equal(t, int64(2), trimmed(t, b.c, b.keys, 0))
		require.Equal(t, ids[4:], b.entriesOf(t, b.keys.Stream()))

		// It reads and acknowledges the rest: nothing is needed any more.
		rest, err := slow.Read(ctx, ">", 10, -1)
		require.NoError(t, err)
		require.NoError(t, b.rdb.XAck(ctx, b.keys.Stream(), "audit", entryIDs(rest)...).Err())
		require.Equal(t, int64(6), trimmed(t, b.c, b.keys, 0))
		require.Empty(t, b.entriesOf(t, b.keys.Stream()))
	})

	t.Run("AGroupThatReadNothingKeepsEverything", func(t *testing.T) {
		t.Parallel()
		b := setup(t, nil)
		ids := b.add(t, b.keys.Stream(), "p", 5)
		require.Zero(t, trimmed(t, b.c, b.keys, 0), "no group yet: nothing is trimmed")
		_, err := b.c.Group(b.keys, "w").Ensure(ctx)
		require.NoError(t, err)
		require.Zero(t, trimmed(t, b.c, b.keys, 0))
		require.Equal(t, ids, b.entriesOf(t, b.keys.Stream()))
		require.Zero(t, trimmed(t, b.c, stream.NewKeys(b.keys.Name()+"-none", "g"), 0), "no stream: no error")
	})

	t.Run("KeepsAcknowledgedEntriesForTheRetention", func(t *testing.T) {
		t.Parallel()
		b := setup(t, nil)
		b.add(t, b.keys.Stream(), "p", 5)
		g := b.c.Group(b.keys, "w")
		_, err := g.Ensure(ctx)
		require.NoError(t, err)
		got, err := g.Read(ctx, ">", 5, -1)
		require.NoError(t, err)
		_, err = g.Finish(ctx, stream.Finish{Ack: entryIDs(got)})
		require.NoError(t, err)
		require.Zero(t, trimmed(t, b.c, b.keys, time.Hour), "acknowledged, but younger than the retention")
		require.Equal(t, int64(5), trimmed(t, b.c, b.keys, 0))
	})

	t.Run("TrimsTheReplayLane", func(t *testing.T) {
		t.Parallel()
		b := setup(t, nil)
		lane := b.keys.ReplayLane()
		ids := b.add(t, lane.Stream(), "p", 3)
		g := b.c.Group(lane, "w")
		_, err := g.Ensure(ctx)
		require.NoError(t, err)
		got, err := g.Read(ctx, ">", 2, -1)
		require.NoError(t, err)
		_, err = g.Finish(ctx, stream.Finish{Ack: entryIDs(got)})
		require.NoError(t, err)
		res, err := b.c.Trim(ctx, b.keys, 0)
		require.NoError(t, err)
		require.Len(t, res, 2)
		require.Equal(t, stream.Trimmed{Key: b.keys.Stream()}, res[0])
		require.Equal(t, lane.Stream(), res[1].Key)
		require.Equal(t, int64(2), res[1].Entries)
		require.Equal(t, ids[2:], b.entriesOf(t, lane.Stream()), "the unread entry stays")
	})

	t.Run("WhileAnotherWorkerReclaimsNothingIsLost", func(t *testing.T) {
		t.Parallel()
		b := setup(t, nil)
		const n = 3000
		ids := b.add(t, b.keys.Stream(), "p", n/2)
		dead := b.c.Group(b.keys, "dead")
		_, err := dead.Ensure(ctx)
		require.NoError(t, err)
		// A consumer that died holding every entry it read.
		_, err = dead.Read(ctx, ">", n/2, -1)
		require.NoError(t, err)

		stop := make(chan struct{})
		var trims sync.WaitGroup
		var removed atomic.Int64
		trims.Add(1)
		go func() { // the dispatcher's leader, trimming all along
			defer trims.Done()
			for {
				res, err := b.c.Trim(ctx, b.keys, 0)
				if err == nil {
					for _, r := range res {
						removed.Add(r.Entries)
					}
				}
				select {
				case <-stop:
					return
				default:
				}
			}
		}()
		ids = append(ids, b.add(t, b.keys.Stream(), "p", n/2)...) // and the dispatcher adding

		acked := map[string]bool{}
		alive := b.c.Group(b.keys, "alive")
		for deadline := time.Now().Add(30 * time.Second); len(acked) < n; {
			require.True(t, time.Now().Before(deadline), "processed %d of %d", len(acked), n)
			claimed, _, err := alive.Reclaim(ctx, "0-0", 0, 100)
			require.NoError(t, err)
			fresh, err := alive.Read(ctx, ">", 100, -1)
			require.NoError(t, err)
			var ack []string
			for _, e := range append(claimed, fresh...) {
				require.NotNil(t, e.Values, "entry %s was trimmed before it was acknowledged", e.ID)
				ack = append(ack, e.ID)
				acked[e.ID] = true
			}
			_, err = alive.Finish(ctx, stream.Finish{Ack: ack})
			require.NoError(t, err)
		}
		close(stop)
		trims.Wait()
		for _, id := range ids {
			require.True(t, acked[id], "entry %s was never processed", id)
		}
		_, err = b.c.Trim(ctx, b.keys, 0)
		require.NoError(t, err)
		require.Empty(t, b.entriesOf(t, b.keys.Stream()), "once all is acknowledged all is trimmed")
		require.Positive(t, removed.Load())
	})
}

// TestFull runs the writes of a worker and of the trim against a Redis of
// the test's own over its maxmemory (noeviction): the XADD and the
// MULTI/EXEC are refused (IsOOM, a hold for the failure policy), the
// acknowledgement of a batch with nothing else to write and the trim go
// through and free memory.
func TestFull(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	srv := testkit.NewRedisServer(t)
	rdb := srv.Client()
	c, err := stream.NewClient(rdb, nil)
	require.NoError(t, err)
	keys := stream.NewKeys(testkit.Name("full"), "")
	g := c.Group(keys, "w")
	_, err = g.Ensure(ctx)
	require.NoError(t, err)
	pub := c.Publisher(keys, nil, nil)
	msgs := make([]string, 1000)
	for i := range msgs {
		msgs[i] = fmt.Sprintf(`{"id":"%04d","pad":"%0200d"}`, i, i)
	}
	for range 5 {
		require.NoError(t, pub.Publish(ctx, msgs))
	}
	got, err := g.Read(ctx, ">", 5000, -1)
	require.NoError(t, err)

	mem, err := c.Memory(ctx)
	require.NoError(t, err)
	require.Equal(t, stream.PolicyNoEviction, mem.Policy)
	require.False(t, mem.Evicts())
	require.NoError(t, rdb.ConfigSet(ctx, "maxmemory", fmt.Sprint(mem.Used-10_000)).Err())
	mem, err = c.Memory(ctx)
	require.NoError(t, err)
	require.True(t, mem.Above(85))
	require.True(t, mem.Above(99) || mem.Used < mem.Max)

	err = pub.Publish(ctx, msgs[:1])
	require.True(t, stream.IsOOM(err), "%v", err)
	require.True(t, stream.Failure(err).Hold)
	_, err = g.Finish(ctx, stream.Finish{Ack: entryIDs(got[:1]), DeadLetters: []stream.DeadLetter{{Code: "x", EntryID: got[0].ID}}})
	require.True(t, stream.IsOOM(err), "a MULTI/EXEC is refused: %v", err)
	require.True(t, stream.Failure(err).Hold)

	acked, err := g.Finish(ctx, stream.Finish{Ack: entryIDs(got)})
	require.NoError(t, err, "an acknowledgement alone goes through")
	require.Equal(t, int64(len(got)), acked)
	require.Equal(t, int64(len(got)), trimmed(t, c, keys, 0), "the trim goes through")
	require.Eventually(t, func() bool {
		return pub.Publish(ctx, msgs[:1]) == nil
	}, 10*time.Second, 10*time.Millisecond, "memory is back")
	pending, err := c.GroupPending(ctx, keys)
	require.NoError(t, err)
	require.Zero(t, pending)
	require.NoError(t, rdb.XInfoGroups(ctx, keys.Stream()).Err())
}
