package runner

import (
	"context"
	"net/http"
	"net/http/httptest"
	"sync/atomic"
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/outboxd/outboxd/internal/httpapi"
)

// TestClientRetriesBusy: an operator command whose request found the
// server busy reading bodies (503, httpapi.ProblemBusy: nothing done) is
// sent again after Retry-After, and succeeds; another 503 is not retried.
func TestClientRetriesBusy(t *testing.T) {
	t.Parallel()
	var calls atomic.Int32
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		switch calls.Add(1) {
		case 1:
			w.Header().Set("Retry-After", "0")
			w.Header().Set("Content-Type", httpapi.ProblemContentType)
			w.WriteHeader(http.StatusServiceUnavailable)
			_, _ = w.Write([]byte(`{"type":"` + httpapi.ProblemBusy + `","title":"Service Unavailable","status":503}`))
		default:
			_, _ = w.Write([]byte(`{"ok":true}`))
		}
	}))
	t.Cleanup(srv.Close)
	c := &client{base: srv.URL, http: srv.Client()}
	var out struct{ OK bool }
	require.NoError(t, c.do(context.Background(), http.MethodPost, "/v1/admin/retries/resume", map[string]string{}, &out, nil))
	require.True(t, out.OK)
	require.Equal(t, int32(2), calls.Load())

	other := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		calls.Add(1)
		w.WriteHeader(http.StatusServiceUnavailable)
	}))
	t.Cleanup(other.Close)
	calls.Store(0)
	c = &client{base: other.URL, http: other.Client()}
	require.Error(t, c.do(context.Background(), http.MethodPost, "/v1/admin/retries/resume", map[string]string{}, nil, nil))
	require.Equal(t, int32(1), calls.Load(), "a 503 that may have done something is not sent again")
}
