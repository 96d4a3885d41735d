package worker_test

import (
	"context"
	"encoding/json"
	"net/http"
	"net/http/httptest"
	"strings"
	"testing"
	"time"

	"github.com/jackc/pgx/v5/pgxpool"
	"github.com/stretchr/testify/require"
	"go.opentelemetry.io/otel/codes"
	"go.opentelemetry.io/otel/sdk/trace/tracetest"
	"go.opentelemetry.io/otel/trace"

	"github.com/outboxd/outboxd/dispatcher"
	"github.com/outboxd/outboxd/internal/clock"
	"github.com/outboxd/outboxd/internal/fault"
	"github.com/outboxd/outboxd/internal/httpapi"
	"github.com/outboxd/outboxd/internal/storetrace"
	"github.com/outboxd/outboxd/internal/testkit"
	"github.com/outboxd/outboxd/internal/tracing"
	"github.com/outboxd/outboxd/internal/tracing/instrument"
	"github.com/outboxd/outboxd/outbox"
	"github.com/outboxd/outboxd/reconciler"
	"github.com/outboxd/outboxd/store"
	"github.com/outboxd/outboxd/worker"
)

// traces turns tracing on for every test of this package: the
// traced tests below record their own traces; the other tests trace
// nothing (their writes carry no sampled context) and run as before.
var traces = testkit.UseTracing()

// payloadMark is in every traced test's payload; no span may carry it.
const payloadMark = "payload-never-in-a-span"

// traceBundle is a pipeline whose store, PostgreSQL pool and HTTP API are
// instrumented as `outboxd` instruments them when tracing is on.
type traceBundle struct {
	*testBundle
	pool *pgxpool.Pool // the read model, its statements traced
}

func setupTrace(t *testing.T, st store.Store) *traceBundle {
	t.Helper()
	rdb, prefix := testkit.NewRedis(t)
	b := &traceBundle{testBundle: setupOn(t, storetrace.Wrap(st), rdb, prefix)}
	b.writer = outbox.NewWriter(b.st, &outbox.WriterConfig{Stream: b.stream})
	b.pool = b.pg.PoolWith(t, func(cfg *pgxpool.Config) {
		instrument.Postgres(cfg)
		require.NotNil(t, cfg.ConnConfig.Tracer, "tracing is on")
	})
	return b
}

// startDispatcher relays the bundle's outbox until the test ends.
func (b *traceBundle) startDispatcher(t *testing.T) {
	t.Helper()
	d, err := dispatcher.New(b.st, b.rdb, &dispatcher.Config{Stream: b.stream, PollInterval: 10 * time.Millisecond,
		IdleCheckpoint: 50 * time.Millisecond, Owner: testkit.Name("relay")}, testkit.Logger(t))
	require.NoError(t, err)
	require.NoError(t, d.Start(context.Background()))
	t.Cleanup(func() { require.NoError(t, d.Stop(context.Background())) })
}

// ingest posts one event through the instrumented HTTP API with the
// client's traceparent and returns its id.
func (b *traceBundle) ingest(t *testing.T, traceParent, device string) string {
	t.Helper()
	h, err := httpapi.New(&httpapi.Config{Writer: b.writer}, nil)
	require.NoError(t, err)
	rec := httptest.NewRecorder()
	req := httptest.NewRequest(http.MethodPost, "/v1/events", strings.NewReader(
		`{"sourceKey":"src","deviceKey":"`+device+`","occurredAt":"2026-11-01T10:00:00Z","payload":{"note":"`+payloadMark+`"}}`))
	req.Header.Set("Content-Type", "application/json")
	req.Header.Set("traceparent", traceParent)
	instrument.HTTP(h).ServeHTTP(rec, req)
	require.Equal(t, http.StatusCreated, rec.Code, rec.Body.String())
	var res outbox.Result
	require.NoError(t, json.Unmarshal(rec.Body.Bytes(), &res))
	b.events = append(b.events, b.event(t, res.ID))
	return res.ID
}

// only returns the one span of spans.
func only(t *testing.T, spans tracetest.SpanStubs, what string) tracetest.SpanStub {
	t.Helper()
	require.Len(t, spans, 1, what)
	return spans[0]
}

// requireChild requires child to be a span of parent's trace whose parent
// is parent.
func requireChild(t *testing.T, parent, child tracetest.SpanStub, all tracetest.SpanStubs) {
	t.Helper()
	require.Equal(t, parent.SpanContext.TraceID(), child.SpanContext.TraceID(), "%s in the trace of %s", child.Name, parent.Name)
	require.Equal(t, parent.SpanContext.SpanID(), child.Parent.SpanID(), "%s is a child of %s:\n%s", child.Name, parent.Name, testkit.SpanTree(all))
}

// children returns the spans of all whose parent is parent.
func children(parent tracetest.SpanStub, all tracetest.SpanStubs) []string {
	var names []string
	for _, s := range all {
		if s.Parent.SpanID() == parent.SpanContext.SpanID() {
			names = append(names, s.Name)
		}
	}
	return names
}

// requireNoPayload requires that no span of all carries the payload.
func requireNoPayload(t *testing.T, all tracetest.SpanStubs) {
	t.Helper()
	for _, s := range all {
		for _, kv := range s.Attributes {
			require.NotContains(t, kv.Value.String(), payloadMark, "span %s attribute %s", s.Name, kv.Key)
		}
		for _, ev := range s.Events {
			for _, kv := range ev.Attributes {
				require.NotContains(t, kv.Value.String(), payloadMark, "span %s event %s", s.Name, ev.Name)
			}
		}
	}
}

// TestTraceFollowsOneEvent: a client's traced request ingests one event
// (the W3C traceparent header); the trace goes on through the outbox entry
// (the relay span, a child of the ingest request's span), the stream
// message (the projection span, a child of the relay span) and ends with
// the read model, with a span for each store call and each PostgreSQL
// statement on the way, ids only. On both stores: the SQLite column and the
// MongoDB field carry the context.
func TestTraceFollowsOneEvent(t *testing.T) {
	t.Parallel()
	for _, kind := range []string{"SQLite", "Mongo"} {
		t.Run(kind, func(t *testing.T) {
			t.Parallel()
			var st store.Store = testkit.NewSQLite(t)
			if kind == "Mongo" {
				st = testkit.NewMongo(t, nil)
			}
			b := setupTrace(t, st)
			b.startDispatcher(t)
			b.startOn(t, b.pool, b.config(testkit.Name("w")))
			_, clientTP := traces.StartTrace(t)

			id := b.ingest(t, clientTP, "d1")
			stored := b.event(t, id).TraceParent
			require.Equal(t, sc(clientTP).TraceID(), sc(stored).TraceID(), "the original keeps its ingest request's context")
			project := only(t, traces.WaitSpan(t, clientTP, 1, testkit.Named("project", id)), "one projection")
			b.waitConverged(t)
			all := traces.Spans(clientTP)
			t.Logf("the trace of event %s:\n%s", id, testkit.SpanTree(all))

			server := only(t, traces.WaitSpan(t, clientTP, 1, testkit.Named("POST /v1/events", "")), "the ingest request")
			require.Equal(t, sc(clientTP).SpanID(), server.Parent.SpanID(), "ingest continues the client's trace")
			require.Equal(t, server.SpanContext.SpanID(), sc(stored).SpanID(), "the stored context is the ingest request's span")
			require.Equal(t, trace.SpanKindServer, server.SpanKind)
			relay := only(t, traces.WaitSpan(t, clientTP, 1, testkit.Named("relay", id)), "one relay")
			requireChild(t, server, relay, all)
			require.Equal(t, trace.SpanKindProducer, relay.SpanKind)
			require.Equal(t, b.stream, testkit.SpanAttr(relay, "messaging.destination.name"))
			requireChild(t, relay, project, all)
			require.Equal(t, trace.SpanKindConsumer, project.SpanKind)
			require.Equal(t, string(outbox.OriginOutbox), testkit.SpanAttr(project, "outboxd.origin"))
			require.Equal(t, b.group, testkit.SpanAttr(project, "messaging.consumer.group.name"))

			// The store's and PostgreSQL's calls, each under the hop that made it.
			write := only(t, traces.WaitSpan(t, clientTP, 1, testkit.Named("store.WriteTx", "")), "one ingest transaction")
			requireChild(t, server, write, all)
			require.Equal(t, st.Kind(), testkit.SpanAttr(write, "db.system.name"))
			require.Subset(t, children(write, all), []string{"store.LookupKeys", "store.InsertEvents", "store.InsertEntries"})
			require.Subset(t, children(relay, all), []string{"store.MarkRelayed"})
			// The projection transaction is one pipeline (worker.PipelinedProjector):
			// one span, its statements as events.
			require.Subset(t, children(project, all), []string{"store.LoadEvents", "BATCH", "store.MarkSynced"})
			for _, s := range all {
				if s.Parent.SpanID() == project.SpanContext.SpanID() && s.Name == "BATCH" {
					require.Equal(t, "postgresql", testkit.SpanAttr(s, "db.system.name"))
					require.Equal(t, b.pg.Name, testkit.SpanAttr(s, "db.namespace"))
					require.Equal(t, "5", testkit.SpanAttr(s, "db.operation.batch.size"))
					var ops []string
					for _, ev := range s.Events {
						ops = append(ops, ev.Name)
					}
					require.Equal(t, []string{"BEGIN", "SET", "SET", "WITH", "COMMIT"}, ops)
				}
			}
			requireNoPayload(t, all)
			for _, s := range all {
				require.NotEqual(t, codes.Error, s.Status.Code, "%s failed: %s", s.Name, s.Status.Description)
			}
		})
	}
}

// sc parses a traceparent.
func sc(traceParent string) trace.SpanContext { return tracing.SpanContext(traceParent) }

// TestTraceAcrossWorkerCrashAndReclaim: a worker crashes after the
// PostgreSQL commit of a traced event (a fault point), before syncedAt and
// the XACK; another worker takes the entry over (XAUTOCLAIM) and projects it
// again. Both projections are spans of the event's one trace, children of
// its relay: the crashed one failed, the reclaiming one succeeded and set
// syncedAt. The read model holds the event once (checker).
func TestTraceAcrossWorkerCrashAndReclaim(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	b := setupTrace(t, testkit.NewSQLite(t))
	b.startDispatcher(t)
	clientCtx, clientTP := traces.StartTrace(t)
	res, err := b.writer.Write(clientCtx, []outbox.Input{{SourceKey: "src", DeviceKey: "crash",
		OccurredAt: "2026-11-01T10:00:00Z", Payload: json.RawMessage(`{"note":"` + payloadMark + `"}`)}})
	require.NoError(t, err)
	id := res[0].ID
	b.events = append(b.events, b.event(t, id))
	relay := only(t, traces.WaitSpan(t, clientTP, 1, testkit.Named("relay", id)), "one relay")

	faults := &fault.Set{}
	faults.Arm(worker.FaultAfterCommit, 1)
	crashing := b.config(testkit.Name("crashing"))
	worker.SetFaults(crashing, faults)
	w, err := worker.New(b.st, b.rdb, b.pool, crashing, nil)
	require.NoError(t, err)
	require.NoError(t, w.Start(ctx))
	select {
	case <-w.Stopped():
	case <-time.After(waitFor):
		t.Fatal("the fault point did not stop the worker")
	}
	require.ErrorIs(t, w.Err(), fault.ErrInjected)
	require.NoError(t, w.Stop(ctx))
	require.Equal(t, int64(1), b.pending(t), "the entry is still pending")
	require.Equal(t, int64(1), b.unsynced(t), "crashed before syncedAt")

	rescuer := b.config(testkit.Name("rescuer"))
	rescuer.ClaimIdle = 100 * time.Millisecond
	b.startOn(t, b.pool, rescuer)
	projections := traces.WaitSpan(t, clientTP, 2, testkit.Named("project", id))
	b.waitConverged(t)
	all := traces.Spans(clientTP)
	t.Logf("the trace of event %s:\n%s", id, testkit.SpanTree(all))

	require.Len(t, projections, 2, "the crashed projection and the reclaiming one")
	byConsumer := map[string]tracetest.SpanStub{}
	for _, p := range projections {
		requireChild(t, relay, p, all)
		byConsumer[testkit.SpanAttr(p, "messaging.client.id")] = p
	}
	require.Equal(t, codes.Error, byConsumer[crashing.Consumer].Status.Code, "the crashed worker's span failed")
	require.Contains(t, byConsumer[crashing.Consumer].Status.Description, "fault")
	require.Contains(t, children(byConsumer[crashing.Consumer], all), "COMMIT", "it had committed")
	require.NotContains(t, children(byConsumer[crashing.Consumer], all), "store.MarkSynced")
	reclaimed := byConsumer[rescuer.Consumer]
	require.Equal(t, codes.Unset, reclaimed.Status.Code, "the reclaiming worker's span succeeded")
	require.Contains(t, children(reclaimed, all), "store.MarkSynced")
	requireNoPayload(t, all)
}

// TestTraceMessageWithoutContext: an event written without a trace context
// (an untraced request, or a message of an earlier version) is relayed
// with its message unchanged (no traceparent) and projected as before; it
// makes no span.
func TestTraceMessageWithoutContext(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	b := setupTrace(t, testkit.NewSQLite(t))
	b.startDispatcher(t)
	b.startOn(t, b.pool, b.config(testkit.Name("w")))
	events := b.write(t, "untraced", 3)
	for _, ev := range events {
		require.Empty(t, ev.TraceParent)
	}
	b.waitConverged(t)

	msgs, err := b.rdb.XRange(ctx, b.stream, "-", "+").Result()
	require.NoError(t, err)
	require.Len(t, msgs, 3)
	for _, m := range msgs {
		payload, _ := m.Values[outbox.PayloadField].(string)
		require.NotContains(t, payload, "traceparent", "relayed as it was stored")
		var fields map[string]any
		require.NoError(t, json.Unmarshal([]byte(payload), &fields))
	}
	for _, s := range traces.All() {
		for _, ev := range events {
			require.NotEqual(t, ev.ID, testkit.SpanAttr(s, "outboxd.event.id"), "no span for an untraced event: %s", s.Name)
		}
	}
}

// TestTraceReconcilerPublishLinksToIngest: a traced event whose stream
// entry was lost (here: never relayed) is re-published by the reconciler.
// Its publish is a trace of its own, linked to the event's ingest trace;
// the worker's projection continues the publish and links to the ingest
// trace too.
func TestTraceReconcilerPublishLinksToIngest(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	b := setupTrace(t, testkit.NewSQLite(t))
	clk := clock.NewFake(time.Now().Add(time.Hour))
	clientCtx, clientTP := traces.StartTrace(t)
	res, err := b.writer.Write(clientCtx, []outbox.Input{{SourceKey: "src", DeviceKey: "lost", OccurredAt: "2026-11-01T10:00:00Z"}})
	require.NoError(t, err)
	id := res[0].ID
	ev := b.event(t, id)
	b.events = append(b.events, ev)
	ingestTP := ev.TraceParent
	require.Equal(t, sc(clientTP).TraceID(), sc(ingestTP).TraceID())

	b.startOn(t, b.pool, b.config(testkit.Name("w")))
	r, err := reconciler.New(b.st, b.rdb, &reconciler.Config{Stream: b.stream, Now: clk.Now, MinAge: time.Minute}, testkit.Logger(t))
	require.NoError(t, err)
	rep, err := r.Sweep(ctx)
	require.NoError(t, err)
	require.Equal(t, 1, rep.Published)
	require.Eventually(t, func() bool { return b.unsynced(t) == 0 }, waitFor, 10*time.Millisecond)

	var publish, project tracetest.SpanStub
	require.Eventually(t, func() bool {
		for _, s := range traces.All() {
			if testkit.SpanAttr(s, "outboxd.event.id") != id || s.SpanContext.TraceID() == sc(clientTP).TraceID() {
				continue
			}
			switch {
			case strings.HasPrefix(s.Name, "publish"):
				publish = s
			case strings.HasPrefix(s.Name, "project"):
				project = s
			}
		}
		return publish.Name != "" && project.Name != ""
	}, waitFor, 10*time.Millisecond)
	t.Logf("the reconciler's trace:\n%s", testkit.SpanTree(traces.Trace(publish.SpanContext.TraceID())))

	require.Equal(t, string(outbox.OriginReconciler), testkit.SpanAttr(publish, "outboxd.origin"))
	require.False(t, publish.Parent.IsValid(), "the publish begins a trace of its own")
	require.Len(t, publish.Links, 1)
	require.Equal(t, sc(ingestTP).SpanID(), publish.Links[0].SpanContext.SpanID(), "linked to the ingest request")
	require.Equal(t, publish.SpanContext.SpanID(), project.Parent.SpanID(), "the projection continues the publish")
	require.Equal(t, publish.SpanContext.TraceID(), project.SpanContext.TraceID())
	linked := false
	for _, l := range project.Links {
		linked = linked || l.SpanContext.SpanID() == sc(ingestTP).SpanID()
	}
	require.True(t, linked, "the projection links to the ingest trace")
	b.waitConverged(t)
}
