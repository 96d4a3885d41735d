package worker

import (
	"context"
	"slices"

	"go.opentelemetry.io/otel/attribute"
	semconv "go.opentelemetry.io/otel/semconv/v1.40.0"
	"go.opentelemetry.io/otel/trace"
	"go.uber.org/zap"

	"github.com/outboxd/outboxd/internal/stream"
	"github.com/outboxd/outboxd/internal/tracing"
	"github.com/outboxd/outboxd/outbox"
)

// traceParent keeps the trace context of msg, the first entry of its event
// in the batch.
func (b *batch) traceParent(msg outbox.Message) {
	if msg.TraceParent == "" {
		return
	}
	if b.traceParents == nil {
		b.traceParents = map[string]string{}
	}
	b.traceParents[msg.EventID] = msg.TraceParent
}

// startProjectSpans starts the projection span of each event of b whose
// message carries a trace context (the relay's or a re-publish's), as a
// child of that context: one span per event, ended when the batch is
// acknowledged (or fails). The batch's store reads and writes, its
// PostgreSQL transaction and its acknowledgement are recorded once, under
// the first event's span, which every other event's span links to
// (tracing.Items). Events without a context get no span: their messages
// are handled as before.
func (p *processor) startProjectSpans(ctx context.Context, b *batch, entries int) *tracing.Items {
	if b.traceParents == nil {
		return nil
	}
	return tracing.StartItems(ctx, "project "+p.cfg.Stream, trace.SpanKindConsumer, len(b.ids),
		func(i int) string { return b.traceParents[b.ids[i]] },
		func(i int) []attribute.KeyValue {
			id := b.ids[i]
			return []attribute.KeyValue{tracing.EventIDKey.String(id), tracing.OriginKey.String(string(b.origins[id])),
				semconv.MessagingMessageID(b.entries[id][0].ID)}
		},
		semconv.MessagingSystemKey.String("redis"), semconv.MessagingOperationTypeProcess, semconv.MessagingOperationName("project"),
		semconv.MessagingDestinationName(p.cfg.Stream), semconv.MessagingConsumerGroupName(p.cfg.Group),
		semconv.MessagingClientID(p.cfg.Consumer), semconv.MessagingBatchMessageCount(entries))
}

// linkIngest links the span of each event that a recovery path put into
// the stream (the reconciler, a replay) to its ingest request's trace,
// which its original keeps.
func (b *batch) linkIngest() {
	if b.spans == nil {
		return
	}
	for i, id := range b.ids {
		if ev := b.originals[id]; ev != nil && ev.TraceParent != "" && b.origins[id] != outbox.OriginOutbox {
			b.spans.Link(i, ev.TraceParent, attribute.String("outboxd.link", "ingest"))
		}
	}
}

// failSpans ends the span of each event that failed in the batch with its
// own error (held for another delivery, dead-lettered or parked).
func (b *batch) failSpans(failures, invalid map[string]error) {
	if b.spans == nil {
		return
	}
	for _, errs := range []map[string]error{failures, invalid} {
		for id, err := range errs {
			if i, ok := slices.BinarySearch(b.ids, id); ok {
				b.spans.Fail(i, err)
			}
		}
	}
}

// traceID is the trace_id log field of the trace m's message carries.
func traceID(m stream.Entry) zap.Field {
	msg, err := m.Message()
	if err != nil {
		return zap.Skip()
	}
	return tracing.LogFieldOf(msg.TraceParent)
}
