package stream_test

import (
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/outboxd/outboxd/stream"
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
