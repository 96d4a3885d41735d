package httpapi_test

import (
	"net/http"
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/outboxd/outboxd/internal/httpapi"
	ostatus "github.com/outboxd/outboxd/internal/status"
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
		{"RetriesResume", "/v1/admin/retries:resume", `{"class":"record"}`},
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

// TestConsoleRoutes: the console is mounted at /ui/ without the bearer
// token (its pages hold no data), says when the instance is read-only, and
// answers other methods with 405.
func TestConsoleRoutes(t *testing.T) {
	t.Parallel()
	st := testkit.NewStore(t)
	hb := setupHandlerOn(t, st, &httpapi.Config{AuthToken: testToken, Console: true, ReadOnly: true,
		Status: &ostatus.Status{Store: st, Stream: "s"}})
	client := *hb.server.Client()
	client.CheckRedirect = func(*http.Request, []*http.Request) error { return http.ErrUseLastResponse }
	res, err := client.Get(hb.server.URL + "/ui")
	require.NoError(t, err)
	res.Body.Close()
	require.Equal(t, http.StatusMovedPermanently, res.StatusCode)
	require.Equal(t, "/ui/", res.Header.Get("Location"))

	r := hb.do(t, http.MethodGet, "/ui/", "")
	require.Equal(t, http.StatusOK, r.status, "no token needed for a page")
	require.Contains(t, string(r.body), `data-auth-required="true"`)
	require.Contains(t, string(r.body), `data-read-only="true"`)
	r = hb.do(t, http.MethodGet, "/ui/dlq", "")
	require.Equal(t, http.StatusOK, r.status)
	require.NotContains(t, string(r.body), "data-action")
	hb.do(t, http.MethodPost, "/ui/dlq", "{}").problem(t, http.StatusMethodNotAllowed)
	hb.do(t, http.MethodGet, "/v1/status", "").problem(t, http.StatusUnauthorized)
	hb.do(t, http.MethodGet, "/v1/status/history", "", "Authorization", "Bearer "+testToken).problem(t, http.StatusNotFound)
}
