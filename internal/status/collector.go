package status

import (
	"context"
	"slices"

	"github.com/prometheus/client_golang/prometheus"

	"github.com/outboxd/outboxd/outbox"
	"github.com/outboxd/outboxd/store"
)

// knownCategories are the syncFailure categories outboxd writes: the
// collector exports each, 0 when none is parked.
var knownCategories = []string{outbox.CategoryNonRetryable, outbox.CategoryPoison, store.CategoryRequeueExhausted}

// Collector exports a Snapshot as Prometheus gauges, read at scrape time
// (the store serves its counts from a short cache, and never scans every
// original). A part that cannot be read is left out of the scrape, and
// outboxd_status_read_errors_total counts it.
type Collector struct {
	src                                                     *Status
	events, failed, oldest, undispatched, length, pend, dlq *prometheus.Desc
	replayLength, replayPending, replayLag                  *prometheus.Desc
	readErrors                                              *prometheus.CounterVec
}

// NewCollector returns a collector over src.
func NewCollector(src *Status) *Collector {
	labels := prometheus.Labels{"stream": src.Stream}
	return &Collector{
		src:          src,
		events:       prometheus.NewDesc("outboxd_events", "Originals by state (pending, synced, failed).", []string{"state"}, labels),
		failed:       prometheus.NewDesc("outboxd_events_failed", "Originals parked with a syncFailure, by category.", []string{"category"}, labels),
		oldest:       prometheus.NewDesc("outboxd_oldest_unsynced_age_seconds", "Age of the oldest original neither synced nor failed (0 when none).", nil, labels),
		undispatched: prometheus.NewDesc("outboxd_outbox_undispatched", "Outbox entries not yet relayed to the stream.", nil, labels),
		length:       prometheus.NewDesc("outboxd_stream_length", "Entries in the stream.", nil, labels),
		pend:         prometheus.NewDesc("outboxd_stream_pending", "Entries delivered to the consumer group and not acknowledged.", nil, labels),
		dlq:          prometheus.NewDesc("outboxd_dlq_length", "Entries in the dead-letter stream.", nil, labels),
		replayLength: prometheus.NewDesc("outboxd_replay_length", "Entries in the replay lane (<stream>:replay).", nil, labels),
		replayPending: prometheus.NewDesc("outboxd_replay_pending",
			"Entries of the replay lane delivered to the consumer group and not acknowledged.", nil, labels),
		replayLag: prometheus.NewDesc("outboxd_replay_lag",
			"Entries of the replay lane the consumer group has not read yet (absent when Redis cannot tell).", nil, labels),
		readErrors: prometheus.NewCounterVec(prometheus.CounterOpts{Name: "outboxd_status_read_errors_total",
			Help: "Status parts that could not be read at a scrape, by part.", ConstLabels: labels}, []string{"part"}),
	}
}

// Describe implements prometheus.Collector.
func (c *Collector) Describe(ch chan<- *prometheus.Desc) {
	for _, d := range []*prometheus.Desc{c.events, c.failed, c.oldest, c.undispatched, c.length, c.pend, c.dlq,
		c.replayLength, c.replayPending, c.replayLag} {
		ch <- d
	}
	c.readErrors.Describe(ch)
}

// Collect implements prometheus.Collector.
func (c *Collector) Collect(ch chan<- prometheus.Metric) {
	snap := c.src.counts(context.Background(), false)
	g := func(d *prometheus.Desc, v float64, labels ...string) {
		ch <- prometheus.MustNewConstMetric(d, prometheus.GaugeValue, v, labels...)
	}
	for _, part := range snap.Unavailable {
		c.readErrors.WithLabelValues(part).Inc()
	}
	if e := snap.Events; e != nil {
		g(c.events, float64(e.Pending), outbox.StatePending)
		g(c.events, float64(e.Synced), outbox.StateSynced)
		g(c.events, float64(e.Failed), outbox.StateFailed)
		for _, cat := range knownCategories {
			g(c.failed, float64(e.FailedByCategory[cat]), cat)
		}
		for cat, n := range e.FailedByCategory {
			if !slices.Contains(knownCategories, cat) {
				g(c.failed, float64(n), cat)
			}
		}
		g(c.oldest, *snap.OldestPendingAgeSeconds)
		g(c.undispatched, float64(snap.Outbox.Undispatched))
	}
	if snap.Stream != nil {
		g(c.length, float64(snap.Stream.Length))
		g(c.pend, float64(snap.Stream.Pending))
	}
	if r := snap.Replay; r != nil {
		g(c.replayLength, float64(r.Length))
		g(c.replayPending, float64(r.Pending))
		if r.Lag != nil {
			g(c.replayLag, float64(*r.Lag))
		}
	}
	if snap.DLQ != nil {
		g(c.dlq, float64(snap.DLQ.Length))
	}
	c.readErrors.Collect(ch)
}
