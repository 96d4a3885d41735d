package httpapi

import (
	"errors"
	"net/http"
	"net/http/httptest"
	"strings"
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

// TestAdminDecodeStrict: the admin API's JSON is as strict as ingest's: a
// member named twice, at any depth, or in other case than its field is
// refused (400), as a body encoding/json would read loosely.
func TestAdminDecodeStrict(t *testing.T) {
	t.Parallel()
	h := &handler{retryAfter: "5"}
	type req struct {
		DryRun bool           `json:"dryRun"`
		Code   string         `json:"code"`
		Filter map[string]any `json:"filter"`
	}
	for body, want := range map[string]string{
		`{"dryRun":true,"code":"x"}`:                  "",
		`{"dryRun":true,"filter":{"a":{"b":1}}}`:      "",
		`{"dryRun":false,"dryRun":true}`:              "appears more than once",
		`{"filter":{"a":1,"a":2}}`:                    "appears more than once",
		`{"DRYRUN":true}`:                             "case-sensitive",
		`{"code":"x","filter":{"l":[{"k":1,"k":1}]}}`: "appears more than once",
	} {
		r := httptest.NewRequest(http.MethodPost, "/v1/admin/replay", strings.NewReader(body))
		r.Header.Set("Content-Type", "application/json")
		var v req
		err := h.adminDecode(httptest.NewRecorder(), r, &v)
		if want == "" {
			require.NoError(t, err, body)
			continue
		}
		var pe *problemError
		require.True(t, errors.As(err, &pe), "%s: got %v", body, err)
		require.Equal(t, http.StatusBadRequest, pe.p.Status, body)
		require.Contains(t, pe.p.Detail, want, body)
	}
}
