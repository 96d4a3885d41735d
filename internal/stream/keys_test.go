package stream_test

import (
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/outboxd/outboxd/internal/stream"
)

// TestKeys pins every key name: with one partition they are the names of
// earlier versions (an upgrade finds its stream, dead letters and budgets),
// and a partition's keys share one hash tag.
func TestKeys(t *testing.T) {
	t.Parallel()
	for _, tt := range []struct {
		name                               string
		keys                               stream.Keys
		stream, dlq, failures, replay, grp string
	}{
		{"Defaults", stream.NewKeys("", ""), "event-stream", "event-stream:dlq", "event-stream:read-model:failures", "event-stream:replay", "read-model"},
		{"Named", stream.NewKeys("s", "g"), "s", "s:dlq", "s:g:failures", "s:replay", "g"},
		{"OnePartition", stream.NewKeys("s", "g").Partition(0, 1), "s", "s:dlq", "s:g:failures", "s:replay", "g"},
		{"Partition", stream.NewKeys("s", "g").Partition(3, 8), "{s:3}", "{s:3}:dlq", "{s:3}:g:failures", "{s:3}:replay", "g"},
		{"PartitionOfDefaults", stream.NewKeys("", "").Partition(0, 2), "{event-stream:0}", "{event-stream:0}:dlq", "{event-stream:0}:read-model:failures", "{event-stream:0}:replay", "read-model"},
	} {
		t.Run(tt.name, func(t *testing.T) {
			t.Parallel()
			require.Equal(t, tt.stream, tt.keys.Stream())
			require.Equal(t, tt.dlq, tt.keys.DLQ())
			require.Equal(t, tt.failures, tt.keys.Failures())
			require.Equal(t, tt.replay, tt.keys.Replay())
			require.Equal(t, tt.grp, tt.keys.Group())
		})
	}
	require.Equal(t, "s", stream.NewKeys("s", "g").Partition(3, 8).Name(), "the name outbox entries carry")
	require.Equal(t, stream.NewKeys("s", "g"), stream.NewKeys("s", "g").Partition(3, 8).Partition(0, 1))
}

// TestKeysOfTheReplayLane: the lane as a stream of its own shares the
// stream's dead-letter stream and streak, keeps its budgets apart, and
// partitions with the stream.
func TestKeysOfTheReplayLane(t *testing.T) {
	t.Parallel()
	for _, tt := range []struct {
		name                                       string
		keys                                       stream.Keys
		stream, dlq, failures, replay, worker, dsp string
	}{
		{"Lane", stream.NewKeys("s", "g").ReplayLane(), "s:replay", "s:dlq", "s:replay:g:failures", "s:replay", "s:g:streak", "s:streak:dispatcher"},
		{"Stream", stream.NewKeys("s", "g"), "s", "s:dlq", "s:g:failures", "s:replay", "s:g:streak", "s:streak:dispatcher"},
		{"PartitionOfTheLane", stream.NewKeys("s", "g").ReplayLane().Partition(3, 8), "{s:3}:replay", "{s:3}:dlq", "{s:3}:replay:g:failures", "{s:3}:replay", "{s:3}:g:streak", "{s:3}:streak:dispatcher"},
		{"LaneOfAPartition", stream.NewKeys("s", "g").Partition(3, 8).ReplayLane(), "{s:3}:replay", "{s:3}:dlq", "{s:3}:replay:g:failures", "{s:3}:replay", "{s:3}:g:streak", "{s:3}:streak:dispatcher"},
	} {
		t.Run(tt.name, func(t *testing.T) {
			t.Parallel()
			require.Equal(t, tt.stream, tt.keys.Stream())
			require.Equal(t, tt.dlq, tt.keys.DLQ())
			require.Equal(t, tt.failures, tt.keys.Failures())
			require.Equal(t, tt.replay, tt.keys.Replay())
			require.Equal(t, tt.worker, tt.keys.Streak(stream.ComponentWorker))
			require.Equal(t, tt.dsp, tt.keys.Streak(stream.ComponentDispatcher))
		})
	}
	lane := stream.NewKeys("s", "g").ReplayLane()
	require.True(t, lane.IsReplayLane())
	require.Equal(t, stream.LaneReplay, lane.Lane())
	require.Equal(t, stream.LaneLive, lane.Live().Lane())
	require.Equal(t, stream.NewKeys("s", "g"), lane.Live())
	require.Equal(t, lane, lane.Partition(0, 1), "one partition keeps the lane")
}
