package testkit

import (
	"testing"

	"github.com/prometheus/client_golang/prometheus"
	dto "github.com/prometheus/client_model/go"
	"github.com/stretchr/testify/require"
)

// Metric returns the value of the series name in g whose labels include
// labels (name, value pairs): a counter's or a gauge's value, a histogram's
// sample count, the sum over every matching series. It is 0 when no series
// matches.
func Metric(t testing.TB, g prometheus.Gatherer, name string, labels ...string) float64 {
	t.Helper()
	var sum float64
	for _, m := range series(t, g, name, labels) {
		switch {
		case m.Counter != nil:
			sum += m.GetCounter().GetValue()
		case m.Gauge != nil:
			sum += m.GetGauge().GetValue()
		case m.Histogram != nil:
			sum += float64(m.GetHistogram().GetSampleCount())
		}
	}
	return sum
}

// Series returns how many series name in g has whose labels include labels
// (name, value pairs): 0 tells a series that is not exported from one
// whose value is 0.
func Series(t testing.TB, g prometheus.Gatherer, name string, labels ...string) int {
	t.Helper()
	return len(series(t, g, name, labels))
}

// series returns the series name in g whose labels include labels.
func series(t testing.TB, g prometheus.Gatherer, name string, labels []string) []*dto.Metric {
	t.Helper()
	families, err := g.Gather()
	require.NoError(t, err)
	var out []*dto.Metric
	for _, f := range families {
		if f.GetName() != name {
			continue
		}
	next:
		for _, m := range f.GetMetric() {
			have := map[string]string{}
			for _, l := range m.GetLabel() {
				have[l.GetName()] = l.GetValue()
			}
			for i := 0; i+1 < len(labels); i += 2 {
				if have[labels[i]] != labels[i+1] {
					continue next
				}
			}
			out = append(out, m)
		}
	}
	return out
}
