package dispatcher

import (
	"testing"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/stretchr/testify/require"

	ometrics "github.com/outboxd/outboxd/internal/metrics"
	"github.com/outboxd/outboxd/store"
)

// TestMetricNames holds the names other packages read from a registry to
// the metrics the dispatcher registers.
func TestMetricNames(t *testing.T) {
	t.Parallel()
	reg := prometheus.NewRegistry()
	m, err := newMetrics(reg, "s", store.Partition{})
	require.NoError(t, err)
	w, err := newWatchMetrics(reg, "s")
	require.NoError(t, err)
	m.breaker.Set(2)
	w.backpressure.Set(1)
	got, err := ometrics.Present(reg, BreakerStateMetric, BackpressureMetric)
	require.NoError(t, err)
	require.Equal(t, []string{BreakerStateMetric, BackpressureMetric}, got)
}
