package dispatcher_test

import (
	"context"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/stretchr/testify/require"

	"github.com/outboxd/outboxd/internal/testkit"
	"github.com/outboxd/outboxd/outbox"
	"github.com/outboxd/outboxd/store"
)

// TestPause: an operator's pause of one partition's relay (recorded in the
// store) holds that partition's entries while the others are relayed; a
// pause of the whole relay holds every partition; the gauge shows both;
// the resumes relay what was held.
func TestPause(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	b := setup(t, nil)
	b.partitioned()
	reg := prometheus.NewRegistry()
	cfg := b.config()
	cfg.Partitions, cfg.Registerer = testPartitions, reg
	one := store.Stage{Kind: store.StageRelay, Partition: 2}
	all := store.Stage{Kind: store.StageRelay, Partition: store.StageAllPartitions}
	_, _, err := store.Pause(ctx, b.st, b.stream, one, "alice", time.Now())
	require.NoError(t, err)
	b.start(cfg)
	ids := b.write(40, 10)
	loaded, err := b.st.LoadEvents(ctx, ids)
	require.NoError(t, err)
	var held, open []string
	for _, id := range ids {
		ev := loaded[id].Event
		if outbox.PartitionOf(ev.SourceKey, ev.DeviceKey, testPartitions) == one.Partition {
			held = append(held, id)
		} else {
			open = append(open, id)
		}
	}
	require.NotEmpty(t, held)
	relayed := func(ids []string) int {
		have, n := b.partitionedIDs(), 0
		for _, id := range ids {
			if have[id] {
				n++
			}
		}
		return n
	}
	require.Eventually(t, func() bool { return relayed(open) == len(open) }, 20*time.Second, 20*time.Millisecond,
		"the partitions not paused are relayed")
	require.Never(t, func() bool { return relayed(held) > 0 }, 2*time.Second, 50*time.Millisecond, "the paused partition relayed")
	require.EqualValues(t, len(held), b.undispatched())
	require.Equal(t, 1.0, testkit.Metric(t, reg, "outboxd_paused", "stage", "relay:2"))
	require.Equal(t, 0.0, testkit.Metric(t, reg, "outboxd_paused", "stage", "relay:1"))

	_, _, err = store.Pause(ctx, b.st, b.stream, all, "bob", time.Now())
	require.NoError(t, err)
	ok, err := store.Resume(ctx, b.st, b.stream, one, time.Now())
	require.NoError(t, err)
	require.True(t, ok)
	require.Equal(t, 1.0, testkit.Metric(t, reg, "outboxd_paused", "stage", "relay"))
	more := b.write(20, 10)
	require.Never(t, func() bool { return relayed(more)+relayed(held) > 0 }, 2*time.Second, 50*time.Millisecond,
		"a relay paused in every partition relayed")

	ok, err = store.Resume(ctx, b.st, b.stream, all, time.Now())
	require.NoError(t, err)
	require.True(t, ok)
	b.waitPartitionsRelayed(append(append(ids, more...), held...))
	require.Equal(t, 0.0, testkit.Metric(t, reg, "outboxd_paused", "stage", "relay"))
}
