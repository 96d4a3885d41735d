package dispatcher

import (
	ometrics "github.com/outboxd/outboxd/internal/metrics"

	"github.com/prometheus/client_golang/prometheus"
)

// metrics of the Dispatchers of one stream registered on one Registerer are
// shared; each Dispatcher keeps its own counts for Stats.
type metrics struct {
	relayed      prometheus.Counter
	batches      prometheus.Counter
	historyLost  prometheus.Counter
	redisRetries prometheus.Counter
	fenced       prometheus.Counter
	leader       prometheus.Gauge
	term         prometheus.Gauge
	checkpoint   prometheus.Gauge
}

func newMetrics(reg prometheus.Registerer, stream string) (*metrics, error) {
	labels := prometheus.Labels{"stream": stream}
	counter := func(name, help string) prometheus.Counter {
		return prometheus.NewCounter(prometheus.CounterOpts{Name: name, Help: help, ConstLabels: labels})
	}
	gauge := func(name, help string) prometheus.Gauge {
		return prometheus.NewGauge(prometheus.GaugeOpts{Name: name, Help: help, ConstLabels: labels})
	}
	m := &metrics{
		relayed:      counter("outboxd_dispatcher_relayed_total", "Outbox entries added to the stream (XADD), duplicates after a crash included."),
		batches:      counter("outboxd_dispatcher_batches_total", "Batches relayed: one pipelined XADD, one UpdateMany, one checkpoint."),
		historyLost:  counter("outboxd_dispatcher_history_lost_total", "Times the change-stream position was lost (token out of the oplog or corrupt) and the dispatcher caught up from the outbox."),
		redisRetries: counter("outboxd_dispatcher_redis_retries_total", "Failed pipelined XADDs that were retried after a back-off."),
		fenced:       counter("outboxd_dispatcher_fenced_total", "Times this dispatcher lost its lease (fenced out by a newer term, or unable to renew) and went back to standby."),
		leader:       gauge("outboxd_dispatcher_leader", "1 while this process holds the stream's lease and relays."),
		term:         gauge("outboxd_dispatcher_term", "Fencing term of the lease held most recently."),
		checkpoint:   gauge("outboxd_dispatcher_checkpoint_timestamp_seconds", "Time of the last checkpoint written (Unix seconds)."),
	}
	if reg == nil {
		return m, nil
	}
	var err error
	for _, c := range []*prometheus.Counter{&m.relayed, &m.batches, &m.historyLost, &m.redisRetries, &m.fenced} {
		if *c, err = ometrics.Register(reg, *c); err != nil {
			return nil, err
		}
	}
	for _, g := range []*prometheus.Gauge{&m.leader, &m.term, &m.checkpoint} {
		if *g, err = ometrics.Register(reg, *g); err != nil {
			return nil, err
		}
	}
	return m, nil
}
