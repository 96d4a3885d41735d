package outbox_test

import (
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/outboxd/outboxd/internal/testkit"
	"github.com/outboxd/outboxd/outbox"
)

// TestConfigValidate: the committer's and the messages' Validate refuse
// each value outside a field's bound (the values outboxd's flags reach
// them with: a flag given 0 arrives as -1), naming the field.
func TestConfigValidate(t *testing.T) {
	t.Parallel()
	for _, tc := range []struct {
		field, rule string
		cfg         *outbox.CommitterConfig
	}{
		{"GroupWait", "between 0 and 1s", &outbox.CommitterConfig{GroupWait: -time.Millisecond}},
		{"GroupWait", "between 0 and 1s", &outbox.CommitterConfig{GroupWait: 2 * time.Second}},
		{"GroupMax", "positive", &outbox.CommitterConfig{GroupMax: -1}},
		{"GroupMaxBytes", "between 4096 and 16777216", &outbox.CommitterConfig{GroupMaxBytes: 100}},
		{"GroupMaxBytes", "between 4096 and 16777216", &outbox.CommitterConfig{GroupMaxBytes: outbox.GroupMaxBytesMax + 1}},
		{"GroupTimeout", "at least 1ms", &outbox.CommitterConfig{GroupTimeout: -1}},
	} {
		testkit.RequireBound(t, tc.cfg.Validate(), tc.field, tc.rule)
	}
	require.NoError(t, (&outbox.CommitterConfig{GroupWait: outbox.GroupWaitOff}).Validate())
	for _, tc := range []struct {
		field, rule string
		cfg         *outbox.MessageOptions
	}{
		{"PayloadMax", "at least 1", &outbox.MessageOptions{PayloadMax: -1}},
	} {
		testkit.RequireBound(t, tc.cfg.Validate(), tc.field, tc.rule)
	}
	require.NoError(t, (*outbox.MessageOptions)(nil).Validate())
}
