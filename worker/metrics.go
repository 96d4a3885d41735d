package worker

import (
	"github.com/prometheus/client_golang/prometheus"

	"github.com/outboxd/outboxd/internal/failpolicy"
	ometrics "github.com/outboxd/outboxd/internal/metrics"
)

// Names of the worker's metrics that other packages read from a registry
// (package status): each is registered under its name here, and only here.
const (
	// BreakerStateMetric is the gauge of the worker's circuit breakers
	// (labels stream, breaker: postgres, store): 0 closed, 1 half-open,
	// 2 open.
	BreakerStateMetric = ometrics.Namespace + "_" + metricsSubsystem + "_" + breakerStateName
	// LatencyMetric is the histogram of the ingest → syncedAt latency
	// (labels stream, origin), in LatencyBuckets.
	LatencyMetric = ometrics.Namespace + "_" + latencyName
)

// The parts of the names above.
const (
	metricsSubsystem = "worker"
	breakerStateName = "breaker_state"
	latencyName      = "pipeline_latency_seconds"
)

// LatencyBuckets are the buckets of outboxd_pipeline_latency_seconds, in
// seconds: fine below a second (the p99 ≤ 100 ms target) and with a bucket
// at 300 s exactly, the completion SLO's "synced within 5 minutes" that the
// alert rules in deploy/prometheus read.
var LatencyBuckets = []float64{0.005, 0.01, 0.025, 0.05, 0.075, 0.1, 0.15, 0.25, 0.5, 1, 2.5, 5, 10, 30, 60, 120, 300, 600, 1800, 3600}

// metrics of the Workers of one stream registered on one Registerer are
// shared.
type metrics struct {
	processed        *prometheus.CounterVec
	deadLetters      *prometheus.CounterVec
	trimmed          prometheus.Counter
	projection       prometheus.Histogram
	latency          *prometheus.HistogramVec
	requeueToSynced  prometheus.Histogram
	batchSize        prometheus.Histogram
	retries          *prometheus.CounterVec
	held             prometheus.Gauge
	claimed          prometheus.Counter
	recovered        prometheus.Counter
	groupsCreated    prometheus.Counter
	consumersDeleted prometheus.Counter
	breakerState     *prometheus.GaugeVec
	streak           *failpolicy.StreakMetrics
	batchSizeNow     *prometheus.GaugeVec
	projectionTarget prometheus.Gauge
	pgTimeouts       *prometheus.CounterVec
	lockWait         prometheus.Counter
	replayAcked      prometheus.Counter
	replayRateLimit  prometheus.Gauge
	throttled        prometheus.Counter
	replayCancelled  prometheus.Counter
}

func newMetrics(reg prometheus.Registerer, stream string) (*metrics, error) {
	f := ometrics.NewFactory(reg, metricsSubsystem, stream)
	pipeline := ometrics.NewFactory(reg, "", stream)
	backstop := ometrics.NewFactory(reg, "reconciler", stream)
	m := &metrics{
		processed: f.CounterVec("processed_total",
			"Stream entries acknowledged by the worker, by result (synced, dead_lettered, poisoned).", "result"),
		deadLetters: f.CounterVec("dead_letters_total",
			"Entries moved to the dead-letter stream, by category (non_retryable, poison, infrastructure) and code (bad_message, trimmed, original_missing, invalid_original, postgres_<SQLSTATE>, projection_failed, …).",
			"category", "code"),
		trimmed: f.Counter("trimmed_total",
			"Pending entries whose data the stream no longer held (trimmed or deleted): dead-lettered with reason trimmed; the reconciler re-publishes their originals."),
		projection: f.Histogram("projection_seconds",
			"Latency of one batch's PostgreSQL projection transaction, retries included.",
			prometheus.ExponentialBucketsRange(0.0005, 10, 20)),
		latency: pipeline.HistogramVec(latencyName,
			"Time from ingest (createdAt) to syncedAt, per original synced for the first time, by the origin of the message that synced it (outbox, reconciler, replay, dlq-replay): the end-to-end latency whose p95/p99 matter.",
			LatencyBuckets, "origin"),
		// The worker observes it (it sets syncedAt); it is named for the
		// reconciler, whose backstop it measures.
		requeueToSynced: backstop.Histogram("requeue_to_synced_seconds",
			"Time from the reconciler's requeue (lastRequeuedAt) to syncedAt, per original the worker synced for the first time from a message of origin reconciler: how long the backstop takes to finish what it re-published.",
			LatencyBuckets),
		batchSize: f.Histogram("batch_entries", "Stream entries per processed batch.", prometheus.ExponentialBuckets(1, 2, 14)),
		retries: f.CounterVec("retries_total",
			"Retries, by reason: infrastructure (an operation retried after a dependency failed), unknown (after an unclassified error), transaction (a serialization failure or deadlock), nogroup (the consumer group recreated), record (a failing record kept pending for another delivery).",
			"reason"),
		held: f.Gauge("held_entries",
			"Entries this worker keeps pending for a later delivery: failing records waiting for their backoff, and records held while retries are halted."),
		claimed:       f.Counter("claimed_total", "Pending entries taken over from dead or wedged consumers with XAUTOCLAIM."),
		recovered:     f.Counter("recovered_total", "Pending entries of the worker's own consumer that it did not know of (Redis ran a read whose reply was lost), found among its pending entries and delivered again."),
		groupsCreated: f.Counter("groups_created_total", "Consumer groups created, at start or after Redis lost them (NOGROUP)."),
		consumersDeleted: f.Counter("consumers_deleted_total",
			"Consumers removed from the group (XGROUP DELCONSUMER) after ConsumerExpiry idle with nothing pending."),
		breakerState: f.GaugeVec(breakerStateName,
			"State of the worker's circuit breakers (breaker: postgres, store): 0 closed, 1 half-open, 2 open.", "breaker"),
		batchSizeNow: f.GaugeVec("batch_size",
			"The batch size each worker (consumer) reads with now: --batch-size, or with --batch-size auto the size the tuning loop chose (500 to 2,000).", "consumer"),
		projectionTarget: f.Gauge("projection_target_seconds",
			"The projection time whose p95 --batch-size auto keeps under it (--projection-target)."),
		pgTimeouts: f.CounterVec("pg_timeouts_total",
			"Projection transactions that ended on a PostgreSQL timeout, by kind: lock (lock_timeout, 55P03) or statement (statement_timeout, 57014); retried as infrastructure failures.", "kind"),
		lockWait: f.Counter("lock_wait_seconds_total",
			"Time projection transactions waited for row or table locks before PostgreSQL's lock_timeout ended them (LockTimeout per lock timeout): a lower bound of the lock wait, whose share of outboxd_worker_projection_seconds_sum is outboxd:worker_lock_wait_share:rate10m."),
		replayAcked: f.Counter("replay_acked_total",
			"Entries of the replay lane acknowledged (synced or dead-lettered): its rate is the lane's."),
		replayRateLimit: f.Gauge("replay_rate_limit",
			"The bound on entries per second a worker process reads from the replay lane (--replay-rate; 0: none)."),
		replayCancelled: f.Counter("replay_cancelled_total",
			"Entries of the replay lane acknowledged unprojected: added before a cancel of the replays (outboxd replay cancel)."),
		throttled: f.Counter("projection_throttled_seconds_total",
			"Seconds the workers waited before a live batch to keep the group's projection rate (--projection-rate)."),
	}
	if err := f.Err(); err != nil {
		return nil, err
	}
	for _, kind := range []string{timeoutLock, timeoutStatement} {
		m.pgTimeouts.WithLabelValues(kind) // from 0, for rate()
	}
	if err := pipeline.Err(); err != nil {
		return nil, err
	}
	if err := backstop.Err(); err != nil {
		return nil, err
	}
	streak, err := failpolicy.NewStreakMetrics(reg, stream)
	if err != nil {
		return nil, err
	}
	m.streak = streak
	return m, nil
}
