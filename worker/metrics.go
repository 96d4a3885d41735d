package worker

import (
	"github.com/prometheus/client_golang/prometheus"

	ometrics "github.com/outboxd/outboxd/internal/metrics"
)

// metrics of the Workers of one stream registered on one Registerer are
// shared.
type metrics struct {
	processed     *prometheus.CounterVec
	projection    prometheus.Histogram
	latency       prometheus.Histogram
	batchSize     prometheus.Histogram
	retries       *prometheus.CounterVec
	claimed       prometheus.Counter
	groupsCreated prometheus.Counter
}

func newMetrics(reg prometheus.Registerer, stream string) (*metrics, error) {
	f := ometrics.NewFactory(reg, "worker", stream)
	pipeline := ometrics.NewFactory(reg, "", stream)
	m := &metrics{
		processed: f.CounterVec("processed_total",
			"Stream entries acknowledged by the worker, by result (synced, dead_lettered, poisoned).", "result"),
		projection: f.Histogram("projection_seconds",
			"Latency of one batch's PostgreSQL projection transaction, retries included.",
			prometheus.ExponentialBucketsRange(0.0005, 10, 20)),
		latency: pipeline.Histogram("pipeline_latency_seconds",
			"Time from ingest (createdAt) to syncedAt, per original synced for the first time: the end-to-end latency whose p95/p99 matter.",
			prometheus.ExponentialBucketsRange(0.005, 3600, 24)),
		batchSize: f.Histogram("batch_entries", "Stream entries per processed batch.", prometheus.ExponentialBuckets(1, 2, 14)),
		retries: f.CounterVec("retries_total",
			"Operations retried after a failure that was not the record's fault, by reason.", "reason"),
		claimed:       f.Counter("claimed_total", "Pending entries taken over from idle consumers with XAUTOCLAIM."),
		groupsCreated: f.Counter("groups_created_total", "Consumer groups created, at start or after Redis lost them (NOGROUP)."),
	}
	if err := f.Err(); err != nil {
		return nil, err
	}
	return m, pipeline.Err()
}
