package testkit

import (
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/outboxd/outboxd/internal/bounds"
)

// RequireBound checks that err, a config's Validate's, refuses field: its
// first field error names field and its rule says rule.
func RequireBound(t *testing.T, err error, field, rule string) {
	t.Helper()
	require.Error(t, err, field)
	fields := bounds.Fields(err)
	require.NotEmpty(t, fields, "%s: not a field error: %v", field, err)
	require.Equal(t, field, fields[0].Field, "%v", err)
	require.Contains(t, fields[0].Rule, rule, "%v", err)
}
