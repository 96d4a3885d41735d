package dispatcher_test

import (
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/outboxd/outboxd/dispatcher"
	"github.com/outboxd/outboxd/internal/testkit"
)

// TestConfigValidate: Validate refuses each value outside a field's bound
// (the values outboxd's flags reach it with: a flag given 0 arrives as -1),
// naming the field; a nil or zero config is valid.
func TestConfigValidate(t *testing.T) {
	t.Parallel()
	for _, tc := range []struct {
		field, rule string
		cfg         *dispatcher.Config
	}{
		{"BatchSize", "between 1 and 10000", &dispatcher.Config{BatchSize: 10_001}},
		{"FeedGather", "at most 1s", &dispatcher.Config{FeedGather: dispatcher.FeedGatherMax + 1}},
		{"LeaseTTL", "at least 30ms", &dispatcher.Config{LeaseTTL: time.Millisecond}},
		{"OutboxRetention", "at least 1ms", &dispatcher.Config{OutboxRetention: -1}},
		{"EventRetention", "not be negative", &dispatcher.Config{EventRetention: -24 * time.Hour}},
		{"StreamRetention", "at least 1ms", &dispatcher.Config{StreamRetention: -1}},
		{"MemoryHigh", "between 1 and 100", &dispatcher.Config{MemoryHigh: 101}},
		{"MemoryHigh", "between 1 and 100", &dispatcher.Config{MemoryHigh: -1}},
		{"Partitions", "between 1 and 1024", &dispatcher.Config{Partitions: -1}},
		{"BreakerFailures", "at least 1", &dispatcher.Config{BreakerFailures: -1}},
		{"BreakerTimeout", "at least 1ms", &dispatcher.Config{BreakerTimeout: -1}},
		{"StreakLimit", "at least 1", &dispatcher.Config{StreakLimit: -1}},
	} {
		testkit.RequireBound(t, tc.cfg.Validate(), tc.field, tc.rule)
	}
	require.NoError(t, (*dispatcher.Config)(nil).Validate())
	require.NoError(t, (&dispatcher.Config{FeedGather: -1}).Validate(), "a negative FeedGather is none")
}
