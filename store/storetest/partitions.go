package storetest

import (
	"context"
	"fmt"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/outboxd/outboxd/outbox"
	"github.com/outboxd/outboxd/store"
)

// partitionChecks are the checks of partitions.
func partitionChecks() []Check {
	return []Check{
		{"PartitionsFeedAndCatchUpPerPartition", checkPartitionFeeds},
		{"PartitionsRecordedOnceAndCompared", checkPartitionsRecorded},
	}
}

// checkPartitionFeeds writes events of many devices with 3 partitions and
// expects every entry to record outbox.PartitionOf its keys, each
// partition's feed and catch-up to deliver exactly that partition's
// entries in order, and the whole stream's (the zero Partition) all of
// them.
func checkPartitionFeeds(t testing.TB, h Harness) {
	b := setup(t, h, Options{})
	ctx := context.Background()
	const n = 3
	b.w = outbox.NewWriter(b.s, &outbox.WriterConfig{Stream: b.stream, Partitions: n, Now: b.clock.Now})
	opts := func(p int) store.FeedOptions {
		return store.FeedOptions{PollInterval: 10 * time.Millisecond, Partition: store.Partition{Index: p, Count: n}}
	}
	feeds := make([]store.Feed, n)
	for p := range feeds {
		f, err := b.s.OpenFeed(ctx, b.stream, nil, opts(p))
		require.NoError(t, err)
		defer f.Close(ctx)
		feeds[p] = f
	}
	ids := b.write(24)
	byPart := map[int][]string{}
	for _, id := range ids {
		ev := b.event(id)
		p := outbox.PartitionOf(ev.SourceKey, ev.DeviceKey, n)
		byPart[p] = append(byPart[p], id)
	}
	require.Len(t, byPart, n, "24 devices fall into every one of 3 partitions")
	all := b.undispatched()
	require.Equal(t, ids, eventIDs(all), "the whole stream is every partition")
	for p := range n {
		got := drain(t, feeds[p], len(byPart[p]))
		require.Equal(t, byPart[p], eventIDs(got), "feed of partition %d", p)
		for _, e := range got {
			require.Equal(t, p, e.Partition)
		}
		page, err := b.s.Undispatched(ctx, b.stream, store.Partition{Index: p, Count: n}, "", 100)
		require.NoError(t, err)
		require.Equal(t, byPart[p], eventIDs(page), "catch-up of partition %d", p)
		// A reopened feed resumes within its partition.
		f, err := b.s.OpenFeed(ctx, b.stream, feeds[p].Position(), opts(p))
		require.NoError(t, err)
		more := b.writeDevice(fmt.Sprintf("p%d", p), n, p)
		require.Equal(t, []string{more}, eventIDs(drain(t, f, 1)))
		require.NoError(t, f.Close(ctx))
	}
}

// writeDevice writes one event of a device (named after prefix) that
// falls into partition p of n, and returns its id.
func (b *bundle) writeDevice(prefix string, n, p int) string {
	b.t.Helper()
	for i := 0; ; i++ {
		in := b.input(fmt.Sprintf("%s-%d", prefix, i))
		if outbox.PartitionOf(in.SourceKey, in.DeviceKey, n) != p {
			continue
		}
		res, err := b.w.Write(context.Background(), []outbox.Input{in})
		require.NoError(b.t, err)
		return res[0].ID
	}
}

// checkPartitionsRecorded: a stream records no number at first; the first
// EnsurePartitions records its number, a second with the same number
// passes and one with another fails naming the procedure; RecordPartitions
// switches only from the number recorded; streams are apart.
func checkPartitionsRecorded(t testing.TB, h Harness) {
	b := setup(t, h, Options{})
	ctx := context.Background()
	got, err := b.s.Partitions(ctx, b.stream)
	require.NoError(t, err)
	require.Zero(t, got)
	require.NoError(t, store.EnsurePartitions(ctx, b.s, b.stream, 4))
	require.NoError(t, store.EnsurePartitions(ctx, b.s, b.stream, 4))
	err = store.EnsurePartitions(ctx, b.s, b.stream, 2)
	var mismatch *store.PartitionsMismatchError
	require.ErrorAs(t, err, &mismatch)
	require.ErrorIs(t, err, store.ErrPartitionsChanged)
	require.Equal(t, 4, mismatch.Recorded)
	require.Contains(t, err.Error(), store.PartitionsProcedure)
	require.ErrorIs(t, b.s.RecordPartitions(ctx, b.stream, 0, 2), store.ErrPartitionsChanged)
	require.ErrorIs(t, b.s.RecordPartitions(ctx, b.stream, 3, 2), store.ErrPartitionsChanged)
	require.NoError(t, b.s.RecordPartitions(ctx, b.stream, 4, 2))
	got, err = b.s.Partitions(ctx, b.stream)
	require.NoError(t, err)
	require.Equal(t, 2, got)
	other, err := b.s.Partitions(ctx, name("other"))
	require.NoError(t, err)
	require.Zero(t, other)
}
