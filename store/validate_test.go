package store_test

import (
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/outboxd/outboxd/internal/testkit"
	"github.com/outboxd/outboxd/store"
)

// TestMigrateConfigValidate: the retentions' Validate refuses each value
// outside a field's bound (the values outboxd's flags reach it with: a
// flag given 0 arrives as -1), naming the field.
func TestMigrateConfigValidate(t *testing.T) {
	t.Parallel()
	for _, tc := range []struct {
		field, rule string
		cfg         *store.MigrateConfig
	}{
		{"OutboxRetention", "at least 1s", &store.MigrateConfig{OutboxRetention: 10 * time.Millisecond}},
		{"OutboxRetention", "at least 1s", &store.MigrateConfig{OutboxRetention: -1}},
		{"EventRetention", "0 (keep originals forever) or at least 1h0m0s", &store.MigrateConfig{EventRetention: 10 * time.Minute}},
		{"EventRetention", "0 (keep originals forever) or at least 1h0m0s", &store.MigrateConfig{EventRetention: -24 * time.Hour}},
	} {
		testkit.RequireBound(t, tc.cfg.Validate(), tc.field, tc.rule)
	}
	require.NoError(t, (*store.MigrateConfig)(nil).Validate())
	require.NoError(t, (&store.MigrateConfig{EventRetention: store.EventRetentionShortest}).Validate())
}
