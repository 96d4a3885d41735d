package httpapi_test

import (
	"net/http"
	"testing"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/stretchr/testify/require"

	"github.com/outboxd/outboxd/internal/httpapi"
	"github.com/outboxd/outboxd/internal/testkit"
)

// TestIngestCountsDuplicatesAndMismatches: every event answered is counted
// as created or duplicate, every request refused for a reused key with
// other content as a key mismatch, for single events and batches alike;
// the counts match what the store holds.
func TestIngestCountsDuplicatesAndMismatches(t *testing.T) {
	t.Parallel()
	reg := prometheus.NewRegistry()
	b := setupHandler(t, &httpapi.Config{Registerer: reg})
	metric := func(name string) float64 { return testkit.Metric(t, reg, name) }

	require.Equal(t, http.StatusCreated, b.do(t, http.MethodPost, "/v1/events", eventJSON("d1"), "Idempotency-Key", "k1").status)
	require.Equal(t, http.StatusOK, b.do(t, http.MethodPost, "/v1/events", eventJSON("d1"), "Idempotency-Key", "k1").status)
	require.Equal(t, http.StatusOK, b.do(t, http.MethodPost, "/v1/events", eventJSON("d1"), "Idempotency-Key", "k1").status)
	b.do(t, http.MethodPost, "/v1/events", eventJSON("other"), "Idempotency-Key", "k1").problem(t, http.StatusUnprocessableEntity)
	// A batch of two new originals (without a key, d1 derives its own,
	// not k1); then one whose two items share a key
	// with other contents (refused whole).
	r := b.do(t, http.MethodPost, "/v1/events:batch", `{"events":[`+eventJSON("d2")+`,`+eventJSON("d1")+`]}`)
	require.Equal(t, http.StatusOK, r.status, "%s", r.body)
	b.do(t, http.MethodPost, "/v1/events:batch", `{"events":[`+keyed(eventJSON("d3"), "k3")+`,`+keyed(eventJSON("d4"), "k3")+`]}`).
		problem(t, http.StatusUnprocessableEntity)

	b.requireStored(t, 3)
	require.Equal(t, 3.0, metric("outboxd_ingest_created_total"), "k1, the derived keys of d1 and d2")
	require.Equal(t, 2.0, metric("outboxd_ingest_duplicates_total"), "k1 twice")
	require.Equal(t, 2.0, metric("outboxd_ingest_key_mismatches_total"))

	// An item without a key derives one from its fields: d2 again is a
	// duplicate.
	r = b.do(t, http.MethodPost, "/v1/events", eventJSON("d2"))
	require.Equal(t, http.StatusOK, r.status)
	require.Equal(t, 3.0, metric("outboxd_ingest_duplicates_total"))
}

// keyed adds an idempotencyKey member to the event object js.
func keyed(js, key string) string { return `{"idempotencyKey":"` + key + `",` + js[1:] }
