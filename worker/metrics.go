package worker

import (
	"github.com/prometheus/client_golang/prometheus"

	ometrics "github.com/outboxd/outboxd/internal/metrics"
)

// metrics of all Workers registered on one Registerer are shared.
type metrics struct {
	processed     *prometheus.CounterVec
	projection    prometheus.Histogram
	latency       prometheus.Histogram
	batchSize     prometheus.Histogram
	retries       *prometheus.CounterVec
	claimed       prometheus.Counter
	groupsCreated prometheus.Counter
}

func newMetrics(reg prometheus.Registerer) (*metrics, error) {
	m := &metrics{
		processed: prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: "outboxd_worker_processed_total",
			Help: "Stream entries acknowledged by the worker, by result (synced, dead_lettered, poisoned).",
		}, []string{"result"}),
		projection: prometheus.NewHistogram(prometheus.HistogramOpts{
			Name:    "outboxd_worker_projection_seconds",
			Help:    "Latency of one batch's PostgreSQL projection transaction, retries included.",
			Buckets: prometheus.ExponentialBucketsRange(0.0005, 10, 20),
		}),
		latency: prometheus.NewHistogram(prometheus.HistogramOpts{
			Name:    "outboxd_pipeline_latency_seconds",
			Help:    "Time from ingest (createdAt) to syncedAt, per original synced for the first time: the end-to-end latency whose p95/p99 matter.",
			Buckets: prometheus.ExponentialBucketsRange(0.005, 3600, 24),
		}),
		batchSize: prometheus.NewHistogram(prometheus.HistogramOpts{
			Name:    "outboxd_worker_batch_entries",
			Help:    "Stream entries per processed batch.",
			Buckets: prometheus.ExponentialBuckets(1, 2, 14),
		}),
		retries: prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: "outboxd_worker_retries_total",
			Help: "Operations retried after a failure that was not the record's fault, by reason.",
		}, []string{"reason"}),
		claimed: prometheus.NewCounter(prometheus.CounterOpts{
			Name: "outboxd_worker_claimed_total",
			Help: "Pending entries taken over from idle consumers with XAUTOCLAIM.",
		}),
		groupsCreated: prometheus.NewCounter(prometheus.CounterOpts{
			Name: "outboxd_worker_groups_created_total",
			Help: "Consumer groups created, at start or after Redis lost them (NOGROUP).",
		}),
	}
	if reg == nil {
		return m, nil
	}
	var err error
	m.processed, err = ometrics.Register(reg, m.processed)
	if err != nil {
		return nil, err
	}
	if m.projection, err = ometrics.Register(reg, m.projection); err != nil {
		return nil, err
	}
	if m.latency, err = ometrics.Register(reg, m.latency); err != nil {
		return nil, err
	}
	if m.batchSize, err = ometrics.Register(reg, m.batchSize); err != nil {
		return nil, err
	}
	if m.retries, err = ometrics.Register(reg, m.retries); err != nil {
		return nil, err
	}
	if m.claimed, err = ometrics.Register(reg, m.claimed); err != nil {
		return nil, err
	}
	if m.groupsCreated, err = ometrics.Register(reg, m.groupsCreated); err != nil {
		return nil, err
	}
	return m, nil
}
