package dispatcher_test

import (
	"context"
	"slices"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/outboxd/outboxd/dispatcher"
	"github.com/outboxd/outboxd/internal/fault"
	"github.com/outboxd/outboxd/internal/stream"
	"github.com/outboxd/outboxd/internal/testkit"
	"github.com/outboxd/outboxd/outbox"
	"github.com/outboxd/outboxd/store"
)

const testPartitions = 4

// partitioned makes b's writer hash into testPartitions partitions.
func (b *testBundle) partitioned() {
	b.writer = outbox.NewWriter(b.st, &outbox.WriterConfig{Stream: b.stream, Partitions: testPartitions})
}

// partitionedIDs returns the event ids in every partition's stream, and
// fails when an entry is in another partition than its device's.
func (b *testBundle) partitionedIDs() map[string]bool {
	b.t.Helper()
	have := map[string]bool{}
	for _, k := range stream.NewKeys(b.stream, "").Split(testPartitions).AllPartitions() {
		msgs, err := b.rdb.XRange(context.Background(), k.Stream(), "-", "+").Result()
		require.NoError(b.t, err)
		for _, m := range msgs {
			msg, err := outbox.DecodeMessage(m.Values)
			require.NoError(b.t, err)
			require.Equal(b.t, k.Stream(), k.ForEvent(msg.SourceKey, msg.DeviceKey).Stream(), "event %s is in another partition's stream", msg.EventID)
			have[msg.EventID] = true
		}
	}
	return have
}

func (b *testBundle) waitPartitionsRelayed(ids []string) {
	b.t.Helper()
	require.Eventually(b.t, func() bool {
		have := b.partitionedIDs()
		for _, id := range ids {
			if !have[id] {
				return false
			}
		}
		return b.undispatched() == 0
	}, 30*time.Second, 20*time.Millisecond, "not every entry was relayed into its partition")
}

// requireHolds waits until the dispatchers hold the partitions as want
// says (how many each), together every partition once.
func requireHolds(t *testing.T, want []int, ds ...*dispatcher.Dispatcher) {
	t.Helper()
	require.Eventually(t, func() bool {
		var all []int
		for i, d := range ds {
			held := d.HeldPartitions()
			if len(held) != want[i] {
				return false
			}
			all = append(all, held...)
		}
		slices.Sort(all)
		return slices.Equal(all, []int{0, 1, 2, 3})
	}, 20*time.Second, 10*time.Millisecond, "the partitions are not shared %v", want)
}

// TestPartitionsSharedByDispatchers: one dispatcher of a stream of four
// partitions holds all four and relays each entry into its partition's
// stream; a second one joins and each ends with two (the first hands two
// back); the second crashes (a fault point: no release) and the first
// takes its partitions over once their leases expire; nothing is left
// undispatched at any step, on both stores.
func TestPartitionsSharedByDispatchers(t *testing.T) {
	for _, kind := range kinds {
		t.Run(kind, func(t *testing.T) {
			t.Parallel()
			b := setup(t, &setupOpts{kind: kind})
			b.partitioned()
			cfgA := b.config()
			cfgA.Partitions = testPartitions
			a := b.start(cfgA)
			requireHolds(t, []int{4}, a)
			ids := b.write(80, 20)
			b.waitPartitionsRelayed(ids)

			cfgB := b.config()
			cfgB.Partitions = testPartitions
			faultsB := &fault.Set{}
			dispatcher.SetFaults(cfgB, faultsB)
			bd := b.start(cfgB)
			requireHolds(t, []int{2, 2}, a, bd)
			require.Equal(t, 2, a.Share())
			ids = append(ids, b.write(80, 20)...)
			b.waitPartitionsRelayed(ids)
			for p := range testPartitions {
				st, err := b.st.ReadLease(context.Background(), dispatcher.PartitionLeaseName(b.stream, store.Partition{Index: p, Count: testPartitions}))
				require.NoError(t, err)
				require.NotNil(t, st.CheckpointAt, "partition %d has a checkpoint", p)
			}

			faultsB.Arm(dispatcher.FaultAfterXAdd, 1)
			ids = append(ids, b.write(40, 10)...)
			require.Eventually(t, func() bool {
				select {
				case <-bd.Stopped():
					return true
				default:
					return false
				}
			}, 20*time.Second, 10*time.Millisecond)
			require.ErrorIs(t, bd.Err(), fault.ErrInjected)
			requireHolds(t, []int{4}, a)
			ids = append(ids, b.write(40, 10)...)
			b.waitPartitionsRelayed(ids)
		})
	}
}

// TestPartitionsConfig: a number of partitions outside 1..1024 is a
// configuration error naming the field.
func TestPartitionsConfig(t *testing.T) {
	b := setup(t, nil)
	for _, n := range []int{-1, outbox.PartitionsMax + 1} {
		cfg := b.config()
		cfg.Partitions = n
		_, err := dispatcher.New(b.st, b.rdb, cfg, testkit.Logger(t))
		require.ErrorContains(t, err, "Partitions")
	}
}
