package reconciler_test

import (
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/outboxd/outboxd/internal/testkit"
	"github.com/outboxd/outboxd/reconciler"
)

// TestConfigValidate: Validate refuses each value outside a field's bound
// (the values outboxd's flags reach it with: a flag given 0 arrives as -1),
// naming the field; a nil config, and an Interval that is Every however
// short, are valid.
func TestConfigValidate(t *testing.T) {
	t.Parallel()
	for _, tc := range []struct {
		field, rule string
		cfg         *reconciler.Config
	}{
		{"MinAge", "be more than 0", &reconciler.Config{MinAge: -time.Second}},
		{"RequeueAfter", "at least 1ms", &reconciler.Config{RequeueAfter: -1}},
		{"Limit", "at least 1", &reconciler.Config{Limit: -1}},
		{"MaxRequeues", "at least 1", &reconciler.Config{MaxRequeues: -1}},
		{"Every", "at least 1ms", &reconciler.Config{Every: -time.Second}},
		{"Interval", "at least 1s", &reconciler.Config{Interval: -1}},
		{"Interval", "at least 1s", &reconciler.Config{Interval: 500 * time.Millisecond}},
		{"LeaseTTL", "at least 30ms", &reconciler.Config{LeaseTTL: time.Millisecond}},
	} {
		testkit.RequireBound(t, tc.cfg.Validate(), tc.field, tc.rule)
	}
	require.NoError(t, (*reconciler.Config)(nil).Validate())
	require.NoError(t, (&reconciler.Config{Every: 10 * time.Millisecond}).Validate(), "Interval defaults to Every")
}
