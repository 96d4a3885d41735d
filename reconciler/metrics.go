package reconciler

import (
	"github.com/prometheus/client_golang/prometheus"

	ometrics "github.com/outboxd/outboxd/internal/metrics"
)

// metrics mirror the reports. The state the report measures (oldest
// unsynced age, parked originals) is exported once, by the status
// collector (outboxd_oldest_unsynced_age_seconds, outboxd_events).
type metrics struct {
	sweeps       *prometheus.CounterVec
	scanned      prometheus.Counter
	claimed      prometheus.Counter
	skipped      prometheus.Counter
	published    prometheus.Counter
	failed       *prometheus.CounterVec
	rolledBack   prometheus.Counter
	lastSweepEnd prometheus.Gauge
	leader       prometheus.Gauge
	requeues     prometheus.Histogram
	exhausted    prometheus.Counter
}

// Sweep results, the values of the result label of
// outboxd_reconciler_sweeps_total.
const (
	resultOK     = "ok"     // every document succeeded
	resultFailed = "failed" // some document failed
	resultError  = "error"  // the sweep itself failed
)

func newMetrics(reg prometheus.Registerer, cfg *Config) (*metrics, error) {
	f := ometrics.NewFactory(reg, "reconciler", cfg.Stream)
	m := &metrics{
		sweeps:       f.CounterVec("sweeps_total", "Reconciler sweeps by result: ok, failed (some document failed) or error (the sweep failed).", "result"),
		scanned:      f.Counter("scanned_total", "Candidates returned by the reconciler's query."),
		claimed:      f.Counter("claimed_total", "Candidates the reconciler claimed."),
		skipped:      f.Counter("skipped_total", "Candidates skipped because they no longer matched at claim time (claimed by another run, synced or parked)."),
		published:    f.Counter("published_total", "Originals the reconciler re-published to the stream."),
		failed:       f.CounterVec("failed_total", "Documents the reconciler failed on, by step: claim, publish or rollback.", "step"),
		rolledBack:   f.Counter("rolled_back_total", "Claims undone after a failed publish."),
		lastSweepEnd: f.Gauge("last_sweep_timestamp_seconds", "When the last complete sweep ended (Unix time)."),
		leader:       f.Gauge("leader", "1 while this process holds the reconciler's lease and sweeps on schedule (--lease only; without it every replica sweeps and this stays 0)."),
		requeues: f.Histogram("requeue_count", "Requeues of an original so far, observed each time the reconciler re-publishes it (1 the first time): originals requeued again and again sit in the high buckets.",
			[]float64{1, 2, 3, 4, 5, 7, 10, 15, 20, 50}),
		exhausted: f.Counter("requeue_exhausted_total", "Originals the reconciler parked (syncFailure category requeue_exhausted) because they were requeued --max-requeues times without reaching syncedAt."),
	}
	// The thresholds, so that alert rules compare ages with them (the
	// oldest unsynced original should never be older than min-age +
	// requeue-after).
	f.Gauge("min_age_seconds", "The reconciler's --min-age.").Set(cfg.MinAge.Seconds())
	f.Gauge("requeue_after_seconds", "The reconciler's --requeue-after.").Set(cfg.RequeueAfter.Seconds())
	f.Gauge("max_requeues", "The reconciler's --max-requeues.").Set(float64(cfg.MaxRequeues))
	// The expected time between sweeps, so that an alert can tell a sweep
	// overdue (a stopped service, a forgotten cron job).
	f.Gauge("interval_seconds", "The time expected between two sweeps: --every, or --expected-every for one sweep run by a schedule.").Set(cfg.Interval.Seconds())
	return m, f.Err()
}

// observe adds a sweep's counts.
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
	m.lastSweepEnd.Set(float64(rep.StartedAt.Add(rep.Duration).Unix()))
}
