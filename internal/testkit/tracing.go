package testkit

import (
	"context"
	"fmt"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/stretchr/testify/require"
	"go.opentelemetry.io/otel/attribute"
	sdktrace "go.opentelemetry.io/otel/sdk/trace"
	"go.opentelemetry.io/otel/sdk/trace/tracetest"
	"go.opentelemetry.io/otel/trace"

	"github.com/outboxd/outboxd/internal/tracing"
)

// Traces records outboxd's spans in memory (the SDK's tracetest exporter,
// synchronously) for the tracing tests. UseTracing turns tracing on for
// a whole test binary; a package calls it from a variable's initialiser, so
// every test of the package runs with tracing on. Only the traces a test
// begins with StartTrace are recorded (and the recovery paths linked to
// them): the sampler drops every other root, so the package's other tests
// write no spans and find what they did before.
type Traces struct {
	exp  *tracetest.InMemoryExporter
	root trace.Tracer
}

var traces struct {
	once sync.Once
	t    *Traces
}

// UseTracing turns outboxd's tracing on, recording into memory, and
// returns the recorder; it is the same for every call of a test binary.
func UseTracing() *Traces {
	traces.once.Do(func() {
		exp := tracetest.NewInMemoryExporter()
		tp := sdktrace.NewTracerProvider(sdktrace.WithSyncer(exp), sdktrace.WithSampler(linkedSampler{}))
		tracing.Use(tp)
		// The tests' own roots come from a provider outside outboxd's that
		// samples everything and records nothing.
		root := sdktrace.NewTracerProvider(sdktrace.WithSampler(sdktrace.AlwaysSample())).Tracer("testkit")
		traces.t = &Traces{exp: exp, root: root}
	})
	return traces.t
}

// linkedSampler samples a span whose parent is sampled, or a root linked to
// a sampled trace (a reconciler's publish of a traced event); it drops
// every other root.
type linkedSampler struct{}

func (linkedSampler) ShouldSample(p sdktrace.SamplingParameters) sdktrace.SamplingResult {
	psc := trace.SpanContextFromContext(p.ParentContext)
	sampled := psc.IsSampled()
	if !psc.IsValid() {
		for _, l := range p.Links {
			sampled = sampled || l.SpanContext.IsSampled()
		}
	}
	if !sampled {
		return sdktrace.SamplingResult{Decision: sdktrace.Drop, Tracestate: psc.TraceState()}
	}
	return sdktrace.SamplingResult{Decision: sdktrace.RecordAndSample, Tracestate: psc.TraceState()}
}

func (linkedSampler) Description() string { return "testkit.linkedSampler" }

// StartTrace begins a sampled trace of the test's own: a client span, as
// a client that traces would send. Write with the context, or send its
// traceparent in the request's header; the span ends at t's cleanup.
func (tr *Traces) StartTrace(t testing.TB) (context.Context, string) {
	t.Helper()
	ctx, span := tr.root.Start(context.Background(), "client "+t.Name(), trace.WithSpanKind(trace.SpanKindClient))
	t.Cleanup(func() { span.End() })
	tp := tracing.TraceParent(ctx)
	require.NotEmpty(t, tp, "tracing is on (UseTracing) and the root sampled")
	return ctx, tp
}

// Spans returns the ended spans of the trace traceParent names, in the
// order they ended.
func (tr *Traces) Spans(traceParent string) tracetest.SpanStubs {
	return tr.Trace(tracing.SpanContext(traceParent).TraceID())
}

// Trace returns the ended spans of trace id, in the order they ended.
func (tr *Traces) Trace(id trace.TraceID) tracetest.SpanStubs {
	var out tracetest.SpanStubs
	for _, s := range tr.exp.GetSpans() {
		if s.SpanContext.TraceID() == id {
			out = append(out, s)
		}
	}
	return out
}

// All returns every ended span recorded so far.
func (tr *Traces) All() tracetest.SpanStubs { return tr.exp.GetSpans() }

// WaitSpan waits until the trace of traceParent has count ended spans
// that match, and returns them.
func (tr *Traces) WaitSpan(t testing.TB, traceParent string, count int, match func(s tracetest.SpanStub) bool) tracetest.SpanStubs {
	t.Helper()
	var got tracetest.SpanStubs
	require.Eventually(t, func() bool {
		got = got[:0]
		for _, s := range tr.Spans(traceParent) {
			if match(s) {
				got = append(got, s)
			}
		}
		return len(got) >= count
	}, 30*time.Second, 10*time.Millisecond, "spans of %s:\n%s", traceParent, SpanTree(tr.Spans(traceParent)))
	return got
}

// Named matches the spans whose name starts with prefix and, when eventID
// is not "", that are about that event (outboxd.event.id).
func Named(prefix, eventID string) func(s tracetest.SpanStub) bool {
	return func(s tracetest.SpanStub) bool {
		return strings.HasPrefix(s.Name, prefix) && (eventID == "" || SpanAttr(s, string(tracing.EventIDKey)) == eventID)
	}
}

// SpanAttr returns the value of s's attribute key as a string, "" when it
// has none.
func SpanAttr(s tracetest.SpanStub, key string) string {
	for _, kv := range s.Attributes {
		if string(kv.Key) == key {
			return kv.Value.String()
		}
	}
	return ""
}

// SpanTree formats spans as an indented tree, children under their
// parents in the order they started: name, kind, status and the
// attributes that say what a span is about (db.*, messaging.*, outboxd.*,
// http.route and the status code), then its links.
func SpanTree(spans tracetest.SpanStubs) string {
	byID := map[trace.SpanID]bool{}
	for _, s := range spans {
		byID[s.SpanContext.SpanID()] = true
	}
	kids := map[trace.SpanID][]tracetest.SpanStub{}
	var roots []tracetest.SpanStub
	for _, s := range spans {
		if byID[s.Parent.SpanID()] {
			kids[s.Parent.SpanID()] = append(kids[s.Parent.SpanID()], s)
		} else {
			roots = append(roots, s)
		}
	}
	var b strings.Builder
	var walk func(s tracetest.SpanStub, depth int)
	walk = func(s tracetest.SpanStub, depth int) {
		var attrs []string
		for _, kv := range s.Attributes {
			k := string(kv.Key)
			if strings.HasPrefix(k, "db.") || strings.HasPrefix(k, "messaging.") || strings.HasPrefix(k, "outboxd.") ||
				k == "http.route" || k == "http.response.status_code" {
				attrs = append(attrs, k+"="+kv.Value.String())
			}
		}
		status := ""
		if s.Status.Code.String() == "Error" {
			status = " ERROR(" + s.Status.Description + ")"
		}
		fmt.Fprintf(&b, "%s%s [%s, %s]%s %s\n", strings.Repeat("  ", depth), s.Name, s.SpanKind,
			s.EndTime.Sub(s.StartTime).Round(10*time.Microsecond), status, strings.Join(attrs, " "))
		for _, l := range s.Links {
			fmt.Fprintf(&b, "%s  ↪ link to %s/%s %s\n", strings.Repeat("  ", depth), l.SpanContext.TraceID(), l.SpanContext.SpanID(),
				attrString(l.Attributes))
		}
		children := kids[s.SpanContext.SpanID()]
		slices.SortFunc(children, func(a, b tracetest.SpanStub) int { return a.StartTime.Compare(b.StartTime) })
		for _, c := range children {
			walk(c, depth+1)
		}
	}
	slices.SortFunc(roots, func(a, b tracetest.SpanStub) int { return a.StartTime.Compare(b.StartTime) })
	for _, r := range roots {
		fmt.Fprintf(&b, "trace %s (parent %s)\n", r.SpanContext.TraceID(), r.Parent.SpanID())
		walk(r, 1)
	}
	return b.String()
}

func attrString(kvs []attribute.KeyValue) string {
	out := make([]string, len(kvs))
	for i, kv := range kvs {
		out[i] = string(kv.Key) + "=" + kv.Value.String()
	}
	return strings.Join(out, " ")
}
