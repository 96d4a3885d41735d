package tracing_test

import (
	"context"
	"errors"
	"testing"

	"github.com/stretchr/testify/require"
	"go.opentelemetry.io/otel/attribute"
	"go.opentelemetry.io/otel/codes"
	"go.opentelemetry.io/otel/trace"
	"go.uber.org/zap"
	"go.uber.org/zap/zaptest/observer"

	"github.com/outboxd/outboxd/internal/testkit"
	"github.com/outboxd/outboxd/internal/tracing"
)

func TestMain(m *testing.M) { testkit.Main(m) }

var traces = testkit.UseTracing()

const tp = "00-4bf92f3577b34da6a3ce929d0e0e4736-00f067aa0ba902b7-01"

func TestTraceParent(t *testing.T) {
	t.Parallel()
	sc := tracing.SpanContext(tp)
	require.True(t, sc.IsValid())
	require.True(t, sc.IsRemote())
	require.Equal(t, "4bf92f3577b34da6a3ce929d0e0e4736", sc.TraceID().String())
	require.Equal(t, tp, tracing.TraceParent(trace.ContextWithSpanContext(context.Background(), sc)), "round trip")

	for _, bad := range []string{"", "garbage", "00-00000000000000000000000000000000-00f067aa0ba902b7-01", "01-4bf92f35"} {
		require.False(t, tracing.SpanContext(bad).IsValid(), bad)
		require.Empty(t, tracing.Links(bad), bad)
		require.Equal(t, context.Background(), tracing.WithParent(context.Background(), bad), bad)
	}
	unsampled := trace.ContextWithSpanContext(context.Background(), sc.WithTraceFlags(0))
	require.Empty(t, tracing.TraceParent(unsampled), "only a sampled trace travels")
	require.Empty(t, tracing.TraceParent(context.Background()))
}

func TestStartChildOnlyUnderARecordingSpan(t *testing.T) {
	t.Parallel()
	ctx, span := tracing.StartChild(context.Background(), "orphan")
	require.False(t, span.IsRecording(), "no parent: no span")
	require.Equal(t, context.Background(), ctx)

	root, clientTP := traces.StartTrace(t)
	ctx, parent := tracing.Start(tracing.WithParent(context.Background(), tracing.TraceParent(root)), "parent")
	_, child := tracing.StartChild(ctx, "child")
	require.True(t, child.IsRecording())
	tracing.End(child, errors.New("boom"))
	tracing.End(parent, nil)
	spans := traces.Spans(clientTP)
	require.Len(t, spans, 2)
	require.Equal(t, "child", spans[0].Name)
	require.Equal(t, codes.Error, spans[0].Status.Code)
	require.Equal(t, "boom", spans[0].Status.Description)
	require.Equal(t, spans[1].SpanContext.SpanID(), spans[0].Parent.SpanID())
}

// TestItems: one span per item that carries a context, each in its own
// trace; the shared calls under the first; the others link to it; a
// failing item keeps its own error.
func TestItems(t *testing.T) {
	t.Parallel()
	rootA, a := traces.StartTrace(t)
	_, b := traces.StartTrace(t)
	parents := []string{a, "", b, "malformed"}
	it := tracing.StartItems(context.Background(), "item", trace.SpanKindConsumer, len(parents),
		func(i int) string { return parents[i] },
		func(i int) []attribute.KeyValue { return []attribute.KeyValue{attribute.Int("i", i)} },
		attribute.String("common", "yes"))
	require.NotNil(t, it)
	require.Empty(t, it.TraceParent(1), "no context, no span")
	require.Empty(t, it.TraceParent(3))
	itemA, itemB := tracing.SpanContext(it.TraceParent(0)), tracing.SpanContext(it.TraceParent(2))
	require.Equal(t, tracing.SpanContext(a).TraceID(), itemA.TraceID())
	require.Equal(t, tracing.SpanContext(b).TraceID(), itemB.TraceID())
	require.Equal(t, itemA.SpanID(), trace.SpanContextFromContext(it.Context(context.Background())).SpanID(), "shared calls under the first")
	_, shared := tracing.StartChild(it.Context(context.Background()), "shared")
	shared.End()
	it.Link(2, tracing.TraceParent(rootA), attribute.String("outboxd.link", "ingest"))
	it.Fail(2, errors.New("record failed"))
	it.End(nil)
	it.End(nil) // twice is harmless

	spansA, spansB := traces.Spans(a), traces.Spans(b)
	require.Len(t, spansA, 2, testkit.SpanTree(spansA))
	require.Len(t, spansB, 1, testkit.SpanTree(spansB))
	first, other := spansA[1], spansB[0]
	require.Equal(t, "shared", spansA[0].Name)
	require.Equal(t, first.SpanContext.SpanID(), spansA[0].Parent.SpanID())
	require.Equal(t, "0", testkit.SpanAttr(first, "i"))
	require.Equal(t, "yes", testkit.SpanAttr(other, "common"))
	require.Equal(t, codes.Unset, first.Status.Code)
	require.Equal(t, codes.Error, other.Status.Code)
	require.Len(t, other.Links, 2, "to the batch's first item and to the linked context")
	require.Equal(t, first.SpanContext.SpanID(), other.Links[0].SpanContext.SpanID())

	var none *tracing.Items
	require.Nil(t, tracing.StartItems(context.Background(), "item", trace.SpanKindConsumer, 2, func(int) string { return "" }, nil))
	require.Equal(t, context.Background(), none.Context(context.Background()))
	require.Empty(t, none.TraceParent(0))
	none.Fail(0, errors.New("x"))
	none.End(nil)
}

// TestLogField: logs name the trace of the context or traceparent they
// are about, and nothing when there is none.
func TestLogField(t *testing.T) {
	t.Parallel()
	core, logs := observer.New(zap.InfoLevel)
	log := zap.New(core)
	log.Info("traced", tracing.LogFieldOf(tp))
	log.Info("traced ctx", tracing.LogField(trace.ContextWithSpanContext(context.Background(), tracing.SpanContext(tp))))
	log.Info("untraced", tracing.LogFieldOf(""), tracing.LogField(context.Background()))
	entries := logs.All()
	require.Equal(t, "4bf92f3577b34da6a3ce929d0e0e4736", entries[0].ContextMap()["trace_id"])
	require.Equal(t, "4bf92f3577b34da6a3ce929d0e0e4736", entries[1].ContextMap()["trace_id"])
	require.NotContains(t, entries[2].ContextMap(), "trace_id")
}
