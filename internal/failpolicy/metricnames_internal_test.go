package failpolicy

import (
	"testing"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/stretchr/testify/require"

	ometrics "github.com/outboxd/outboxd/internal/metrics"
)

// TestMetricNames holds RetriesHaltedMetric to the gauge NewStreakMetrics
// registers.
func TestMetricNames(t *testing.T) {
	t.Parallel()
	reg := prometheus.NewRegistry()
	m, err := NewStreakMetrics(reg, "s")
	require.NoError(t, err)
	m.halt("worker", "record", 1)
	got, err := ometrics.Present(reg, RetriesHaltedMetric)
	require.NoError(t, err)
	require.Equal(t, []string{RetriesHaltedMetric}, got)
}
