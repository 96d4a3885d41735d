package runner

import (
	"crypto/rand"
	"encoding/hex"
	"fmt"
	"io"
	"net/http"
	"net/http/httptest"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/stretchr/testify/require"
	"go.opentelemetry.io/otel/attribute"
	"go.opentelemetry.io/otel/codes"
	"go.opentelemetry.io/otel/sdk/trace/tracetest"
	"go.opentelemetry.io/otel/trace"
	coltracepb "go.opentelemetry.io/proto/otlp/collector/trace/v1"
	commonpb "go.opentelemetry.io/proto/otlp/common/v1"
	tracepb "go.opentelemetry.io/proto/otlp/trace/v1"
	"google.golang.org/protobuf/proto"

	"github.com/outboxd/outboxd/internal/testkit"
)

// TestTracingConfigErrors: an OTEL_* value tracing cannot use stops the
// role with exit code 2 and a message naming the variable, before anything
// is opened or written. Not parallel: it sets the environment.
func TestTracingConfigErrors(t *testing.T) {
	for _, tc := range []struct {
		env  map[string]string
		want string
	}{
		{map[string]string{"OTEL_TRACES_EXPORTER": "zipkin"}, "OTEL_TRACES_EXPORTER"},
		{map[string]string{"OTEL_TRACES_EXPORTER": "otlp", "OTEL_EXPORTER_OTLP_PROTOCOL": "http/json"}, "OTEL_EXPORTER_OTLP_PROTOCOL"},
		{map[string]string{"OTEL_EXPORTER_OTLP_ENDPOINT": "http://127.0.0.1:1", "OTEL_TRACES_SAMPLER": "sometimes"}, "OTEL_TRACES_SAMPLER"},
		{map[string]string{"OTEL_TRACES_EXPORTER": "console", "OTEL_TRACES_SAMPLER": "traceidratio", "OTEL_TRACES_SAMPLER_ARG": "2"}, "OTEL_TRACES_SAMPLER_ARG"},
	} {
		t.Run(tc.want, func(t *testing.T) {
			path := filepath.Join(t.TempDir(), "outboxd.db")
			code, out := runCLI(t, tc.env, "ingest", "--store", "sqlite:"+path, "--http-addr", "127.0.0.1:0")
			require.Equal(t, ExitUsage, code, out)
			require.Contains(t, out, tc.want+"=")
			_, err := os.Stat(path)
			require.ErrorIs(t, err, os.ErrNotExist, "nothing written")
		})
	}
}

// collector is a tiny OTLP/HTTP receiver: it decodes each export request
// (protobuf) and keeps its spans.
type collector struct {
	mu       sync.Mutex
	spans    tracetest.SpanStubs
	resource map[string]string
}

func (c *collector) ServeHTTP(w http.ResponseWriter, r *http.Request) {
	body, err := io.ReadAll(r.Body)
	if r.URL.Path != "/v1/traces" || err != nil {
		http.Error(w, "not an OTLP traces export", http.StatusBadRequest)
		return
	}
	var req coltracepb.ExportTraceServiceRequest
	if err := proto.Unmarshal(body, &req); err != nil {
		http.Error(w, err.Error(), http.StatusBadRequest)
		return
	}
	c.mu.Lock()
	for _, rs := range req.GetResourceSpans() {
		c.resource = map[string]string{}
		for _, kv := range rs.GetResource().GetAttributes() {
			c.resource[kv.GetKey()] = kv.GetValue().GetStringValue()
		}
		for _, ss := range rs.GetScopeSpans() {
			for _, s := range ss.GetSpans() {
				c.spans = append(c.spans, stub(s))
			}
		}
	}
	c.mu.Unlock()
	out, _ := proto.Marshal(&coltracepb.ExportTraceServiceResponse{})
	w.Header().Set("Content-Type", "application/x-protobuf")
	_, _ = w.Write(out)
}

// trace returns the spans received of trace id.
func (c *collector) trace(id trace.TraceID) tracetest.SpanStubs {
	c.mu.Lock()
	defer c.mu.Unlock()
	var out tracetest.SpanStubs
	for _, s := range c.spans {
		if s.SpanContext.TraceID() == id {
			out = append(out, s)
		}
	}
	return out
}

// stub converts an OTLP span to the SDK's stub, as testkit.SpanTree prints.
func stub(s *tracepb.Span) tracetest.SpanStub {
	var tid trace.TraceID
	var sid, pid trace.SpanID
	copy(tid[:], s.GetTraceId())
	copy(sid[:], s.GetSpanId())
	copy(pid[:], s.GetParentSpanId())
	attrs := make([]attribute.KeyValue, 0, len(s.GetAttributes()))
	for _, kv := range s.GetAttributes() {
		attrs = append(attrs, attribute.String(kv.GetKey(), anyValue(kv.GetValue())))
	}
	st := tracetest.SpanStub{
		Name:        s.GetName(),
		SpanContext: trace.NewSpanContext(trace.SpanContextConfig{TraceID: tid, SpanID: sid, TraceFlags: trace.FlagsSampled}),
		Parent:      trace.NewSpanContext(trace.SpanContextConfig{TraceID: tid, SpanID: pid}),
		SpanKind:    trace.SpanKind(s.GetKind()),
		StartTime:   time.Unix(0, int64(s.GetStartTimeUnixNano())),
		EndTime:     time.Unix(0, int64(s.GetEndTimeUnixNano())),
		Attributes:  attrs,
	}
	if s.GetStatus().GetCode() == tracepb.Status_STATUS_CODE_ERROR {
		st.Status.Code, st.Status.Description = codes.Error, s.GetStatus().GetMessage()
	}
	return st
}

func anyValue(v *commonpb.AnyValue) string {
	switch x := v.GetValue().(type) {
	case *commonpb.AnyValue_StringValue:
		return x.StringValue
	case *commonpb.AnyValue_IntValue:
		return fmt.Sprint(x.IntValue)
	case *commonpb.AnyValue_BoolValue:
		return fmt.Sprint(x.BoolValue)
	case *commonpb.AnyValue_DoubleValue:
		return fmt.Sprint(x.DoubleValue)
	}
	return v.String()
}

// TestTraceExportedToCollector is the demonstration of tracing: `outboxd
// dev`, configured only by OTEL_* variables, exports over OTLP/HTTP to a
// local receiver the trace of one event, from the client's traced request
// through the relay and the projection to the read model; the test prints
// its span tree. Not parallel: it sets the environment (and runs before the
// package's parallel tests, so their dev processes do not trace).
func TestTraceExportedToCollector(t *testing.T) {
	col := &collector{}
	srv := httptest.NewServer(col)
	defer srv.Close()
	t.Setenv("OTEL_EXPORTER_OTLP_ENDPOINT", srv.URL)
	t.Setenv("OTEL_SERVICE_NAME", "outboxd-demo")
	t.Setenv("OTEL_BSP_SCHEDULE_DELAY", "50")

	b := startDev(t, "")
	raw := make([]byte, 24)
	_, _ = rand.Read(raw)
	traceID, clientSpan := hex.EncodeToString(raw[:16]), hex.EncodeToString(raw[16:])
	req, err := http.NewRequest(http.MethodPost, b.base+"/v1/events", strings.NewReader(
		`{"sourceKey":"plant-a","deviceKey":"sensor-7","occurredAt":"2026-11-29T09:00:00Z","payload":{"t":21.5}}`))
	require.NoError(t, err)
	req.Header.Set("Content-Type", "application/json")
	req.Header.Set("Idempotency-Key", "order-1")
	req.Header.Set("traceparent", "00-"+traceID+"-"+clientSpan+"-01")
	resp, err := http.DefaultClient.Do(req)
	require.NoError(t, err)
	require.Equal(t, http.StatusCreated, resp.StatusCode)
	resp.Body.Close()

	tid, err := trace.TraceIDFromHex(traceID)
	require.NoError(t, err)
	find := func(spans tracetest.SpanStubs, prefix string) (tracetest.SpanStub, bool) {
		for _, s := range spans {
			if strings.HasPrefix(s.Name, prefix) {
				return s, true
			}
		}
		return tracetest.SpanStub{}, false
	}
	require.Eventually(t, func() bool {
		_, ok := find(col.trace(tid), "store.MarkSynced")
		return ok
	}, 30*time.Second, 20*time.Millisecond, "the projection's spans reach the collector")
	b.stop(t) // flushes what is left
	spans := col.trace(tid)
	t.Logf("the trace of one event, as the collector received it (service %s, role %s):\n%s",
		col.resource["service.name"], col.resource["outboxd.role"], testkit.SpanTree(spans))

	require.Equal(t, "outboxd-demo", col.resource["service.name"])
	require.Equal(t, "dev", col.resource["outboxd.role"])
	server, ok := find(spans, "POST /v1/events")
	require.True(t, ok)
	require.Equal(t, clientSpan, server.Parent.SpanID().String(), "ingest continues the client's trace")
	relay, ok := find(spans, "relay "+b.stream)
	require.True(t, ok)
	require.Equal(t, server.SpanContext.SpanID(), relay.Parent.SpanID())
	project, ok := find(spans, "project "+b.stream)
	require.True(t, ok)
	require.Equal(t, relay.SpanContext.SpanID(), project.Parent.SpanID())
	synced, _ := find(spans, "store.MarkSynced")
	require.Equal(t, project.SpanContext.SpanID(), synced.Parent.SpanID())
	for _, s := range spans {
		require.NotEqual(t, codes.Error, s.Status.Code, s.Name)
		for _, kv := range s.Attributes {
			require.NotContains(t, kv.Value.String(), "21.5", "no payload in %s", s.Name)
		}
	}

	st := b.openStore(t)
	rdb, _ := testkit.NewRedis(t)
	v, err := testkit.Check(t.Context(), st, b.pg.Pool, rdb, b.stream, b.group, []string{"order-1"})
	require.NoError(t, err)
	require.True(t, v.OK(), v.String())
}
