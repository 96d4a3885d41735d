package dispatcher

import (
	"strconv"

	"github.com/prometheus/client_golang/prometheus"

	"github.com/outboxd/outboxd/internal/failpolicy"
	ometrics "github.com/outboxd/outboxd/internal/metrics"
	"github.com/outboxd/outboxd/store"
)

// Names of the dispatcher's metrics that other packages read from a
// registry (package status): each is registered under its name here, and
// only here.
const (
	// BreakerStateMetric is the gauge of the circuit breaker around Redis
	// (label stream): 0 closed, 1 half-open, 2 open.
	BreakerStateMetric = ometrics.Namespace + "_" + metricsSubsystem + "_" + breakerStateName
	// BackpressureMetric is 1 while the relay holds because Redis is full
	// (label stream).
	BackpressureMetric = ometrics.Namespace + "_" + metricsSubsystem + "_" + backpressureName
)

// The parts of the names above.
const (
	metricsSubsystem = "dispatcher"
	breakerStateName = "breaker_state"
	backpressureName = "backpressure"
)

// metrics of the Dispatchers of one stream registered on one Registerer are
// shared; each Dispatcher keeps its own counts for Stats.
type metrics struct {
	relayed      prometheus.Counter
	batches      prometheus.Counter
	writes       prometheus.Counter
	swept        prometheus.Counter
	purged       prometheus.Counter
	historyLost  prometheus.Counter
	invalidated  prometheus.Counter
	redisRetries prometheus.Counter
	fenced       prometheus.Counter
	leader       prometheus.Gauge
	term         prometheus.Gauge
	checkpoint   prometheus.Gauge
	breaker      prometheus.Gauge
	backpressure prometheus.Gauge
	streak       *failpolicy.StreakMetrics
}

// partitionRegisterer labels what is registered on reg with part's index
// when part is one of several partitions (reg as it is otherwise).
func partitionRegisterer(reg prometheus.Registerer, part store.Partition) prometheus.Registerer {
	if part.Whole() || reg == nil {
		return reg
	}
	return prometheus.WrapRegistererWith(prometheus.Labels{"partition": strconv.Itoa(part.Index)}, reg)
}

// newMetrics registers the metrics of stream's dispatcher (of part, which
// labels them with its partition when it is one of several; the streak's
// are the whole stream's, shared with the workers' on one Registerer).
func newMetrics(reg prometheus.Registerer, stream string, part store.Partition) (*metrics, error) {
	f := ometrics.NewFactory(partitionRegisterer(reg, part), metricsSubsystem, stream)
	m := &metrics{
		relayed:      f.Counter("relayed_total", "Outbox entries added to the stream (XADD), duplicates after a crash included."),
		batches:      f.Counter("batches_total", "Batches relayed: one pipelined XADD each, then marked dispatched and checkpointed by a store write."),
		writes:       f.Counter("mark_writes_total", "Store writes that marked relayed batches dispatched and checkpointed (batches relayed while one ran are merged into the next)."),
		swept:        f.Counter("swept_total", "Undispatched entries the feed did not deliver, relayed by the periodic sweep."),
		purged:       f.Counter("events_deleted_total", "Synced originals the leader deleted because they were older than --event-retention."),
		historyLost:  f.Counter("history_lost_total", "Times the feed position was lost (out of the store's history, or unreadable) and the dispatcher caught up from the outbox."),
		invalidated:  f.Counter("feed_invalidated_total", "Times the feed ended because the outbox was dropped or renamed, and the dispatcher reopened it and caught up."),
		redisRetries: f.Counter("redis_retries_total", "Failed pipelined XADDs that were retried after a back-off."),
		fenced:       f.Counter("fenced_total", "Times this dispatcher lost its lease (fenced out by a newer term, or unable to renew) and went back to standby."),
		leader:       f.Gauge("leader", "1 while this process holds the stream's lease and relays."),
		term:         f.Gauge("term", "Fencing term of the lease held most recently."),
		checkpoint:   f.Gauge("checkpoint_timestamp_seconds", "Time of the last checkpoint written (Unix seconds)."),
		breaker:      f.Gauge(breakerStateName, "State of the circuit breaker around Redis: 0 closed, 1 half-open, 2 open."),
		backpressure: f.Gauge(backpressureName, "1 while the relay holds because Redis is full (used_memory above --redis-memory-high of maxmemory, or an OOM reply): nothing is added, marked or checkpointed."),
	}
	if err := f.Err(); err != nil {
		return nil, err
	}
	streak, err := failpolicy.NewStreakMetrics(reg, stream)
	m.streak = streak
	return m, err
}
