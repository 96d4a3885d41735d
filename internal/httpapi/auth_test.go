package httpapi_test

import (
	"context"
	"encoding/json"
	"fmt"
	"net/http"
	"strings"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/promhttp"
	"github.com/redis/go-redis/v9"
	"github.com/stretchr/testify/require"

	"github.com/outboxd/outboxd/internal/httpapi"
	ostatus "github.com/outboxd/outboxd/internal/status"
	"github.com/outboxd/outboxd/internal/stream"
	"github.com/outboxd/outboxd/internal/testkit"
	"github.com/outboxd/outboxd/outbox"
)

// The tokens of the scope tests, one per scope.
const (
	ingestToken   = "ingest-7f3a"
	viewerToken   = "viewer-91bc"
	operatorToken = "operator-2d4e"
)

// TestScopes is the route × token matrix: each route
// answers the tokens of its scope, 403 (naming the scope it needs) a known
// token outside it, and 401 a missing or unknown one; a refused request
// changes nothing.
func TestScopes(t *testing.T) {
	t.Parallel()
	b := setupAdmin(t, testkit.NewStore(t), func(c *httpapi.Config) {
		c.AuthToken, c.IngestToken, c.ViewerToken = operatorToken, ingestToken, viewerToken
		c.Writer = outbox.NewWriter(c.Store, &outbox.WriterConfig{Stream: c.Status.(*ostatus.Status).Stream})
		c.Metrics = promhttp.HandlerFor(prometheus.NewRegistry(), promhttp.HandlerOpts{})
		c.Profiles, c.Console = true, true
	})
	hb := &handlerBundle{st: b.st, server: b.server}
	ctx := context.Background()
	stored := b.write(t, "stored", time.Date(2026, 10, 1, 1, 0, 0, 0, time.UTC))[0]
	dlq := b.keys().DLQ()
	require.NoError(t, b.rdb.XAdd(ctx, &redis.XAddArgs{Stream: dlq, Values: stream.DeadLetter{Category: outbox.CategoryPoison,
		Code: "projection_failed", EventID: stored.ID, At: time.Now()}.Encode()}).Err())

	window := `"from":"2026-10-01T00:00:00Z","to":"2026-10-02T00:00:00Z"`
	type want struct{ ingest, viewer, operator int }
	var n int
	newEvent := func() string {
		n++
		return fmt.Sprintf(`{"sourceKey":"s","deviceKey":"d%d","occurredAt":"2026-10-01T02:00:00Z"}`, n)
	}
	routes := []struct {
		name, method, path string
		body               func() string
		want               want
		// need is the scope a 403 names (a request that changes something
		// may need the operator token, but the ingest token is refused
		// before the body is read: the route needs the viewer token).
		need string
		// unchanged, when set, checks that a refused request changed
		// nothing.
		unchanged func(t *testing.T)
	}{
		{"PostEvent", http.MethodPost, "/v1/events", newEvent, want{201, 403, 201}, "ingest", nil},
		{"PostBatch", http.MethodPost, "/v1/events:batch", func() string { return `{"events":[` + newEvent() + `]}` }, want{200, 403, 200}, "ingest", nil},
		// An ingest client reads no event, not even its own: ids of other
		// clients' events are not its to read.
		{"GetEvent", http.MethodGet, "/v1/events/" + stored.ID, nil, want{403, 200, 200}, "viewer", nil},
		{"Whoami", http.MethodGet, "/v1/whoami", nil, want{200, 200, 200}, "", nil},
		{"Status", http.MethodGet, "/v1/status", nil, want{403, 200, 200}, "viewer", nil},
		{"DLQList", http.MethodGet, "/v1/admin/dlq", nil, want{403, 200, 200}, "viewer", nil},
		{"Events", http.MethodGet, "/v1/admin/events", nil, want{403, 200, 200}, "viewer", nil},
		{"Journey", http.MethodGet, "/v1/admin/events/" + stored.ID + "/journey", nil, want{403, 200, 200}, "viewer", nil},
		{"DryRun", http.MethodPost, "/v1/admin/replay", func() string { return `{` + window + `,"dryRun":true}` }, want{403, 200, 200}, "viewer", nil},
		{"Verify", http.MethodPost, "/v1/admin/verify", func() string { return `{}` }, want{403, 200, 200}, "viewer", nil},
		{"Replay", http.MethodPost, "/v1/admin/replay", func() string { return `{` + window + `,"state":"failed"}` }, want{403, 403, 200}, "operator", nil},
		{"Repair", http.MethodPost, "/v1/admin/verify", func() string { return `{"repair":true}` }, want{403, 403, 200}, "operator", nil},
		{"DLQReplay", http.MethodPost, "/v1/admin/dlq:replay", func() string { return `{"ids":["1-0"]}` }, want{403, 403, 200}, "operator", nil},
		{"DLQDrop", http.MethodPost, "/v1/admin/dlq:drop", func() string { return `{"all":true}` }, want{403, 403, 200}, "operator", func(t *testing.T) {
			require.Equal(t, int64(1), b.rdb.XLen(ctx, dlq).Val(), "the dead letter is still there")
		}},
		{"Profiles", http.MethodGet, "/debug/pprof/", nil, want{403, 403, 200}, "operator", nil},
		{"ProfileHeap", http.MethodGet, "/debug/pprof/heap", nil, want{403, 403, 200}, "operator", nil},
		{"NoCommandLine", http.MethodGet, "/debug/pprof/cmdline", nil, want{403, 403, 404}, "operator", nil},
		{"UnknownV1Route", http.MethodGet, "/v1/nothing", nil, want{404, 404, 404}, "", nil},
	}
	for _, rt := range routes {
		t.Run(rt.name, func(t *testing.T) {
			body := func() string {
				if rt.body == nil {
					return ""
				}
				return rt.body()
			}
			for _, none := range [][]string{nil, {"Authorization", "Bearer wrong-token"}, {"Authorization", "Basic " + operatorToken},
				{"Authorization", "Bearer " + operatorToken + "x"}, {"Authorization", "Bearer " + operatorToken[:len(operatorToken)-1]}} {
				before, err := b.st.Counts(ctx)
				require.NoError(t, err)
				r := hb.do(t, rt.method, rt.path, body(), none...)
				r.problem(t, http.StatusUnauthorized)
				require.Contains(t, r.header.Get("WWW-Authenticate"), "Bearer")
				testkit.RequireStored(t, b.st, before.Total)
				if rt.unchanged != nil {
					rt.unchanged(t)
				}
			}
			for _, tc := range []struct {
				token string
				want  int
			}{{ingestToken, rt.want.ingest}, {viewerToken, rt.want.viewer}, {operatorToken, rt.want.operator}} {
				before, err := b.st.Counts(ctx)
				require.NoError(t, err)
				r := hb.do(t, rt.method, rt.path, body(), "Authorization", "Bearer "+tc.token)
				require.Equal(t, tc.want, r.status, "%s with the %s token: %s", rt.path, strings.Split(tc.token, "-")[0], r.body)
				if tc.want != http.StatusForbidden {
					continue
				}
				p := r.problem(t, http.StatusForbidden)
				require.Equal(t, httpapi.ProblemScope, p.Type)
				need := rt.need
				if tc.token == ingestToken && rt.method == http.MethodPost && strings.HasPrefix(rt.path, "/v1/admin/") && !strings.Contains(rt.path, "dlq") {
					need = "viewer"
				}
				require.Equal(t, need, p.Scope)
				require.Contains(t, p.Detail, "needs the "+need+" token")
				require.Contains(t, r.header.Get("WWW-Authenticate"), `error="insufficient_scope"`)
				testkit.RequireStored(t, b.st, before.Total)
				if rt.unchanged != nil {
					rt.unchanged(t)
				}
			}
		})
	}
	require.Zero(t, b.rdb.XLen(ctx, dlq).Val(), "the operator token dropped the dead letter")

	t.Run("OpenRoutesNeedNoToken", func(t *testing.T) {
		for _, path := range []string{"/healthz", "/readyz", "/metrics", "/ui/", "/ui/dlq"} {
			require.Equal(t, http.StatusOK, hb.do(t, http.MethodGet, path, "").status, path)
		}
	})

	t.Run("Whoami", func(t *testing.T) {
		for _, tc := range []struct {
			token string
			want  httpapi.Whoami
		}{
			{ingestToken, httpapi.Whoami{Scope: httpapi.ScopeIngest, AuthRequired: true, Ingest: true}},
			{viewerToken, httpapi.Whoami{Scope: httpapi.ScopeViewer, AuthRequired: true, Read: true}},
			{operatorToken, httpapi.Whoami{Scope: httpapi.ScopeOperator, AuthRequired: true, Ingest: true, Read: true, Act: true}},
		} {
			var got httpapi.Whoami
			require.NoError(t, json.Unmarshal(hb.do(t, http.MethodGet, "/v1/whoami", "", "Authorization", "Bearer "+tc.token).body, &got))
			require.Equal(t, tc.want, got)
		}
	})
}

// TestScopesReadOnly: on a read-only instance the operator token may not
// act either, and /v1/whoami says so.
func TestScopesReadOnly(t *testing.T) {
	t.Parallel()
	b := setupAdmin(t, testkit.NewStore(t), func(c *httpapi.Config) {
		c.AuthToken, c.ViewerToken, c.ReadOnly = operatorToken, viewerToken, true
	})
	hb := &handlerBundle{server: b.server}
	var got httpapi.Whoami
	require.NoError(t, json.Unmarshal(hb.do(t, http.MethodGet, "/v1/whoami", "", "Authorization", "Bearer "+operatorToken).body, &got))
	require.Equal(t, httpapi.Whoami{Scope: httpapi.ScopeOperator, AuthRequired: true, Read: true}, got)
	p := hb.do(t, http.MethodPost, "/v1/admin/dlq:drop", `{"all":true}`, "Authorization", "Bearer "+operatorToken).problem(t, http.StatusForbidden)
	require.Equal(t, httpapi.ProblemReadOnly, p.Type)
}

// TestTokensConfig: a token with a space, or one token for two scopes, is
// refused, naming the fields.
func TestTokensConfig(t *testing.T) {
	t.Parallel()
	for _, tc := range []struct {
		name  string
		cfg   httpapi.Config
		wants []string
	}{
		{"SpaceInViewer", httpapi.Config{ViewerToken: "a b"}, []string{"ViewerToken", "spaces"}},
		{"TabInIngest", httpapi.Config{IngestToken: "a\tb"}, []string{"IngestToken"}},
		{"ControlInOperator", httpapi.Config{AuthToken: "a\x00b"}, []string{"AuthToken", "control"}},
		{"SameForTwoScopes", httpapi.Config{IngestToken: "t", AuthToken: "t"}, []string{"AuthToken is the same token as IngestToken"}},
		{"SameForViewerAndIngest", httpapi.Config{IngestToken: "t", ViewerToken: "t"}, []string{"ViewerToken is the same token as IngestToken"}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			_, err := httpapi.New(&tc.cfg, nil)
			for _, w := range tc.wants {
				require.ErrorContains(t, err, w)
			}
		})
	}
	_, err := httpapi.New(&httpapi.Config{IngestToken: "i", ViewerToken: "v", AuthToken: "o"}, nil)
	require.NoError(t, err)
}

// TestLoopbackHosts: with no token and Config.LoopbackHosts, only a Host
// that names a loopback address is answered (DNS rebinding)
// ; the probes and /metrics answer any Host, and a token lifts the rule.
func TestLoopbackHosts(t *testing.T) {
	t.Parallel()
	st := testkit.NewStore(t)
	open := setupHandlerOn(t, st, &httpapi.Config{LoopbackHosts: true, Status: &ostatus.Status{Store: st, Stream: "s"},
		Metrics: promhttp.HandlerFor(prometheus.NewRegistry(), promhttp.HandlerOpts{})})
	guarded := setupHandlerOn(t, st, &httpapi.Config{LoopbackHosts: true, ViewerToken: viewerToken, Status: &ostatus.Status{Store: st, Stream: "s"}})
	get := func(b *handlerBundle, path, host string, header ...string) reply {
		t.Helper()
		return b.do(t, http.MethodGet, path, "", append([]string{"Host", host}, header...)...)
	}
	for _, tc := range []struct {
		host string
		ok   bool
	}{
		{"localhost", true}, {"LOCALHOST:8080", true}, {"localhost.", true}, {"127.0.0.1", true}, {"127.0.0.1:8080", true},
		{"127.3.2.1:80", true}, {"[::1]:8080", true}, {"[::1]", true},
		{"evil.example", false}, {"evil.example:8080", false}, {"localhost.evil.example", false}, {"127.0.0.1.evil.example", false},
		{"10.0.0.5:8080", false}, {"0.0.0.0:8080", false}, {"[::]:8080", false}, {"outboxd", false},
	} {
		t.Run(tc.host, func(t *testing.T) {
			r := get(open, "/v1/status", tc.host)
			if tc.ok {
				require.Equal(t, http.StatusOK, r.status, string(r.body))
			} else {
				p := r.problem(t, http.StatusForbidden)
				require.Equal(t, httpapi.ProblemHost, p.Type)
				require.Equal(t, http.StatusForbidden, get(open, "/ui/", tc.host).status, "the console too")
				require.Equal(t, http.StatusForbidden, get(open, "/v1/nothing", tc.host).status, "and unknown routes")
			}
			for _, path := range []string{"/healthz", "/readyz", "/metrics"} {
				require.Equal(t, http.StatusOK, get(open, path, tc.host).status, "%s answers any Host", path)
			}
			require.Equal(t, http.StatusOK, get(guarded, "/v1/status", tc.host, "Authorization", "Bearer "+viewerToken).status,
				"with a token, the Host does not matter")
		})
	}
}
