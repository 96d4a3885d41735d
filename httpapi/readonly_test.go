package httpapi_test

import (
	"net/http"
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/outboxd/outboxd/httpapi"
	"github.com/outboxd/outboxd/internal/testkit"
)

// TestAdminReadOnly: a read-only instance refuses every admin action that
// changes something with 403 before doing anything, and still answers the
// listings, the dry runs and verify without repair.
func TestAdminReadOnly(t *testing.T) {
	t.Parallel()
	b := setupAdmin(t, testkit.NewStore(t), func(c *httpapi.Config) { c.ReadOnly = true })
	hb := &handlerBundle{server: b.server}
	auth := []string{"Authorization", "Bearer " + testToken}
	window := `"from":"2026-10-01T00:00:00Z","to":"2026-10-02T00:00:00Z"`
	for _, tc := range []struct{ name, path, body string }{
		{"DLQReplay", "/v1/admin/dlq:replay", `{"ids":["1-0"]}`},
		{"DLQReplayAll", "/v1/admin/dlq:replay", `{"all":true}`},
		{"DLQDrop", "/v1/admin/dlq:drop", `{"all":true}`},
		{"Replay", "/v1/admin/replay", `{` + window + `}`},
		{"Rebuild", "/v1/admin/replay", `{` + window + `,"rebuild":true}`},
		{"Repair", "/v1/admin/verify", `{"repair":true}`},
	} {
		t.Run(tc.name, func(t *testing.T) {
			p := hb.do(t, http.MethodPost, tc.path, tc.body, auth...).problem(t, http.StatusForbidden)
			require.Equal(t, httpapi.ProblemReadOnly, p.Type)
			require.Contains(t, p.Detail, "read-only")
		})
	}
	for _, tc := range []struct{ name, method, path, body string }{
		{"DLQList", http.MethodGet, "/v1/admin/dlq", ""},
		{"Events", http.MethodGet, "/v1/admin/events", ""},
		{"DryRun", http.MethodPost, "/v1/admin/replay", `{` + window + `,"dryRun":true}`},
		{"Verify", http.MethodPost, "/v1/admin/verify", `{}`},
	} {
		t.Run(tc.name, func(t *testing.T) {
			r := hb.do(t, tc.method, tc.path, tc.body, auth...)
			require.Equal(t, http.StatusOK, r.status, string(r.body))
		})
	}
	t.Run("MalformedIsStillMalformed", func(t *testing.T) {
		hb.do(t, http.MethodPost, "/v1/admin/dlq:drop", `{"all":`, auth...).problem(t, http.StatusBadRequest)
	})
}

