package worker_test

import (
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/outboxd/outboxd/internal/testkit"
	"github.com/outboxd/outboxd/worker"
)

// TestConfigValidate: Validate refuses each value outside a field's bound
// (the values outboxd's flags reach it with: a flag given 0 arrives as -1),
// naming the field; a nil or zero config, and the shortest ClaimIdle with
// its defaulted ClaimInterval, are valid.
func TestConfigValidate(t *testing.T) {
	t.Parallel()
	for _, tc := range []struct {
		field, rule string
		cfg         *worker.Config
	}{
		{"BatchSize", "between 1 and 10000", &worker.Config{BatchSize: 10_001}},
		{"BatchSize", "between 1 and 10000", &worker.Config{BatchSize: -1}},
		{"ProjectionTarget", "between 10ms and 1m0s", &worker.Config{ProjectionTarget: time.Millisecond}},
		{"ProjectionTarget", "between 10ms and 1m0s", &worker.Config{ProjectionTarget: 2 * time.Minute}},
		{"LockTimeout", "TimeoutOff or at least 1ms", &worker.Config{LockTimeout: -time.Second}},
		{"StatementTimeout", "TimeoutOff or at least 1ms", &worker.Config{StatementTimeout: 10 * time.Microsecond}},
		{"ReplayRate", "rate.Inf (no bound) or positive", &worker.Config{ReplayRate: -5}},
		{"ProjectionRate", "0 (no bound) or positive", &worker.Config{ProjectionRate: -1}},
		{"ClaimIdle", "at least 1ms", &worker.Config{ClaimIdle: 500 * time.Microsecond}},
		{"MaxDeliveries", "at least 1", &worker.Config{MaxDeliveries: -1}},
		{"LeaseTTL", "at least 30ms", &worker.Config{LeaseTTL: time.Millisecond}},
		{"RecordBackoff", "at least 1ms", &worker.Config{RecordBackoff: -1}},
		{"ConsumerExpiry", "at least 1ms", &worker.Config{ConsumerExpiry: -1}},
		{"BreakerFailures", "at least 1", &worker.Config{BreakerFailures: -1}},
		{"BreakerTimeout", "at least 1ms", &worker.Config{BreakerTimeout: -1}},
		{"StreakLimit", "at least 1", &worker.Config{StreakLimit: -1}},
		{"Partitions", "between 1 and 1024", &worker.Config{Partitions: 1025}},
	} {
		testkit.RequireBound(t, tc.cfg.Validate(), tc.field, tc.rule)
	}
	require.NoError(t, (*worker.Config)(nil).Validate())
	require.NoError(t, (&worker.Config{}).Validate())
	require.NoError(t, (&worker.Config{ClaimIdle: worker.ClaimIdleShortest}).Validate(), "the shortest ClaimIdle's default ClaimInterval is valid")
	require.NoError(t, (&worker.Config{LockTimeout: worker.TimeoutOff, StatementTimeout: worker.TimeoutOff}).Validate())
}
