package httpapi

import (
	"cmp"
	"context"
	"fmt"
	"net/http"
	"sync"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/redis/go-redis/v9"

	"github.com/outboxd/outboxd/outbox"
	"github.com/outboxd/outboxd/store"
)

// StatusReadTimeout is the default Status.ReadTimeout.
const StatusReadTimeout = 2 * time.Second

// Status reads the state of one pipeline from the stores: the figures of
// GET /v1/status and of the gauges on /metrics.
type Status struct {
	Store store.Store
	// Redis may be nil (the stream and DLQ parts are then left out).
	Redis  redis.UniversalClient
	Stream string
	Group  string
	// Now tells the time for ages. Defaults to time.Now.
	Now func() time.Time
	// ReadTimeout bounds the read of each part (the store's counts, the
	// stream and DLQ figures): a part not read by then is reported
	// unavailable, even when its client does not heed the deadline.
	// Defaults to StatusReadTimeout (2 seconds).
	ReadTimeout time.Duration
}

// Snapshot is the JSON of GET /v1/status. A part that could not be read
// within Status.ReadTimeout is null (events, outbox) or absent (stream,
// dlq) and named in Unavailable: a figure that could not be read is never
// shown as zero.
type Snapshot struct {
	Store  string       `json:"store"`
	Events *EventCounts `json:"events"`
	// OldestPendingAgeSeconds is the age of the oldest original that is
	// neither synced nor failed (the "oldest unsynced age"); 0 when none.
	OldestPendingAgeSeconds *float64      `json:"oldestPendingAgeSeconds"`
	Outbox                  *OutboxCounts `json:"outbox"`
	Stream                  *StreamCounts `json:"stream,omitempty"`
	DLQ                     *DLQCounts    `json:"dlq,omitempty"`
	// Unavailable names the parts that could not be read: "events",
	// "outbox", "stream", "dlq".
	Unavailable []string `json:"unavailable,omitempty"`
	// ReadAt is when the store's figures were read (they may come from a
	// short cache, see the store); absent when they could not be read.
	ReadAt time.Time `json:"readAt,omitzero"`
}

// EventCounts counts originals by state.
type EventCounts struct {
	Total   int64 `json:"total"`
	Synced  int64 `json:"synced"`
	Pending int64 `json:"pending"`
	Failed  int64 `json:"failed"`
	// FailedByCategory splits Failed by syncFailure category.
	FailedByCategory map[string]int64 `json:"failedByCategory"`
	// Estimated is true when Total (and so Synced) is an estimate.
	Estimated bool `json:"estimated"`
}

// OutboxCounts counts outbox entries.
type OutboxCounts struct {
	Undispatched int64 `json:"undispatched"`
}

// StreamCounts describes the stream and its consumer group.
type StreamCounts struct {
	Name   string `json:"name"`
	Length int64  `json:"length"`
	// Pending counts entries delivered to the group and not acknowledged
	// (the Redis pending entries list).
	Pending int64 `json:"pending"`
}

// DLQCounts describes the dead-letter stream.
type DLQCounts struct {
	Name   string `json:"name"`
	Length int64  `json:"length"`
}

// Snapshot reads the current state: the store and Redis in parallel, each
// read bounded by ReadTimeout, so that it answers within ReadTimeout
// however stalled a store is.
func (s *Status) Snapshot(ctx context.Context) *Snapshot {
	now := time.Now
	if s.Now != nil {
		now = s.Now
	}
	timeout := cmp.Or(s.ReadTimeout, StatusReadTimeout)
	var (
		wg        sync.WaitGroup
		counts    store.Counts
		countsErr error
		parts     streamParts
	)
	wg.Go(func() { counts, countsErr = within(ctx, timeout, s.Store.Counts) })
	if s.Redis != nil {
		wg.Go(func() { parts, _ = within(ctx, timeout, s.streamCounts) })
	}
	wg.Wait()

	snap := &Snapshot{Store: s.Store.Kind()}
	if countsErr != nil {
		snap.Unavailable = append(snap.Unavailable, "events", "outbox")
	} else {
		c := counts
		snap.ReadAt = c.ReadAt.UTC()
		snap.Events = &EventCounts{Total: c.Total, Synced: c.Synced, Pending: c.Pending, Failed: c.Failed,
			FailedByCategory: c.FailedByCategory, Estimated: c.Estimated}
		if snap.Events.FailedByCategory == nil {
			snap.Events.FailedByCategory = map[string]int64{}
		}
		age := 0.0
		if c.OldestPending != nil {
			age = max(0, now().Sub(*c.OldestPending).Seconds())
		}
		snap.OldestPendingAgeSeconds = &age
		snap.Outbox = &OutboxCounts{Undispatched: c.Undispatched}
	}
	if s.Redis != nil {
		snap.Stream, snap.DLQ = parts.stream, parts.dlq
		if parts.stream == nil {
			snap.Unavailable = append(snap.Unavailable, "stream")
		}
		if parts.dlq == nil {
			snap.Unavailable = append(snap.Unavailable, "dlq")
		}
	}
	return snap
}

// streamParts are the Redis parts of a snapshot; a part that failed is nil.
type streamParts struct {
	stream *StreamCounts
	dlq    *DLQCounts
}

// streamCounts reads the stream's length and pending count and the DLQ's
// length in one round trip.
func (s *Status) streamCounts(ctx context.Context) (streamParts, error) {
	dlqName := outbox.DLQStream(s.Stream)
	var xlen, dlen *redis.IntCmd
	var pend *redis.XPendingCmd
	_, _ = s.Redis.Pipelined(ctx, func(p redis.Pipeliner) error {
		xlen = p.XLen(ctx, s.Stream)
		pend = p.XPending(ctx, s.Stream, s.Group)
		dlen = p.XLen(ctx, dlqName)
		return nil
	})
	var out streamParts
	if xlen.Err() == nil {
		out.stream = &StreamCounts{Name: s.Stream, Length: xlen.Val()}
		switch err := pend.Err(); {
		case err == nil:
			out.stream.Pending = pend.Val().Count
		case redis.HasErrorPrefix(err, "NOGROUP"):
			// No group yet: nothing is pending.
		default:
			out.stream = nil
		}
	}
	if dlen.Err() == nil {
		out.dlq = &DLQCounts{Name: dlqName, Length: dlen.Val()}
	}
	return out, nil
}

// within runs read with a context bounded by timeout and waits for it no
// longer than that. A read that does not heed its context (go-redis does
// not, unless its ContextTimeoutEnabled option is set) is left to end on
// its client's own timeouts, and its result is dropped.
func within[T any](ctx context.Context, timeout time.Duration, read func(context.Context) (T, error)) (T, error) {
	ctx, cancel := context.WithTimeout(ctx, timeout)
	defer cancel()
	type result struct {
		v   T
		err error
	}
	done := make(chan result, 1)
	go func() {
		v, err := read(ctx)
		done <- result{v, err}
	}()
	select {
	case r := <-done:
		return r.v, r.err
	case <-ctx.Done():
		var zero T
		return zero, fmt.Errorf("error reading within %s: %w", timeout, ctx.Err())
	}
}

func (h *handler) status(w http.ResponseWriter, r *http.Request) {
	writeJSON(w, r, http.StatusOK, h.cfg.Status.Snapshot(r.Context()))
}

// Collector exports a Snapshot as Prometheus gauges, read at scrape time
// (the store serves its counts from a short cache, and never scans every
// original). A part that cannot be read is left out of the scrape, and
// outboxd_status_read_errors_total counts it.
type Collector struct {
	src                                                     *Status
	events, failed, oldest, undispatched, length, pend, dlq *prometheus.Desc
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
		readErrors: prometheus.NewCounterVec(prometheus.CounterOpts{Name: "outboxd_status_read_errors_total",
			Help: "Status parts that could not be read at a scrape, by part.", ConstLabels: labels}, []string{"part"}),
	}
}

// Describe implements prometheus.Collector.
func (c *Collector) Describe(ch chan<- *prometheus.Desc) {
	for _, d := range []*prometheus.Desc{c.events, c.failed, c.oldest, c.undispatched, c.length, c.pend, c.dlq} {
		ch <- d
	}
	c.readErrors.Describe(ch)
}

// Collect implements prometheus.Collector.
func (c *Collector) Collect(ch chan<- prometheus.Metric) {
	snap := c.src.Snapshot(context.Background())
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
		for _, cat := range []string{outbox.CategoryNonRetryable, outbox.CategoryPoison} {
			g(c.failed, float64(e.FailedByCategory[cat]), cat)
		}
		for cat, n := range e.FailedByCategory {
			if cat != outbox.CategoryNonRetryable && cat != outbox.CategoryPoison {
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
	if snap.DLQ != nil {
		g(c.dlq, float64(snap.DLQ.Length))
	}
	c.readErrors.Collect(ch)
}
