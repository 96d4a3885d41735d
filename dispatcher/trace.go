package dispatcher

import (
	"context"

	"go.opentelemetry.io/otel/attribute"
	semconv "go.opentelemetry.io/otel/semconv/v1.40.0"
	"go.opentelemetry.io/otel/trace"

	"github.com/outboxd/outboxd/internal/tracing"
	"github.com/outboxd/outboxd/outbox"
)

// startRelaySpans starts the relay span of each entry of a batch that
// carries a trace context (its ingest request's: outbox.Entry.TraceParent),
// as a child of that context, and returns the entries to relay: those
// entries' messages carry the relay span's traceparent, so that the
// worker's span continues it. The same pass puts each entry's ReadAfter
// (its commit's position, from the store's feed) into its message, so that
// the worker reads the original at or after it (outbox.WithRelay: one
// decode and one encode for both); the other entries are relayed as they
// are. The batch's XADD, MarkDispatched and checkpoint are recorded under
// the first relay span (tracing.Items). Without a traced entry it returns
// nil spans, and entries themselves when none carries a ReadAfter either.
// With tracing off here, a traced entry's message carries its ingest
// context on, so a worker that traces still joins the event's trace.
func (d *Dispatcher) startRelaySpans(ctx context.Context, entries []outbox.Entry) (*tracing.Items, []outbox.Entry) {
	spans := tracing.StartItems(ctx, "relay "+d.cfg.Stream, trace.SpanKindProducer, len(entries),
		func(i int) string { return entries[i].TraceParent },
		func(i int) []attribute.KeyValue {
			return []attribute.KeyValue{tracing.EventIDKey.String(entries[i].EventID), attribute.String("outboxd.entry.id", entries[i].ID)}
		},
		semconv.MessagingSystemKey.String("redis"), semconv.MessagingOperationTypeSend, semconv.MessagingOperationName("relay"),
		semconv.MessagingDestinationName(d.cfg.Stream), semconv.MessagingBatchMessageCount(len(entries)),
		attribute.String("outboxd.dispatcher.owner", d.cfg.Owner))
	out := entries
	for i, e := range entries {
		tp := e.TraceParent
		if tracing.Enabled() {
			tp = spans.TraceParent(i)
		}
		if tp == "" && e.ReadAfter == "" {
			continue
		}
		if &out[0] == &entries[0] { // copy before the first change: the caller's entries stay as read
			out = append([]outbox.Entry(nil), entries...)
		}
		out[i].Message = outbox.WithRelay(e.Message, tp, e.ReadAfter)
	}
	return spans, out
}
