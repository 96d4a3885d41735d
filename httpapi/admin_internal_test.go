package httpapi

import (
	"errors"
	"net/http"
	"net/http/httptest"
	"testing"
	"testing/iotest"

	"github.com/stretchr/testify/require"
)

// TestAdminDecodeBusy: an admin request whose body the server had no place
// to read is a 503 with Retry-After (ProblemBusy, which the CLI retries),
// not a malformed request (400, which the CLI takes for a usage error).
func TestAdminDecodeBusy(t *testing.T) {
	t.Parallel()
	h := &handler{retryAfter: "5"}
	r := httptest.NewRequest(http.MethodPost, "/v1/admin/dlq/replay", iotest.ErrReader(errTooManyBodies))
	r.Header.Set("Content-Type", "application/json")
	w := httptest.NewRecorder()
	var v struct{}
	err := h.adminDecode(w, r, &v)
	var pe *problemError
	require.True(t, errors.As(err, &pe), "got %v", err)
	require.Equal(t, http.StatusServiceUnavailable, pe.p.Status)
	require.Equal(t, ProblemBusy, pe.p.Type)
	require.Equal(t, "5", w.Header().Get("Retry-After"))
}
