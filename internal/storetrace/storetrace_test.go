package storetrace_test

import (
	"context"
	"testing"
	"time"

	"github.com/stretchr/testify/require"
	"go.opentelemetry.io/otel/trace"

	"github.com/outboxd/outboxd/internal/storetrace"
	"github.com/outboxd/outboxd/internal/testkit"
	"github.com/outboxd/outboxd/outbox"
	"github.com/outboxd/outboxd/store"
	"github.com/outboxd/outboxd/store/storetest"
)

var (
	_ store.Store         = (*storetrace.Store)(nil)
	_ outbox.PayloadSizer = (*storetrace.Store)(nil)
)

func TestMain(m *testing.M) { testkit.Main(m) }

var traces = testkit.UseTracing()

// TestConformance: the wrapped store keeps every meaning of the port.
func TestConformance(t *testing.T) {
	t.Parallel()
	storetest.Run(t, storetest.Harness{Open: func(t testing.TB, _ storetest.Options) store.Store {
		return storetrace.Wrap(testkit.NewSQLite(t))
	}})
}

// TestSpans: under a traced call each operation of an event's path is a
// client span with the database conventions and ids only; without one, no
// span.
func TestSpans(t *testing.T) {
	t.Parallel()
	for _, kind := range []string{"SQLite", "Mongo"} {
		t.Run(kind, func(t *testing.T) {
			t.Parallel()
			var inner store.Store = testkit.NewSQLite(t)
			if kind == "Mongo" {
				inner = testkit.NewMongo(t, nil)
			}
			st := storetrace.Wrap(inner)
			require.Same(t, inner, st.Unwrap())
			w := outbox.NewWriter(st, &outbox.WriterConfig{Stream: testkit.Name("s")})
			untraced, err := w.Write(context.Background(), []outbox.Input{{SourceKey: "s", DeviceKey: "untraced", OccurredAt: "2026-11-01T10:00:00Z"}})
			require.NoError(t, err)

			ctx, clientTP := traces.StartTrace(t)
			res, err := w.Write(ctx, []outbox.Input{{SourceKey: "s", DeviceKey: "d", OccurredAt: "2026-11-01T10:00:00Z"}})
			require.NoError(t, err)
			id := res[0].ID
			_, err = st.LoadEvents(ctx, []string{id, untraced[0].ID})
			require.NoError(t, err)
			_, err = st.MarkSynced(ctx, []string{id}, time.Now())
			require.NoError(t, err)
			claimed, err := st.Claim(ctx, []string{id}, time.Now(), time.Now())
			require.NoError(t, err)
			require.Empty(t, claimed.Events, "synced: no candidate")
			err = st.MarkDispatched(ctx, store.Lease{Name: "nobody's", Owner: "me", Term: 1}, []string{id}, time.Now())
			require.Error(t, err, "no such lease; the span records the outcome")

			spans := traces.Spans(clientTP)
			t.Logf("\n%s", testkit.SpanTree(spans))
			byName := map[string]int{}
			for _, s := range spans {
				byName[s.Name]++
				require.Equal(t, trace.SpanKindClient, s.SpanKind)
				require.Equal(t, inner.Kind(), testkit.SpanAttr(s, "db.system.name"), s.Name)
				require.NotEmpty(t, testkit.SpanAttr(s, "db.operation.name"), s.Name)
				require.NotEmpty(t, testkit.SpanAttr(s, "db.collection.name"), s.Name)
			}
			require.Equal(t, map[string]int{"store.WriteTx": 1, "store.LookupKeys": 1, "store.InsertEvents": 1, "store.InsertEntries": 1,
				"store.LoadEvents": 1, "store.MarkSynced": 1, "store.Claim": 1, "store.MarkDispatched": 1}, byName)
			for _, s := range spans {
				switch s.Name {
				case "store.LoadEvents":
					require.Equal(t, "2", testkit.SpanAttr(s, "db.operation.batch.size"))
				case "store.MarkSynced", "store.InsertEvents", "store.Claim":
					require.Equal(t, id, testkit.SpanAttr(s, "outboxd.event.id"))
				case "store.MarkDispatched":
					require.Equal(t, "Error", s.Status.Code.String())
				}
			}
			for _, s := range traces.All() {
				require.NotEqual(t, untraced[0].ID, testkit.SpanAttr(s, "outboxd.event.id"), "the untraced write made no span")
			}
		})
	}
}
