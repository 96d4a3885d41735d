package worker

import (
	"testing"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/stretchr/testify/require"

	ometrics "github.com/outboxd/outboxd/internal/metrics"
	"github.com/outboxd/outboxd/outbox"
)

// TestMetricNames holds the names other packages read from a registry to
// the metrics the worker registers.
func TestMetricNames(t *testing.T) {
	t.Parallel()
	reg := prometheus.NewRegistry()
	m, err := newMetrics(reg, "s")
	require.NoError(t, err)
	m.breakerState.WithLabelValues("postgres").Set(2)
	m.latency.WithLabelValues(string(outbox.OriginOutbox)).Observe(0.1)
	got, err := ometrics.Present(reg, BreakerStateMetric, LatencyMetric)
	require.NoError(t, err)
	require.Equal(t, []string{BreakerStateMetric, LatencyMetric}, got)
}
