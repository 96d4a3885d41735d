package instrument

import (
	"context"
	"errors"
	"net/http"
	"strings"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgconn"
	"github.com/jackc/pgx/v5/pgxpool"
	"go.opentelemetry.io/contrib/instrumentation/net/http/otelhttp"
	"go.opentelemetry.io/otel/attribute"
	semconv "go.opentelemetry.io/otel/semconv/v1.40.0"
	"go.opentelemetry.io/otel/trace"

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

// Tracer is a pgx.QueryTracer: a span per statement (BEGIN, the
// projector's statements, COMMIT) under a recording span of its context,
// with the semantic conventions of a PostgreSQL client call. It records the
// statement's first keyword (db.operation.name) and, on failure, its
// SQLSTATE (db.response.status_code); never the query's text or its
// arguments (they hold payloads).
type Tracer struct{}

var _ pgx.QueryTracer = Tracer{}

// TraceQueryStart starts the span of a statement.
func (Tracer) TraceQueryStart(ctx context.Context, conn *pgx.Conn, data pgx.TraceQueryStartData) context.Context {
	op := operation(data.SQL)
	attrs := []attribute.KeyValue{semconv.DBSystemNamePostgreSQL, semconv.DBOperationName(op)}
	if c := conn.Config(); c != nil {
		attrs = append(attrs, semconv.DBNamespace(c.Database), semconv.ServerAddress(c.Host), semconv.ServerPort(int(c.Port)))
	}
	ctx, _ = tracing.StartChild(ctx, op, trace.WithSpanKind(trace.SpanKindClient), trace.WithAttributes(attrs...))
	return ctx
}

// TraceQueryEnd ends the span of a statement.
func (Tracer) TraceQueryEnd(ctx context.Context, _ *pgx.Conn, data pgx.TraceQueryEndData) {
	span := trace.SpanFromContext(ctx)
	if !span.IsRecording() {
		return
	}
	var pgErr *pgconn.PgError
	if errors.As(data.Err, &pgErr) {
		span.SetAttributes(semconv.DBResponseStatusCode(pgErr.Code))
	}
	tracing.End(span, data.Err)
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
