// Package dlqhook calls an HTTP webhook for each new dead letter, so that a
// team's on-call tooling hears of it: a JSON POST per dead letter, sent in
// the background from a bounded queue, retried with backoff, counted in
// its own metrics.
package dlqhook

import (
	"bytes"
	"cmp"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"net/http"
	"net/url"
	"sync"
	"time"

	"github.com/cenkalti/backoff/v4"
	"github.com/prometheus/client_golang/prometheus"
	"go.uber.org/zap"

	ometrics "github.com/outboxd/outboxd/internal/metrics"
	"github.com/outboxd/outboxd/internal/stream"
)

// Defaults of Config.
const (
	// AttemptsDefault is the default Config.Attempts.
	AttemptsDefault = 5
	// BackoffDefault is the default Config.Backoff.
	BackoffDefault = time.Second
	// BackoffMaxDefault is the default Config.BackoffMax.
	BackoffMaxDefault = 30 * time.Second
	// TimeoutDefault is the default Config.Timeout.
	TimeoutDefault = 10 * time.Second
	// QueueDefault is the default Config.Queue.
	QueueDefault = 1000
)

// Outcomes of outboxd_dlq_hook_notices_total.
const (
	OutcomeDelivered = "delivered"
	OutcomeFailed    = "failed"
	OutcomeDropped   = "dropped"
)

// Config configures a Hook.
type Config struct {
	// URL receives a POST of a Notice (JSON) per dead letter. Required:
	// http or https.
	URL string
	// Attempts is how many times a notice is sent before it is given up
	// (outcome failed). Defaults to AttemptsDefault (5).
	Attempts int
	// Backoff is the wait after the first failed attempt, doubled after
	// each further one (±25% jitter), at most BackoffMax. Default to
	// BackoffDefault (1s) and BackoffMaxDefault (30s).
	Backoff, BackoffMax time.Duration
	// Timeout bounds one attempt. Defaults to TimeoutDefault (10s).
	Timeout time.Duration
	// Queue bounds the notices waiting to be sent; a dead letter that finds
	// it full is not notified (outcome dropped). Defaults to QueueDefault.
	Queue int
	// Client sends the requests. Defaults to a client of its own.
	Client *http.Client
	// Registerer receives the hook's metrics. Defaults to none.
	Registerer prometheus.Registerer
}

// Notice is the body of a webhook call: one dead letter.
type Notice struct {
	Stream     string    `json:"stream"`
	Group      string    `json:"group"`
	EntryID    string    `json:"entryId"`
	EventID    string    `json:"eventId,omitempty"`
	Category   string    `json:"category"`
	Code       string    `json:"code"`
	Error      string    `json:"error"`
	Deliveries int64     `json:"deliveries"`
	At         time.Time `json:"at"`
}

// Hook sends the notices. Its lifecycle: Start runs the sender, Stop sends
// what is queued until its context ends.
type Hook struct {
	cfg    Config
	logger *zap.Logger
	queue  chan Notice

	notices  *prometheus.CounterVec
	attempts prometheus.Counter
	queued   prometheus.Gauge

	mu     sync.Mutex
	stop   context.CancelFunc
	done   chan struct{}
	closed bool // the queue is closed: Notify drops
}

// New returns a Hook that posts to cfg.URL.
func New(cfg Config, logger *zap.Logger) (*Hook, error) {
	c := cfg
	c.Attempts = cmp.Or(c.Attempts, AttemptsDefault)
	c.Backoff = cmp.Or(c.Backoff, BackoffDefault)
	c.BackoffMax = cmp.Or(c.BackoffMax, BackoffMaxDefault)
	c.Timeout = cmp.Or(c.Timeout, TimeoutDefault)
	c.Queue = cmp.Or(c.Queue, QueueDefault)
	if c.Client == nil {
		c.Client = &http.Client{}
	}
	var errs []error
	if u, err := url.Parse(c.URL); err != nil || (u.Scheme != "http" && u.Scheme != "https") || u.Host == "" {
		errs = append(errs, errors.New("URL must be an http or https URL"))
	}
	if c.Attempts < 1 || c.Queue < 1 || c.Backoff <= 0 || c.BackoffMax <= 0 || c.Timeout <= 0 {
		errs = append(errs, errors.New("Attempts, Queue, Backoff, BackoffMax and Timeout must be positive"))
	}
	if err := errors.Join(errs...); err != nil {
		return nil, fmt.Errorf("invalid dead-letter hook config: %w", err)
	}
	if logger == nil {
		logger = zap.NewNop()
	}
	f := ometrics.NewFactory(c.Registerer, "dlq_hook", "")
	h := &Hook{cfg: c, logger: logger.Named("dlq_hook"), queue: make(chan Notice, c.Queue),
		notices:  f.CounterVec("notices_total", "Dead letters the webhook was told of (delivered), gave up on after its attempts (failed) or could not queue (dropped).", "outcome"),
		attempts: f.Counter("attempts_total", "Calls of the dead-letter webhook, retries included."),
		queued:   f.Gauge("queued", "Dead-letter notices waiting to be sent."),
	}
	if err := f.Err(); err != nil {
		return nil, fmt.Errorf("error registering the dead-letter hook's metrics: %w", err)
	}
	return h, nil
}

// Notify queues a notice of dl (read by the group of keys) without
// waiting; a full queue drops it, counted.
func (h *Hook) Notify(keys stream.Keys, dl stream.DeadLetter) {
	h.mu.Lock()
	defer h.mu.Unlock()
	if h.closed {
		h.notices.WithLabelValues(OutcomeDropped).Inc()
		return
	}
	n := Notice{Stream: keys.Stream(), Group: keys.Group(), EntryID: dl.EntryID, EventID: dl.EventID, Category: dl.Category,
		Code: dl.Code, Error: dl.Error, Deliveries: dl.Deliveries, At: dl.At}
	select {
	case h.queue <- n:
		h.queued.Inc()
	default:
		h.notices.WithLabelValues(OutcomeDropped).Inc()
		h.logger.Warn("dead-letter hook queue full; notice dropped", zap.String("entry_id", dl.EntryID))
	}
}

// Start runs the sender in the background; it does nothing when running.
func (h *Hook) Start(context.Context) error {
	h.mu.Lock()
	defer h.mu.Unlock()
	if h.stop != nil {
		return nil
	}
	ctx, cancel := context.WithCancel(context.Background())
	h.stop, h.done = cancel, make(chan struct{})
	go h.run(ctx, h.done)
	return nil
}

// Stop sends what is queued, then stops; when ctx ends first it gives up
// on the rest and returns ctx's error.
func (h *Hook) Stop(ctx context.Context) error {
	h.mu.Lock()
	stop, done := h.stop, h.done
	h.stop = nil
	if stop != nil {
		h.closed = true
		close(h.queue)
	}
	h.mu.Unlock()
	if stop == nil {
		return nil
	}
	select {
	case <-done:
		return nil
	case <-ctx.Done():
		stop()
		<-done
		return ctx.Err()
	}
}

func (h *Hook) run(ctx context.Context, done chan struct{}) {
	defer close(done)
	for n := range h.queue {
		h.queued.Dec()
		if ctx.Err() != nil {
			continue
		}
		outcome := OutcomeDelivered
		if err := h.send(ctx, n); err != nil {
			outcome = OutcomeFailed
			h.logger.Error("dead-letter hook gave up on a notice", zap.String("entry_id", n.EntryID), zap.Error(err))
		}
		h.notices.WithLabelValues(outcome).Inc()
	}
}

// send posts n until an attempt answers 2xx or the attempts are spent.
func (h *Hook) send(ctx context.Context, n Notice) error {
	body, err := json.Marshal(n)
	if err != nil {
		return err
	}
	b := backoff.WithMaxRetries(backoff.WithContext(backoff.NewExponentialBackOff(backoff.WithInitialInterval(h.cfg.Backoff),
		backoff.WithMaxInterval(h.cfg.BackoffMax), backoff.WithMaxElapsedTime(0)), ctx), uint64(h.cfg.Attempts-1))
	return backoff.Retry(func() error {
		h.attempts.Inc()
		actx, cancel := context.WithTimeout(ctx, h.cfg.Timeout)
		defer cancel()
		req, err := http.NewRequestWithContext(actx, http.MethodPost, h.cfg.URL, bytes.NewReader(body))
		if err != nil {
			return backoff.Permanent(err)
		}
		req.Header.Set("Content-Type", "application/json")
		res, err := h.cfg.Client.Do(req)
		if err != nil {
			return fmt.Errorf("error calling the dead-letter hook: %w", err)
		}
		res.Body.Close()
		if res.StatusCode/100 != 2 {
			return fmt.Errorf("the dead-letter hook answered %d", res.StatusCode)
		}
		return nil
	}, b)
}
