package stream

import (
	"context"
	"errors"
	"fmt"

	"github.com/redis/go-redis/v9"
	"github.com/sony/gobreaker/v2"
	"go.opentelemetry.io/otel/attribute"
	semconv "go.opentelemetry.io/otel/semconv/v1.40.0"
	"go.opentelemetry.io/otel/trace"
	"go.uber.org/zap"

	"github.com/outboxd/outboxd/internal/failpolicy"
	"github.com/outboxd/outboxd/internal/tracing"
	"github.com/outboxd/outboxd/outbox"
)

// PublisherConfig configures a Publisher. A nil config means all defaults.
type PublisherConfig struct {
	// Breaker, when set, puts every Publish behind a circuit breaker with
	// these numbers (failpolicy.NewBreaker): it opens after
	// Breaker.Failures consecutive failed publishes (any error; a
	// cancelled context counts as none), and while it is open a Publish
	// fails at once with an error failpolicy.BreakerOpen recognises.
	// Breaker.IsFailure defaults to every error. Defaults to none: the
	// reconciler and the operator actions, which publish a few messages at
	// a time and report a failure rather than wait, go without one; the
	// dispatcher, which retries a batch until Redis answers, uses one.
	Breaker *failpolicy.BreakerConfig
	// Message says what PublishEvents' messages carry besides the
	// original's name and type (the payload). Defaults to nothing more.
	Message *outbox.MessageOptions
	// Routes sends each event of PublishEvents to the stream of its type
	// (outbox.Routes.StreamOf; the Publisher's own stream for a type
	// without a route), in the same lane and with the same number of
	// partitions: the reconciler and the replays re-publish an original
	// where the writer recorded its entry. Defaults to none.
	Routes outbox.Routes
}

// Publisher adds outbox messages to one stream: one pipeline per batch,
// with the Client's length policy (Config.MaxLen), behind an optional
// circuit breaker. The dispatcher relays outbox entries through one, the
// reconciler re-publishes originals through one, the operator's replays
// through another. It is safe for concurrent use.
type Publisher struct {
	c       *Client
	keys    Keys
	breaker *gobreaker.CircuitBreaker[struct{}]
	message *outbox.MessageOptions
	routes  outbox.Routes
}

// Publisher returns a Publisher to the stream of keys. The logger records
// the breaker's changes of state.
func (c *Client) Publisher(keys Keys, cfg *PublisherConfig, logger *zap.Logger) *Publisher {
	p := &Publisher{c: c, keys: keys}
	if cfg != nil {
		p.message, p.routes = cfg.Message, cfg.Routes
	}
	if cfg != nil && cfg.Breaker != nil {
		b := *cfg.Breaker
		if b.IsFailure == nil {
			b.IsFailure = func(err error) bool { return err != nil }
		}
		if logger == nil {
			logger = zap.NewNop()
		}
		p.breaker = failpolicy.NewBreaker(b, logger)
	}
	return p
}

// PublishError says which messages of a Publish were not added (a
// pipeline goes on after a failed command). Unwrap returns the first
// failure.
type PublishError struct {
	// Errs has one error per message of the Publish, nil for those added.
	Errs []error
}

func (e *PublishError) Error() string {
	n := 0
	for _, err := range e.Errs {
		if err != nil {
			n++
		}
	}
	if n == len(e.Errs) {
		return e.Unwrap().Error()
	}
	return fmt.Sprintf("%d of %d messages not added to the stream: %v", n, len(e.Errs), e.Unwrap())
}

// Unwrap returns the first failure.
func (e *PublishError) Unwrap() error {
	for _, err := range e.Errs {
		if err != nil {
			return err
		}
	}
	return nil
}

// Added reports whether the i-th message of a Publish that returned err was
// added to the stream: every one when err is nil, those without an error
// when it is a *PublishError, none otherwise (a refusing circuit).
func Added(err error, i int) bool {
	if err == nil {
		return true
	}
	var pe *PublishError
	return errors.As(err, &pe) && i < len(pe.Errs) && pe.Errs[i] == nil
}

// Publish adds one stream entry per message (the JSON of an
// outbox.Message, as an outbox entry stores it and outbox.Message.Encode
// returns it, in the field outbox.PayloadField) in one pipeline, wrapped
// in MULTI/EXEC: Redis serves a consumer blocked on the stream after the
// EXEC, so a worker waiting for entries gets the whole publish in one
// read rather than its first entry alone (without it, Redis 7 serves the
// blocked read after the first XADD, and under a light load each batch
// relayed became several small batches for the worker, each paying a
// store read, a PostgreSQL transaction and a store write). It returns nil
// when every message was added; otherwise a *PublishError (Added tells
// which were; a refused EXEC, such as one of a Redis out of memory, adds
// none), or the breaker's refusal.
func (p *Publisher) Publish(ctx context.Context, msgs []string) error {
	if len(msgs) == 0 {
		return nil
	}
	return p.publish(ctx, p.keys, msgs)
}

// publish adds msgs to the stream of keys through the breaker.
func (p *Publisher) publish(ctx context.Context, keys Keys, msgs []string) error {
	if p.breaker == nil {
		return p.pipeline(ctx, keys, msgs)
	}
	_, err := p.breaker.Execute(func() (struct{}, error) { return struct{}{}, p.pipeline(ctx, keys, msgs) })
	return err
}

// PublishEvents publishes the messages of events with origin (see Publish).
// When tracing is on, the publish is a span of its own (a child of ctx's
// span: a replay's request; or the root of a trace: a reconciler's sweep)
// linked to each event's ingest trace (outbox.Event.TraceParent), and the
// messages carry it, so the worker's spans continue the publish.
func (p *Publisher) PublishEvents(ctx context.Context, events []*outbox.Event, origin outbox.Origin) (err error) {
	ctx, span := p.startPublishSpan(ctx, events, origin)
	defer func() { tracing.End(span, err) }()
	traceParent := tracing.TraceParent(ctx)
	msgs := make([]string, len(events))
	for i, ev := range events {
		m := ev.MessageWith(origin, p.message)
		m.TraceParent = traceParent
		msgs[i] = m.Encode()
	}
	if p.keys.Partitions() > 1 || len(p.routes) > 0 {
		return p.publishByPartition(ctx, events, msgs)
	}
	return p.Publish(ctx, msgs)
}

// startPublishSpan starts the span of a PublishEvents (a span that does
// nothing while tracing is off).
func (p *Publisher) startPublishSpan(ctx context.Context, events []*outbox.Event, origin outbox.Origin) (context.Context, trace.Span) {
	if !tracing.Enabled() {
		return tracing.Start(ctx, "")
	}
	links := make([]string, 0, len(events))
	for _, ev := range events {
		links = append(links, ev.TraceParent)
	}
	attrs := []attribute.KeyValue{
		semconv.MessagingSystemKey.String("redis"), semconv.MessagingOperationTypeSend, semconv.MessagingOperationName("publish"),
		semconv.MessagingDestinationName(p.keys.Stream()), semconv.MessagingBatchMessageCount(len(events)),
		tracing.OriginKey.String(string(origin)),
	}
	if len(events) == 1 {
		attrs = append(attrs, tracing.EventIDKey.String(events[0].ID))
	}
	return tracing.Start(ctx, "publish "+p.keys.Name(), trace.WithSpanKind(trace.SpanKindProducer),
		trace.WithLinks(tracing.Links(links...)...), trace.WithAttributes(attrs...))
}

func (p *Publisher) pipeline(ctx context.Context, keys Keys, msgs []string) error {
	maxLen := p.c.maxLen
	cmds := make([]*redis.StringCmd, len(msgs))
	_, err := p.c.rdb.TxPipelined(ctx, func(pl redis.Pipeliner) error {
		for i, m := range msgs {
			cmds[i] = pl.XAdd(ctx, &redis.XAddArgs{
				Stream: keys.Stream(), MaxLen: maxLen, Approx: maxLen > 0,
				Values: []any{outbox.PayloadField, m},
			})
		}
		return nil
	})
	if err == nil {
		return nil
	}
	errs := make([]error, len(msgs))
	for i, c := range cmds {
		if errs[i] = c.Err(); errs[i] == nil && c.Val() == "" {
			errs[i] = err // never sent
		}
	}
	return &PublishError{Errs: errs}
}
