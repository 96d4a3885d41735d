package httpapi_test

import (
	"net/http"
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/outboxd/outboxd/internal/httpapi"
)

// TestOwnRoutesRefused: a pattern of a program's own route
// (runner.WithRoute) that ServeMux refuses (one of outboxd's own, a
// malformed one) or a route without a handler is an error of New, not a
// panic at start.
func TestOwnRoutesRefused(t *testing.T) {
	t.Parallel()
	own := http.HandlerFunc(func(w http.ResponseWriter, _ *http.Request) { w.WriteHeader(http.StatusTeapot) })
	_, err := httpapi.New(&httpapi.Config{Routes: []httpapi.Route{{Pattern: "POST /orders", Handler: own}}}, nil)
	require.NoError(t, err)
	for _, pattern := range []string{"GET /healthz", "GET /v1/{bad"} {
		_, err := httpapi.New(&httpapi.Config{Routes: []httpapi.Route{{Pattern: pattern, Handler: own}}}, nil)
		require.ErrorContains(t, err, pattern)
	}
	_, err = httpapi.New(&httpapi.Config{Routes: []httpapi.Route{{Pattern: "POST /x"}}}, nil)
	require.ErrorContains(t, err, "no handler")
}
