package status

import (
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/outboxd/outboxd/internal/testkit"
)

// TestHistoryConfigValidate: Validate refuses a sample cadence under
// HistoryEveryShortest (100ms) and a ring under two samples, naming the
// field.
func TestHistoryConfigValidate(t *testing.T) {
	t.Parallel()
	testkit.RequireBound(t, (&HistoryConfig{Every: 10 * time.Millisecond}).Validate(), "Every", "at least 100ms")
	testkit.RequireBound(t, (&HistoryConfig{Size: 1}).Validate(), "Size", "at least 2")
	require.NoError(t, (&HistoryConfig{}).Validate())
}
