// Package metrics holds the Prometheus plumbing the components share: one
// way to name, label and register a component's metrics.
package metrics

import (
	"errors"
	"fmt"
	"slices"

	"github.com/prometheus/client_golang/prometheus"
	dto "github.com/prometheus/client_model/go"
)

// Namespace prefixes every outboxd metric.
const Namespace = "outboxd"

// Register registers c on reg, or returns the equal collector registered
// before (a second component of the same kind on one registry, as with two
// workers in one process).
func Register[C prometheus.Collector](reg prometheus.Registerer, c C) (C, error) {
	err := reg.Register(c)
	if err == nil {
		return c, nil
	}
	var are prometheus.AlreadyRegisteredError
	if errors.As(err, &are) {
		if existing, ok := are.ExistingCollector.(C); ok {
			return existing, nil
		}
	}
	return c, err
}

// Factory builds the metrics of one component for one stream: every name is
// outboxd_<subsystem>_<name> and every series carries the constant label
// stream, so components of several streams share a registry. With a nil
// Registerer the metrics work but are not exported. The first registration
// error is kept for Err.
type Factory struct {
	reg       prometheus.Registerer
	subsystem string
	labels    prometheus.Labels
	err       error
}

// NewFactory returns a Factory for subsystem (dispatcher, worker, …) and
// stream.
func NewFactory(reg prometheus.Registerer, subsystem, stream string) *Factory {
	return &Factory{reg: reg, subsystem: subsystem, labels: prometheus.Labels{"stream": stream}}
}

// Err returns the first registration error.
func (f *Factory) Err() error { return f.err }

func register[C prometheus.Collector](f *Factory, c C) C {
	if f.reg == nil || f.err != nil {
		return c
	}
	got, err := Register(f.reg, c)
	if err != nil {
		f.err = err
		return c
	}
	return got
}

// Counter returns the counter outboxd_<subsystem>_<name>.
func (f *Factory) Counter(name, help string) prometheus.Counter {
	return register[prometheus.Counter](f, prometheus.NewCounter(prometheus.CounterOpts{
		Namespace: Namespace, Subsystem: f.subsystem, Name: name, Help: help, ConstLabels: f.labels}))
}

// CounterVec returns the counter vector outboxd_<subsystem>_<name>.
func (f *Factory) CounterVec(name, help string, labels ...string) *prometheus.CounterVec {
	return register(f, prometheus.NewCounterVec(prometheus.CounterOpts{
		Namespace: Namespace, Subsystem: f.subsystem, Name: name, Help: help, ConstLabels: f.labels}, labels))
}

// Gauge returns the gauge outboxd_<subsystem>_<name>.
func (f *Factory) Gauge(name, help string) prometheus.Gauge {
	return register[prometheus.Gauge](f, prometheus.NewGauge(prometheus.GaugeOpts{
		Namespace: Namespace, Subsystem: f.subsystem, Name: name, Help: help, ConstLabels: f.labels}))
}

// GaugeVec returns the gauge vector outboxd_<subsystem>_<name>.
func (f *Factory) GaugeVec(name, help string, labels ...string) *prometheus.GaugeVec {
	return register(f, prometheus.NewGaugeVec(prometheus.GaugeOpts{
		Namespace: Namespace, Subsystem: f.subsystem, Name: name, Help: help, ConstLabels: f.labels}, labels))
}

// Histogram returns the histogram outboxd_<subsystem>_<name>; an empty
// subsystem names it outboxd_<name>.
func (f *Factory) Histogram(name, help string, buckets []float64) prometheus.Histogram {
	return register[prometheus.Histogram](f, prometheus.NewHistogram(prometheus.HistogramOpts{
		Namespace: Namespace, Subsystem: f.subsystem, Name: name, Help: help, ConstLabels: f.labels, Buckets: buckets}))
}

// HistogramVec returns the histogram vector outboxd_<subsystem>_<name>.
func (f *Factory) HistogramVec(name, help string, buckets []float64, labels ...string) *prometheus.HistogramVec {
	return register(f, prometheus.NewHistogramVec(prometheus.HistogramOpts{
		Namespace: Namespace, Subsystem: f.subsystem, Name: name, Help: help, ConstLabels: f.labels, Buckets: buckets}, labels))
}

// Present returns those of names that g gathers a family of, in the order
// of names: a check that a metric read by name elsewhere is registered
// under that name.
func Present(g prometheus.Gatherer, names ...string) ([]string, error) {
	families, err := g.Gather()
	if err != nil {
		return nil, fmt.Errorf("error gathering metrics: %w", err)
	}
	var out []string
	for _, name := range names {
		if slices.ContainsFunc(families, func(f *dto.MetricFamily) bool { return f.GetName() == name }) {
			out = append(out, name)
		}
	}
	return out, nil
}
