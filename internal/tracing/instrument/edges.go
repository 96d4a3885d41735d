package instrument

import (
	"context"
	"net/http"
	"strings"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgxpool"
	"go.opentelemetry.io/contrib/instrumentation/net/http/otelhttp"
	"go.opentelemetry.io/otel/attribute"
	semconv "go.opentelemetry.io/otel/semconv/v1.40.0"
	"go.opentelemetry.io/otel/trace"

	"github.com/outboxd/outboxd/internal/pgerr"
	"github.com/outboxd/outboxd/internal/tracing"
)

// otelhttpHandler wraps h in otelhttp's server middleware: the request's
// traceparent (W3C) is continued, or a trace begins; the span is named by
// the route's pattern ("POST /v1/events"). The API is traced, not the
// status that dashboards and the console poll.
func otelhttpHandler(h http.Handler) http.Handler {
	return otelhttp.NewHandler(h, "outboxd",
		otelhttp.WithFilter(func(r *http.Request) bool {
			return strings.HasPrefix(r.URL.Path, "/v1/") && !strings.HasPrefix(r.URL.Path, "/v1/status")
		}),
		otelhttp.WithSpanNameFormatter(func(_ string, r *http.Request) string {
			if r.Pattern != "" {
				return r.Pattern
			}
			return r.Method
		}))
}

// Postgres makes cfg's connections record each statement of a traced call
// as a client span (Tracer); it leaves cfg alone while tracing is off.
func Postgres(cfg *pgxpool.Config) {
	if tracing.Enabled() {
		cfg.ConnConfig.Tracer = Tracer{}
	}
}

// Tracer is a pgx.QueryTracer and BatchTracer: a span per statement
// (BEGIN, a custom projector's statements, COMMIT) or pipeline under a
// recording span of its context, with the semantic conventions of a
// PostgreSQL client call. It records the statement's first keyword
// (db.operation.name) and, on failure, its SQLSTATE
// (db.response.status_code); never the query's text or its arguments (they
// hold payloads).
type Tracer struct{}

var _ pgx.QueryTracer = Tracer{}

var _ pgx.BatchTracer = Tracer{}

// TraceQueryStart starts the span of a statement.
func (Tracer) TraceQueryStart(ctx context.Context, conn *pgx.Conn, data pgx.TraceQueryStartData) context.Context {
	return start(ctx, conn, operation(data.SQL))
}

// TraceQueryEnd ends the span of a statement.
func (Tracer) TraceQueryEnd(ctx context.Context, _ *pgx.Conn, data pgx.TraceQueryEndData) {
	end(ctx, data.Err)
}

// TraceBatchStart starts the span of a pipeline (the worker's projection
// transaction: BEGIN, its timeouts, the projector's statements and COMMIT
// in one round trip), named BATCH as the semantic conventions name a batch
// of different operations, with db.operation.batch.size; each statement
// becomes an event of it (TraceBatchQuery).
func (Tracer) TraceBatchStart(ctx context.Context, conn *pgx.Conn, data pgx.TraceBatchStartData) context.Context {
	return start(ctx, conn, "BATCH", semconv.DBOperationBatchSize(data.Batch.Len()))
}

// TraceBatchQuery adds a statement of a pipeline to its span: an event
// named by its first keyword, with its SQLSTATE when it failed.
func (Tracer) TraceBatchQuery(ctx context.Context, _ *pgx.Conn, data pgx.TraceBatchQueryData) {
	span := trace.SpanFromContext(ctx)
	if !span.IsRecording() {
		return
	}
	op := operation(data.SQL)
	attrs := []attribute.KeyValue{semconv.DBOperationName(op)}
	if code := pgerr.Code(data.Err); code != "" {
		attrs = append(attrs, semconv.DBResponseStatusCode(code))
	}
	span.AddEvent(op, trace.WithAttributes(attrs...))
}

// TraceBatchEnd ends the span of a pipeline.
func (Tracer) TraceBatchEnd(ctx context.Context, _ *pgx.Conn, data pgx.TraceBatchEndData) {
	end(ctx, data.Err)
}

// start starts the client span op of a call on conn.
func start(ctx context.Context, conn *pgx.Conn, op string, extra ...attribute.KeyValue) context.Context {
	attrs := append([]attribute.KeyValue{semconv.DBSystemNamePostgreSQL, semconv.DBOperationName(op)}, extra...)
	if c := conn.Config(); c != nil {
		attrs = append(attrs, semconv.DBNamespace(c.Database), semconv.ServerAddress(c.Host), semconv.ServerPort(int(c.Port)))
	}
	ctx, _ = tracing.StartChild(ctx, op, trace.WithSpanKind(trace.SpanKindClient), trace.WithAttributes(attrs...))
	return ctx
}

// end ends the span of ctx (start's) with err and its SQLSTATE.
func end(ctx context.Context, err error) {
	span := trace.SpanFromContext(ctx)
	if !span.IsRecording() {
		return
	}
	if code := pgerr.Code(err); code != "" {
		span.SetAttributes(semconv.DBResponseStatusCode(code))
	}
	tracing.End(span, err)
}

// operation returns the first keyword of a statement, upper-cased
// ("WITH", "INSERT", "BEGIN"), or "postgresql" when it has none.
func operation(sql string) string {
	f := strings.Fields(sql)
	if len(f) == 0 {
		return "postgresql"
	}
	word := strings.ToUpper(strings.TrimRight(f[0], ";("))
	for _, r := range word {
		if r < 'A' || r > 'Z' {
			return "postgresql"
		}
	}
	return word
}
