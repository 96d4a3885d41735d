package tracing_test

import (
	"context"
	"testing"

	"go.opentelemetry.io/otel"
	"go.opentelemetry.io/otel/trace"

	"github.com/outboxd/outboxd/internal/tracing"
)

// BenchmarkOff is what a batch of 2,000 items costs the components while
// tracing is off (the default): the dispatcher's and the worker's
// StartItems, a Start and End (a publish), and a TraceParent per item (the
// writer, per request). Compare BenchmarkOn, a batch whose every item is
// traced and sampled.
func BenchmarkOff(b *testing.B) {
	tracing.Use(nil)
	defer tracing.Use(otel.GetTracerProvider())
	benchBatch(b, "")
}

// BenchmarkOn: the same batch, every item carrying a sampled context, with
// the SDK recording into memory (what tracing costs when it is on).
func BenchmarkOn(b *testing.B) {
	benchBatch(b, tp)
}

func benchBatch(b *testing.B, parent string) {
	const n = 2000
	ctx := context.Background()
	b.ReportAllocs()
	for b.Loop() {
		it := tracing.StartItems(ctx, "relay", trace.SpanKindProducer, n, func(int) string { return parent }, nil)
		for i := range n {
			_ = it.TraceParent(i)
			_ = tracing.TraceParent(ctx)
		}
		sctx, span := tracing.Start(it.Context(ctx), "publish")
		_, child := tracing.StartChild(sctx, "store")
		tracing.End(child, nil)
		tracing.End(span, nil)
		it.End(nil)
	}
}
