package tracing

import (
	"context"

	"go.opentelemetry.io/otel/attribute"
	"go.opentelemetry.io/otel/trace"
)

// Items are the spans of the items of one batch (the entries the dispatcher
// relays with one pipeline, the events a worker projects with one
// transaction): one span per item that carries a trace context, a child of
// that context, so each event's trace goes on through the batch. The
// batch's shared calls (the store reads and writes, the PostgreSQL
// transaction) happen once for all its items; they are recorded once, under
// the span of the first item that has one (Context), and every other item's
// span links to that span. A batch whose items carry no context has no
// spans, and a nil *Items is valid: its methods do nothing.
type Items struct {
	spans   []trace.Span // by item; nil for an item without a context
	parents []string     // the items' traceparents as given
	first   trace.Span   // the span of the shared calls
}

// StartItems starts a span named name for each of n items whose parent(i)
// is a traceparent, with the attributes common to all and those attrs(i)
// returns for each (attrs may be nil). It returns nil when tracing is off or
// no item carries a context, without calling attrs.
func StartItems(ctx context.Context, name string, kind trace.SpanKind, n int, parent func(i int) string,
	attrs func(i int) []attribute.KeyValue, common ...attribute.KeyValue) *Items {
	if !on.Load() {
		return nil
	}
	var it *Items
	for i := range n {
		tp := parent(i)
		if tp == "" {
			continue
		}
		sc := SpanContext(tp)
		if !sc.IsValid() {
			continue
		}
		if it == nil {
			it = &Items{spans: make([]trace.Span, n), parents: make([]string, n)}
		}
		it.parents[i] = tp
		opts := []trace.SpanStartOption{trace.WithSpanKind(kind), trace.WithAttributes(common...)}
		if attrs != nil {
			opts = append(opts, trace.WithAttributes(attrs(i)...))
		}
		if it.first != nil {
			opts = append(opts, trace.WithLinks(trace.Link{SpanContext: it.first.SpanContext(),
				Attributes: []attribute.KeyValue{attribute.String("outboxd.link", "batch")}}))
		}
		_, span := (*tracer.Load()).Start(trace.ContextWithRemoteSpanContext(ctx, sc), name, opts...)
		it.spans[i] = span
		if it.first == nil {
			it.first = span
		}
	}
	return it
}

// Context returns ctx carrying the span under which the batch's shared
// calls are recorded, or ctx itself when there is none.
func (it *Items) Context(ctx context.Context) context.Context {
	if it == nil {
		return ctx
	}
	return trace.ContextWithSpan(ctx, it.first)
}

// TraceParent returns the traceparent of item i's span: what the item
// carries on to the next hop (the stream message). It is the item's own
// traceparent when its span does not record, and "" for an item without a
// context.
func (it *Items) TraceParent(i int) string {
	if it == nil || it.spans[i] == nil {
		return ""
	}
	if tp := format(it.spans[i].SpanContext()); tp != "" {
		return tp
	}
	return it.parents[i]
}

// Link adds to item i's span a link to the trace context traceParent (an
// event's ingest, seen again in a recovery path).
func (it *Items) Link(i int, traceParent string, attrs ...attribute.KeyValue) {
	if it == nil || it.spans[i] == nil {
		return
	}
	if sc := SpanContext(traceParent); sc.IsValid() {
		it.spans[i].AddLink(trace.Link{SpanContext: sc, Attributes: attrs})
	}
}

// SetAttributes sets attributes on item i's span.
func (it *Items) SetAttributes(i int, attrs ...attribute.KeyValue) {
	if it == nil || it.spans[i] == nil {
		return
	}
	it.spans[i].SetAttributes(attrs...)
}

// Fail records err as item i's own failure; End then leaves it as it is.
func (it *Items) Fail(i int, err error) {
	if it == nil || it.spans[i] == nil || err == nil {
		return
	}
	End(it.spans[i], err)
	it.spans[i] = nil
}

// End ends every span that is still open, with err (the batch's outcome).
func (it *Items) End(err error) {
	if it == nil {
		return
	}
	for i, s := range it.spans {
		if s != nil {
			End(s, err)
			it.spans[i] = nil
		}
	}
}
