package operator_test

import (
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/outboxd/outboxd/internal/operator"
	"github.com/outboxd/outboxd/internal/testkit"
)

// TestBoundsValidate: the audit's Validate refuses each value outside a
// field's bound, naming the field, and ValidateLimit a query's limit
// outside 1 to ChunkMax (--chunk, dlq list --limit).
func TestBoundsValidate(t *testing.T) {
	t.Parallel()
	testkit.RequireBound(t, (&operator.AuditConfig{Sample: operator.AuditSampleMax + 1}).Validate(), "Sample", "from 1 to 100000")
	testkit.RequireBound(t, (&operator.AuditConfig{Sample: -1}).Validate(), "Sample", "from 1 to 100000")
	testkit.RequireBound(t, (&operator.AuditConfig{Every: time.Millisecond}).Validate(), "Every", "at least 1s")
	require.NoError(t, (&operator.AuditConfig{}).Validate())
	for _, n := range []int{0, operator.ChunkMax + 1} {
		var oe *operator.Error
		require.ErrorAs(t, operator.ValidateLimit(n), &oe)
		require.Equal(t, "limit", oe.Fields[0].Field)
	}
	require.NoError(t, operator.ValidateLimit(operator.ChunkMax))
}
