package dispatcher

import (
	"testing"
	"time"

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
	m.breaker.Set(2)
	m.backpressure.Set(1)
	got, err := ometrics.Present(reg, BreakerStateMetric, BackpressureMetric)
	require.NoError(t, err)
	require.Equal(t, []string{BreakerStateMetric, BackpressureMetric}, got)
}

// TestOutboxRetentionAlias: the deprecated Retention still sets the
// outbox's retention when OutboxRetention is not set, and does not
// override it when it is.
func TestOutboxRetentionAlias(t *testing.T) {
	t.Parallel()
	require.Equal(t, OutboxRetentionDefault, (&Config{}).withDefaults().OutboxRetention)
	require.Equal(t, time.Hour, (&Config{Retention: time.Hour}).withDefaults().OutboxRetention)                                 //nolint:staticcheck // the alias under test
	require.Equal(t, time.Minute, (&Config{Retention: time.Hour, OutboxRetention: time.Minute}).withDefaults().OutboxRetention) //nolint:staticcheck // the alias under test
}
