package reconciler

import (
	"slices"

	ometrics "github.com/outboxd/outboxd/internal/metrics"

	"github.com/prometheus/client_golang/prometheus"
)

// metrics mirror the reports. Every series carries the stream as a
// constant label, so reconcilers of several streams share a registry.
type metrics struct {
	sweeps       *prometheus.CounterVec
	scanned      prometheus.Counter
	claimed      prometheus.Counter
	skipped      prometheus.Counter
	published    prometheus.Counter
	failed       *prometheus.CounterVec
	rolledBack   prometheus.Counter
	oldestAge    prometheus.Gauge
	parked       *prometheus.GaugeVec
	lastSweepEnd prometheus.Gauge
}

// Sweep results, the values of the result label of
// outboxd_reconciler_sweeps_total.
const (
	resultOK     = "ok"     // every document succeeded
	resultFailed = "failed" // some document failed
	resultError  = "error"  // the sweep itself failed
)

func newMetrics(reg prometheus.Registerer, stream string) (*metrics, error) {
	labels := prometheus.Labels{"stream": stream}
	counter := func(name, help string) prometheus.Counter {
		return prometheus.NewCounter(prometheus.CounterOpts{Namespace: "outboxd", Subsystem: "reconciler", Name: name, Help: help, ConstLabels: labels})
	}
	m := &metrics{
		sweeps: prometheus.NewCounterVec(prometheus.CounterOpts{Namespace: "outboxd", Subsystem: "reconciler", Name: "sweeps_total",
			Help: "Reconciler sweeps by result: ok, failed (some document failed) or error (the sweep failed).", ConstLabels: labels}, []string{"result"}),
		scanned:   counter("scanned_total", "Candidates returned by the reconciler's query."),
		claimed:   counter("claimed_total", "Candidates the reconciler claimed."),
		skipped:   counter("skipped_total", "Candidates skipped because they no longer matched at claim time (claimed by another run, synced or parked)."),
		published: counter("published_total", "Originals the reconciler re-published to the stream."),
		failed: prometheus.NewCounterVec(prometheus.CounterOpts{Namespace: "outboxd", Subsystem: "reconciler", Name: "failed_total",
			Help: "Documents the reconciler failed on, by step: claim, publish or rollback.", ConstLabels: labels}, []string{"step"}),
		rolledBack: counter("rolled_back_total", "Claims undone after a failed publish."),
		oldestAge: prometheus.NewGauge(prometheus.GaugeOpts{Namespace: "outboxd", Subsystem: "reconciler", Name: "oldest_unsynced_age_seconds",
			Help: "Age of the oldest original with neither syncedAt nor syncFailure, at the last sweep.", ConstLabels: labels}),
		parked: prometheus.NewGaugeVec(prometheus.GaugeOpts{Namespace: "outboxd", Subsystem: "reconciler", Name: "parked_events",
			Help: "Originals parked with a syncFailure, by category, at the last sweep.", ConstLabels: labels}, []string{"category"}),
		lastSweepEnd: prometheus.NewGauge(prometheus.GaugeOpts{Namespace: "outboxd", Subsystem: "reconciler", Name: "last_sweep_timestamp_seconds",
			Help: "When the last complete sweep ended (Unix time).", ConstLabels: labels}),
	}
	if reg == nil {
		return m, nil
	}
	var err error
	for _, c := range []*prometheus.Counter{&m.scanned, &m.claimed, &m.skipped, &m.published, &m.rolledBack} {
		*c, err = ometrics.Register(reg, *c)
		if err != nil {
			return nil, err
		}
	}
	for _, c := range []**prometheus.CounterVec{&m.sweeps, &m.failed} {
		if *c, err = ometrics.Register(reg, *c); err != nil {
			return nil, err
		}
	}
	for _, g := range []*prometheus.Gauge{&m.oldestAge, &m.lastSweepEnd} {
		if *g, err = ometrics.Register(reg, *g); err != nil {
			return nil, err
		}
	}
	if m.parked, err = ometrics.Register(reg, m.parked); err != nil {
		return nil, err
	}
	return m, nil
}

// observe adds a sweep's counts; the gauges change only after a complete
// sweep, which measured them.
func (m *metrics) observe(rep *Report, err error) {
	m.scanned.Add(float64(rep.Scanned))
	m.claimed.Add(float64(rep.Claimed))
	m.skipped.Add(float64(rep.Skipped))
	m.published.Add(float64(rep.Published))
	m.rolledBack.Add(float64(rep.RolledBack))
	m.failed.WithLabelValues("claim").Add(float64(rep.ClaimFailed))
	m.failed.WithLabelValues("publish").Add(float64(rep.PublishFailed))
	m.failed.WithLabelValues("rollback").Add(float64(rep.RollbackFailed))
	switch {
	case err != nil:
		m.sweeps.WithLabelValues(resultError).Inc()
		return
	case rep.Failed():
		m.sweeps.WithLabelValues(resultFailed).Inc()
	default:
		m.sweeps.WithLabelValues(resultOK).Inc()
	}
	m.oldestAge.Set(rep.OldestUnsyncedAge.Seconds())
	// Set every category, so one that emptied reads 0 rather than stale.
	for _, cat := range append(slices.Clone(knownCategories), CategoryOther) {
		m.parked.WithLabelValues(cat).Set(float64(rep.Failures[cat]))
	}
	m.lastSweepEnd.Set(float64(rep.StartedAt.Add(rep.Duration).Unix()))
}
