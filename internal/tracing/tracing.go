// Package tracing is outboxd's OpenTelemetry plumbing at the level of the
// API: whether tracing is on, the W3C traceparent that an event carries from
// the ingest request through the outbox entry and the stream message, the
// spans of the components (Start, End, Items for the spans of a batch's
// items) and the trace_id of the logs. It is a leaf: the OpenTelemetry API
// and zap only, so the packages a service imports (outbox, store, stream)
// pull in no SDK and no exporter.
//
// Tracing is off until Use installs a tracer provider (package
// internal/tracing/instrument does, from the standard OTEL_* variables).
// While it is off every function here returns at once: no span, no
// traceparent, no allocation; a message that carries a traceparent is
// handled as one without.
//
// Only the context of a sampled trace travels with an event: TraceParent
// returns "" for a context the sampler dropped, so with a ratio sampler the
// events outside the sample cost nothing downstream either.
package tracing

import (
	"context"
	"sync/atomic"

	"go.opentelemetry.io/otel"
	"go.opentelemetry.io/otel/attribute"
	"go.opentelemetry.io/otel/codes"
	"go.opentelemetry.io/otel/propagation"
	"go.opentelemetry.io/otel/trace"
	"go.uber.org/zap"
)

// Name is the instrumentation scope of outboxd's spans.
const Name = "github.com/outboxd/outboxd"

// Attribute keys of outboxd's own (the semantic conventions have none for
// them). Ids only: never a payload.
const (
	// EventIDKey is the id of the original a span is about.
	EventIDKey = attribute.Key("outboxd.event.id")
	// OriginKey is a stream message's origin (outbox.Origin).
	OriginKey = attribute.Key("outboxd.origin")
	// RoleKey is the role (subcommand) of the process, a resource attribute.
	RoleKey = attribute.Key("outboxd.role")
)

var (
	on     atomic.Bool
	tracer atomic.Pointer[trace.Tracer]
	tc     = propagation.TraceContext{}
)

// Use installs tp as the global tracer provider, with the W3C trace-context
// propagator, and turns outboxd's tracing on; nil turns it off (the global
// provider is left as it is). Call it once at start-up, before the
// components run (a test package calls it once for all its tests).
func Use(tp trace.TracerProvider) {
	if tp == nil {
		on.Store(false)
		return
	}
	otel.SetTracerProvider(tp)
	otel.SetTextMapPropagator(tc)
	t := tp.Tracer(Name)
	tracer.Store(&t)
	on.Store(true)
}

// Enabled reports whether tracing is on.
func Enabled() bool { return on.Load() }

// Start starts a span named name, a child of ctx's span or the root of a
// new trace, when tracing is on; otherwise it returns ctx and a span that
// does nothing.
func Start(ctx context.Context, name string, opts ...trace.SpanStartOption) (context.Context, trace.Span) {
	if !on.Load() {
		return ctx, trace.SpanFromContext(context.Background())
	}
	return (*tracer.Load()).Start(ctx, name, opts...)
}

// StartChild starts a span like Start, but only under a span of ctx that is
// recording: the calls of a traced event get spans, the background work
// (polls, leases, checkpoints while idle) none.
func StartChild(ctx context.Context, name string, opts ...trace.SpanStartOption) (context.Context, trace.Span) {
	if !on.Load() || !trace.SpanFromContext(ctx).IsRecording() {
		return ctx, trace.SpanFromContext(context.Background())
	}
	return (*tracer.Load()).Start(ctx, name, opts...)
}

// End ends span, with the status Error and err's message when err is not
// nil. A context error of a stop is an error too: the work did not finish.
func End(span trace.Span, err error) {
	if err != nil && span.IsRecording() {
		span.SetStatus(codes.Error, err.Error())
	}
	span.End()
}

// TraceParent returns the W3C traceparent of ctx's span ("00-<trace
// id>-<span id>-01"), or "" when tracing is off, ctx has no span or its
// trace is not sampled.
func TraceParent(ctx context.Context) string {
	if !on.Load() {
		return ""
	}
	return format(trace.SpanContextFromContext(ctx))
}

// format returns the traceparent of sc, "" unless it is valid and sampled.
func format(sc trace.SpanContext) string {
	if !sc.IsValid() || !sc.IsSampled() {
		return ""
	}
	return "00-" + sc.TraceID().String() + "-" + sc.SpanID().String() + "-01"
}

// SpanContext parses a traceparent into a remote span context; the zero
// SpanContext (not valid) for "" or a malformed value.
func SpanContext(traceParent string) trace.SpanContext {
	if traceParent == "" {
		return trace.SpanContext{}
	}
	ctx := tc.Extract(context.Background(), propagation.MapCarrier{"traceparent": traceParent})
	return trace.SpanContextFromContext(ctx)
}

// WithParent returns ctx carrying traceParent as its remote parent, so a
// span started in it continues that trace; ctx itself when traceParent is
// "" or malformed, or tracing is off.
func WithParent(ctx context.Context, traceParent string) context.Context {
	if !on.Load() {
		return ctx
	}
	sc := SpanContext(traceParent)
	if !sc.IsValid() {
		return ctx
	}
	return trace.ContextWithRemoteSpanContext(ctx, sc)
}

// Links returns a link to each valid traceparent of traceParents.
func Links(traceParents ...string) []trace.Link {
	var out []trace.Link
	for _, tp := range traceParents {
		if sc := SpanContext(tp); sc.IsValid() {
			out = append(out, trace.Link{SpanContext: sc})
		}
	}
	return out
}

// LogField returns the zap field trace_id of ctx's span, or a field that
// logs nothing when ctx has none.
func LogField(ctx context.Context) zap.Field {
	return traceIDField(trace.SpanContextFromContext(ctx))
}

// LogFieldOf returns the zap field trace_id of a traceparent, or a field
// that logs nothing for "".
func LogFieldOf(traceParent string) zap.Field {
	return traceIDField(SpanContext(traceParent))
}

func traceIDField(sc trace.SpanContext) zap.Field {
	if !sc.HasTraceID() {
		return zap.Skip()
	}
	return zap.String("trace_id", sc.TraceID().String())
}
