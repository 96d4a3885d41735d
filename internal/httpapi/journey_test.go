package httpapi_test

import (
	"net/http"
	"net/http/httptest"
	"net/url"
	"strings"
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/outboxd/outboxd/internal/httpapi"
	"github.com/outboxd/outboxd/internal/operator"
	"github.com/outboxd/outboxd/internal/testkit"
	"github.com/outboxd/outboxd/outbox"
)

// journey asks for the journey of ref and requires a 200.
func (b *adminBundle) journey(t *testing.T, ref string) operator.Journey {
	t.Helper()
	var j operator.Journey
	code, body := b.call(t, http.MethodGet, "/v1/admin/events/"+url.PathEscape(ref)+"/journey", nil, &j)
	require.Equal(t, http.StatusOK, code, string(body))
	return j
}

// TestAdminJourneyErrors: an unknown reference is 404, one that cannot be
// an id or a key 422, and an instance without Redis or PostgreSQL 501
// (which references the operator takes: TestJourneyRefs in
// internal/operator).
func TestAdminJourneyErrors(t *testing.T) {
	t.Parallel()
	b := setupAdmin(t, testkit.NewStore(t))
	hb := &handlerBundle{server: b.server}
	auth := []string{"Authorization", "Bearer " + testToken}
	hb.do(t, http.MethodGet, "/v1/admin/events/nobody/journey", "", auth...).problem(t, http.StatusNotFound)
	// Longer than any stored key: a named client's longest (outbox.ClientKey).
	longest := len(outbox.ClientKeyPrefix) + outbox.MaxClientNameLength + 1 + outbox.MaxKeyLength
	p := hb.do(t, http.MethodGet, "/v1/admin/events/"+strings.Repeat("k", longest+1)+"/journey", "", auth...).problem(t, http.StatusUnprocessableEntity)
	require.Equal(t, []string{"ref"}, fields(p))
	hb.do(t, http.MethodGet, "/v1/admin/events/nobody/journey", "").problem(t, http.StatusUnauthorized)

	st := testkit.NewStore(t)
	admin, err := operator.New(&operator.Config{Store: st, Role: "ingest"}, nil)
	require.NoError(t, err)
	h, err := httpapi.New(&httpapi.Config{Admin: admin}, nil)
	require.NoError(t, err)
	srv := httptest.NewServer(h)
	defer srv.Close()
	p = (&handlerBundle{server: srv}).do(t, http.MethodGet, "/v1/admin/events/k/journey", "").problem(t, http.StatusNotImplemented)
	require.Contains(t, p.Detail, "ingest")
}
