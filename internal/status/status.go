// Package status computes the pipeline's state from the stores: counts of
// originals by state, the oldest pending age, undispatched outbox entries,
// stream length and pending entries, and the dead-letter stream's length. It
// serves GET /v1/status and the gauges on /metrics.
package status

import (
	"context"
	"strings"
	"time"

	"github.com/256dpi/lungo"
	"github.com/prometheus/client_golang/prometheus"
	"github.com/redis/go-redis/v9"
	"go.mongodb.org/mongo-driver/bson"

	"github.com/outboxd/outboxd/internal/clock"
	"github.com/outboxd/outboxd/outbox"
)

// Source reads the state of one pipeline.
type Source struct {
	DB lungo.IDatabase
	// Redis may be nil (the stream part is then left out).
	Redis  redis.UniversalClient
	Stream string
	Group  string
	Clock  clock.Clock
}

// Snapshot is the JSON of GET /v1/status.
type Snapshot struct {
	Events                  EventCounts   `json:"events"`
	OldestPendingAgeSeconds float64       `json:"oldestPendingAgeSeconds"`
	Outbox                  OutboxCounts  `json:"outbox"`
	Stream                  *StreamCounts `json:"stream,omitempty"`
	DLQ                     *DLQCounts    `json:"dlq,omitempty"`
}

// EventCounts counts originals by state.
type EventCounts struct {
	Total   int64 `json:"total"`
	Synced  int64 `json:"synced"`
	Pending int64 `json:"pending"`
	Failed  int64 `json:"failed"`
}

// OutboxCounts counts outbox entries.
type OutboxCounts struct {
	Undispatched int64 `json:"undispatched"`
}

// StreamCounts describes the stream and its consumer group.
type StreamCounts struct {
	Name    string `json:"name"`
	Length  int64  `json:"length"`
	Pending int64  `json:"pending"`
	Error   string `json:"error,omitempty"`
}

// DLQCounts describes the dead-letter stream.
type DLQCounts struct {
	Name   string `json:"name"`
	Length int64  `json:"length"`
}

// Snapshot reads the current state. A Redis failure is reported inside the
// stream part; a MongoDB failure is an error.
func (s *Source) Snapshot(ctx context.Context) (*Snapshot, error) {
	events := s.DB.Collection(outbox.EventsCollection)
	count := func(coll lungo.ICollection, filter bson.M) (int64, error) { return coll.CountDocuments(ctx, filter) }
	var snap Snapshot
	var err error
	if snap.Events.Total, err = count(events, bson.M{}); err != nil {
		return nil, err
	}
	if snap.Events.Synced, err = count(events, bson.M{"syncedAt": bson.M{"$ne": nil}}); err != nil {
		return nil, err
	}
	if snap.Events.Failed, err = count(events, bson.M{"syncedAt": nil, "syncFailure": bson.M{"$ne": nil}}); err != nil {
		return nil, err
	}
	snap.Events.Pending = snap.Events.Total - snap.Events.Synced - snap.Events.Failed
	if snap.Outbox.Undispatched, err = count(s.DB.Collection(outbox.OutboxCollection), bson.M{"dispatchedAt": nil}); err != nil {
		return nil, err
	}
	oldest, ok, err := outbox.OldestPending(ctx, s.DB)
	if err != nil {
		return nil, err
	}
	if ok {
		now := time.Now()
		if s.Clock != nil {
			now = s.Clock.Now()
		}
		snap.OldestPendingAgeSeconds = max(0, now.Sub(oldest).Seconds())
	}
	if s.Redis != nil {
		snap.Stream, snap.DLQ = s.streamCounts(ctx)
	}
	return &snap, nil
}

func (s *Source) streamCounts(ctx context.Context) (*StreamCounts, *DLQCounts) {
	st := &StreamCounts{Name: s.Stream}
	dlq := &DLQCounts{Name: outbox.DLQStream(s.Stream)}
	var err error
	if st.Length, err = s.Redis.XLen(ctx, s.Stream).Result(); err != nil {
		st.Error = err.Error()
		return st, dlq
	}
	p, err := s.Redis.XPending(ctx, s.Stream, s.Group).Result()
	switch {
	case err == nil:
		st.Pending = p.Count
	case strings.HasPrefix(err.Error(), "NOGROUP"):
		// No group yet: nothing is pending.
	default:
		st.Error = err.Error()
	}
	if dlq.Length, err = s.Redis.XLen(ctx, dlq.Name).Result(); err != nil {
		st.Error = err.Error()
	}
	return st, dlq
}

// Collector exports a Snapshot as Prometheus gauges, read at scrape time.
type Collector struct {
	src                                             *Source
	events, oldest, undispatched, length, pend, dlq *prometheus.Desc
}

// NewCollector returns a collector over src.
func NewCollector(src *Source) *Collector {
	return &Collector{
		src:          src,
		events:       prometheus.NewDesc("outboxd_events", "Originals by state (pending, synced, failed).", []string{"state"}, nil),
		oldest:       prometheus.NewDesc("outboxd_oldest_unsynced_age_seconds", "Age of the oldest original not yet synced nor failed.", nil, nil),
		undispatched: prometheus.NewDesc("outboxd_outbox_undispatched", "Outbox entries not yet relayed to the stream.", nil, nil),
		length:       prometheus.NewDesc("outboxd_stream_length", "Entries in the stream.", nil, nil),
		pend:         prometheus.NewDesc("outboxd_stream_pending", "Entries delivered to the consumer group and not acknowledged.", nil, nil),
		dlq:          prometheus.NewDesc("outboxd_dlq_length", "Entries in the dead-letter stream.", nil, nil),
	}
}

// Describe implements prometheus.Collector.
func (c *Collector) Describe(ch chan<- *prometheus.Desc) {
	for _, d := range []*prometheus.Desc{c.events, c.oldest, c.undispatched, c.length, c.pend, c.dlq} {
		ch <- d
	}
}

// Collect implements prometheus.Collector; it reads the stores with a 5 s
// deadline and exports nothing when they cannot be read.
func (c *Collector) Collect(ch chan<- prometheus.Metric) {
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	snap, err := c.src.Snapshot(ctx)
	if err != nil {
		return
	}
	g := func(d *prometheus.Desc, v int64, labels ...string) {
		ch <- prometheus.MustNewConstMetric(d, prometheus.GaugeValue, float64(v), labels...)
	}
	g(c.events, snap.Events.Pending, "pending")
	g(c.events, snap.Events.Synced, "synced")
	g(c.events, snap.Events.Failed, "failed")
	ch <- prometheus.MustNewConstMetric(c.oldest, prometheus.GaugeValue, snap.OldestPendingAgeSeconds)
	g(c.undispatched, snap.Outbox.Undispatched)
	if snap.Stream != nil && snap.Stream.Error == "" {
		g(c.length, snap.Stream.Length)
		g(c.pend, snap.Stream.Pending)
		g(c.dlq, snap.DLQ.Length)
	}
}
