package httpapi_test

import (
	"context"
	"encoding/json"
	"maps"
	"net/http"
	"net/http/httptest"
	"reflect"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/redis/go-redis/v9"
	"github.com/stretchr/testify/require"

	"github.com/outboxd/outboxd/internal/failpolicy"
	"github.com/outboxd/outboxd/internal/httpapi"
	"github.com/outboxd/outboxd/internal/operator"
	"github.com/outboxd/outboxd/internal/readmodel"
	ostatus "github.com/outboxd/outboxd/internal/status"
	"github.com/outboxd/outboxd/internal/stream"
	"github.com/outboxd/outboxd/internal/testkit"
	"github.com/outboxd/outboxd/outbox"
	"github.com/outboxd/outboxd/store"
)

// adminBundle is the admin API in front of an Operator on real stores
// (the operator's own tests, in internal/operator, run its actions end to
// end; these test what HTTP adds).
type adminBundle struct {
	st     store.Store
	rdb    *redis.Client
	rc     *stream.Client
	pg     *testkit.Postgres
	stream string
	group  string
	writer *outbox.Writer
	server *httptest.Server
}

// setupAdmin serves the admin API over st; mods change the HTTP config.
func setupAdmin(t *testing.T, st store.Store, mods ...func(*httpapi.Config)) *adminBundle {
	t.Helper()
	rdb, prefix := testkit.NewRedis(t)
	rc, err := stream.NewClient(rdb, nil)
	require.NoError(t, err)
	b := &adminBundle{st: st, rdb: rdb, rc: rc, pg: testkit.NewPostgres(t), stream: prefix + ":stream", group: "read-model"}
	b.writer = outbox.NewWriter(st, &outbox.WriterConfig{Stream: b.stream})
	admin, err := operator.New(&operator.Config{Store: st, Redis: rc, ReadModel: readmodel.New(b.pg.Pool), Stream: b.stream,
		Group: b.group, Registerer: prometheus.NewRegistry()}, testkit.Logger(t))
	require.NoError(t, err)
	cfg := &httpapi.Config{AuthToken: testToken, Store: st, Admin: admin,
		Status: &ostatus.Status{Store: st, Redis: rc, Stream: b.stream, Group: b.group}}
	for _, m := range mods {
		m(cfg)
	}
	h, err := httpapi.New(cfg, testkit.Logger(t))
	require.NoError(t, err)
	b.server = httptest.NewServer(h)
	t.Cleanup(b.server.Close)
	return b
}

// write stores one original per occurrence time and returns them.
func (b *adminBundle) write(t *testing.T, device string, occurred ...time.Time) []*outbox.Event {
	t.Helper()
	return testkit.WriteOccurred(t, b.writer, b.st, device, occurred...)
}

// keys names the bundle's stream, dead-letter stream and budgets.
func (b *adminBundle) keys() stream.Keys { return stream.NewKeys(b.stream, b.group) }

// call sends an admin request with the token and decodes a 200 answer into
// out; it returns the status and the body.
func (b *adminBundle) call(t *testing.T, method, path string, body, out any) (int, []byte) {
	t.Helper()
	var rd *strings.Reader
	if body != nil {
		j, err := json.Marshal(body)
		require.NoError(t, err)
		rd = strings.NewReader(string(j))
	} else {
		rd = strings.NewReader("")
	}
	req, err := http.NewRequest(method, b.server.URL+path, rd)
	require.NoError(t, err)
	req.Header.Set("Authorization", "Bearer "+testToken)
	if body != nil {
		req.Header.Set("Content-Type", "application/json")
	}
	res, err := b.server.Client().Do(req)
	require.NoError(t, err)
	defer res.Body.Close()
	var raw json.RawMessage
	require.NoError(t, json.NewDecoder(res.Body).Decode(&raw))
	if res.StatusCode == http.StatusOK && out != nil {
		reflect.ValueOf(out).Elem().SetZero() // an answer's omitted fields are empty, not the last answer's
		require.NoError(t, json.Unmarshal(raw, out))
	}
	return res.StatusCode, raw
}

// bothStores open a fresh store of each kind: SQLite, and MongoDB on lungo
// (or the replica set of OUTBOXD_TEST_MONGO_URI).
var bothStores = map[string]func(testing.TB) store.Store{
	"SQLite":  func(t testing.TB) store.Store { return testkit.NewSQLite(t) },
	"MongoDB": func(t testing.TB) store.Store { return testkit.NewMongo(t, nil) },
}

var day0 = time.Date(2026, 10, 1, 0, 0, 0, 0, time.UTC)

// members returns the names of the members of the JSON object raw: the
// shape of an answer.
func members(t *testing.T, raw []byte) []string {
	t.Helper()
	var m map[string]json.RawMessage
	require.NoError(t, json.Unmarshal(raw, &m), string(raw))
	return slices.Sorted(maps.Keys(m))
}

// TestAdminEndpoints is one happy path per admin endpoint: the route maps
// its request (path, query, body) onto the operator's action and answers
// 200 with the action's result as JSON, in the shape the CLI and the
// console decode. What the actions do is tested beside them, in
// internal/operator.
func TestAdminEndpoints(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	b := setupAdmin(t, testkit.NewStore(t))
	events := b.write(t, "d1", day0, day0.Add(time.Hour))
	var dead []string
	for _, ev := range events {
		id, err := b.rdb.XAdd(ctx, &redis.XAddArgs{Stream: b.keys().DLQ(), Values: stream.DeadLetter{Category: outbox.CategoryPoison,
			Code: "projection_failed", EventID: ev.ID, At: time.Now(), Payload: ev.Message(outbox.OriginOutbox).Encode()}.Encode()}).Result()
		require.NoError(t, err)
		dead = append(dead, id)
	}
	ok := func(t *testing.T, method, path string, body, out any) []byte {
		t.Helper()
		code, raw := b.call(t, method, path, body, out)
		require.Equal(t, http.StatusOK, code, string(raw))
		return raw
	}

	t.Run("DLQList", func(t *testing.T) {
		var page operator.DLQPage
		raw := ok(t, http.MethodGet, "/v1/admin/dlq?category=poison&code=projection_failed&limit=1", nil, &page)
		require.Equal(t, []string{"entries", "length", "next", "stream"}, members(t, raw))
		require.Equal(t, b.keys().DLQ(), page.Stream)
		require.Equal(t, int64(2), page.Length)
		require.Len(t, page.Entries, 1, "the limit of the query")
		require.Equal(t, dead[0], page.Entries[0].ID)
		ok(t, http.MethodGet, "/v1/admin/dlq?after="+page.Next, nil, &page)
		require.Len(t, page.Entries, 1, "the page after")
		require.Equal(t, dead[1], page.Entries[0].ID)
		ok(t, http.MethodGet, "/v1/admin/dlq?category=non_retryable", nil, &page)
		require.Empty(t, page.Entries, "the category of the query")
	})
	t.Run("DLQOne", func(t *testing.T) {
		var one operator.DeadLetter
		raw := ok(t, http.MethodGet, "/v1/admin/dlq/"+dead[0], nil, &one)
		require.Contains(t, members(t, raw), "event", "with its original")
		require.Equal(t, events[0].ID, one.EventID)
		require.Equal(t, events[0].IdempotencyKey, one.Event.IdempotencyKey)
	})
	t.Run("Events", func(t *testing.T) {
		var page operator.EventsPage
		raw := ok(t, http.MethodGet, "/v1/admin/events?from="+day0.Add(time.Hour).Format(time.RFC3339)+"&sourceKey=src&deviceKey=d1&state=pending&limit=5", nil, &page)
		require.Equal(t, []string{"events"}, members(t, raw))
		require.Len(t, page.Events, 1, "the window of the query")
		require.Equal(t, events[1].ID, page.Events[0].ID)
		require.NotContains(t, string(raw), "payload", "a listing leaves the payloads out")
	})
	t.Run("Journey", func(t *testing.T) {
		j := b.journey(t, events[0].IdempotencyKey)
		require.Equal(t, "idempotencyKey", j.MatchedBy)
		require.Equal(t, events[0].ID, j.Original.ID)
		_, raw := b.call(t, http.MethodGet, "/v1/admin/events/"+events[0].ID+"/journey", nil, nil)
		require.Equal(t, []string{"matchedBy", "original", "outbox", "readAt", "readModel", "stream"}, members(t, raw))
	})
	window := httpapi.ReplayRequest{From: day0.Format(time.RFC3339), To: day0.Add(24 * time.Hour).Format(time.RFC3339), SourceKey: "src"}
	t.Run("ReplayDryRun", func(t *testing.T) {
		req := window
		req.DryRun = true
		var res operator.ReplayResult
		raw := ok(t, http.MethodPost, "/v1/admin/replay", req, &res)
		require.JSONEq(t, `{"dryRun":true,"count":2,"matched":0,"published":0,"redriven":0,"removedRows":0,"done":true}`, string(raw))
	})
	t.Run("Replay", func(t *testing.T) {
		req := window
		req.Limit = 1
		var res operator.ReplayResult
		raw := ok(t, http.MethodPost, "/v1/admin/replay", req, &res)
		require.Equal(t, []string{"done", "dryRun", "matched", "next", "published", "redriven", "removedRows", "started"}, members(t, raw))
		require.Equal(t, 1, res.Published, "the limit of the request")
		req.After, req.Started = res.Next, res.Started.Format(time.RFC3339Nano)
		ok(t, http.MethodPost, "/v1/admin/replay", req, &res)
		require.Equal(t, 1, res.Published, "the chunk after")
		require.Equal(t, int64(2), b.rdb.XLen(ctx, b.keys().Replay()).Val(), "in the replay lane")
	})
	t.Run("Verify", func(t *testing.T) {
		var res operator.VerifyResult
		raw := ok(t, http.MethodPost, "/v1/admin/verify", httpapi.VerifyRequest{From: day0.Format(time.RFC3339), Limit: 1}, &res)
		require.Equal(t, []string{"checked", "done", "drift", "next", "phase", "republished", "statsRecomputed", "total"}, members(t, raw))
		require.Equal(t, operator.PhaseOriginals, res.Phase)
	})
	t.Run("DLQReplay", func(t *testing.T) {
		var res operator.DLQActionResult
		raw := ok(t, http.MethodPost, "/v1/admin/dlq:replay", operator.DLQAction{IDs: []string{dead[0]}}, &res)
		require.Equal(t, []string{"done", "dropped", "failed", "notFound", "originalMissing", "replayed", "results"}, members(t, raw))
		require.Equal(t, []operator.DLQResult{{ID: dead[0], EventID: events[0].ID, Outcome: operator.OutcomeReplayed}}, res.Results)
	})
	t.Run("DLQDrop", func(t *testing.T) {
		var res operator.DLQActionResult
		ok(t, http.MethodPost, "/v1/admin/dlq:drop", operator.DLQAction{All: true, Category: outbox.CategoryPoison}, &res)
		require.Equal(t, []operator.DLQResult{{ID: dead[1], EventID: events[1].ID, Outcome: operator.OutcomeDropped}}, res.Results)
		require.Zero(t, b.rdb.XLen(ctx, b.keys().DLQ()).Val())
	})
	t.Run("PauseAndResume", func(t *testing.T) {
		var res operator.PauseResult
		raw := ok(t, http.MethodPost, "/v1/admin/pause", httpapi.PauseRequest{Stage: "projection", By: "alice"}, &res)
		require.Equal(t, []string{"by", "changed", "paused", "since", "stage"}, members(t, raw))
		require.Equal(t, "projection:"+b.group, res.Stage)
		require.Equal(t, "alice", res.By)
		var pauses operator.PausesResult
		raw = ok(t, http.MethodGet, "/v1/admin/pauses", nil, &pauses)
		require.Equal(t, []string{"paused", "stages"}, members(t, raw))
		require.Len(t, pauses.Paused, 1)
		require.Equal(t, "alice", pauses.Paused[0].By)
		raw = ok(t, http.MethodPost, "/v1/admin/resume", httpapi.PauseRequest{Stage: "projection"}, &res)
		require.JSONEq(t, `{"stage":"projection:`+b.group+`","paused":false,"changed":true}`, string(raw))
		ok(t, http.MethodGet, "/v1/admin/pauses", nil, &pauses)
		require.Empty(t, pauses.Paused)
	})
	t.Run("ReplayCancel", func(t *testing.T) {
		var res operator.CancelResult
		raw := ok(t, http.MethodPost, "/v1/admin/replay:cancel", httpapi.CancelRequest{}, &res)
		require.Equal(t, []string{"cancelledAt", "removed"}, members(t, raw))
		require.Equal(t, int64(3), res.Removed, "the lane's entries nobody was delivered: two replayed, one dead letter replayed")
		req := window
		req.Started = time.Now().Add(-time.Hour).Format(time.RFC3339Nano)
		p := (&handlerBundle{server: b.server}).do(t, http.MethodPost, "/v1/admin/replay", mustJSON(t, req),
			"Authorization", "Bearer "+testToken).problem(t, http.StatusConflict)
		require.Equal(t, httpapi.ProblemCancelled, p.Type, "a chunk of a cancelled replay")
	})
}

// mustJSON encodes v.
func mustJSON(t *testing.T, v any) string {
	t.Helper()
	j, err := json.Marshal(v)
	require.NoError(t, err)
	return string(j)
}

// TestAdminAPI: the errors of the admin API are problem documents, behind
// the bearer token: a request HTTP cannot read (a time that is not RFC
// 3339, an unknown field, a bad query parameter, the wrong method) and
// the operator's errors, an invalid field (422 naming it) per endpoint
// and an unknown entry (404). Which fields the operator refuses:
// TestErrors in internal/operator.
func TestAdminAPI(t *testing.T) {
	t.Parallel()
	b := setupAdmin(t, testkit.NewStore(t))
	hb := &handlerBundle{server: b.server}
	window := `{"from":"2026-10-01T00:00:00Z","to":"2026-10-02T00:00:00Z"}`

	t.Run("NeedsTheToken", func(t *testing.T) {
		hb.do(t, http.MethodGet, "/v1/admin/dlq", "").problem(t, http.StatusUnauthorized)
		hb.do(t, http.MethodPost, "/v1/admin/replay", window).problem(t, http.StatusUnauthorized)
	})
	auth := []string{"Authorization", "Bearer " + testToken}
	for _, tc := range []struct {
		name, method, path, body string
		status                   int
		field                    string
	}{
		{"ReplayWithoutWindow", http.MethodPost, "/v1/admin/replay", `{"to":"2026-10-02T00:00:00Z"}`, 422, "from"},
		{"ReplayBadTime", http.MethodPost, "/v1/admin/replay", `{"from":"yesterday","to":"2026-10-02T00:00:00Z"}`, 422, "from"},
		{"ReplayUnknownField", http.MethodPost, "/v1/admin/replay", `{"from":"2026-10-01T00:00:00Z","to":"2026-10-02T00:00:00Z","window":1}`, 400, ""},
		{"VerifyBadCursor", http.MethodPost, "/v1/admin/verify", `{"after":"elsewhere:1"}`, 422, "after"},
		{"DLQNothingNamed", http.MethodPost, "/v1/admin/dlq:replay", `{}`, 422, "ids"},
		{"DLQBadID", http.MethodPost, "/v1/admin/dlq:drop", `{"ids":["one"]}`, 422, "ids"},
		{"DLQBadLimit", http.MethodGet, "/v1/admin/dlq?limit=0", ``, 422, "limit"},
		{"DLQUnknown", http.MethodGet, "/v1/admin/dlq/1-1", ``, 404, ""},
		{"DLQBadAfter", http.MethodGet, "/v1/admin/dlq?after=abc", ``, 422, "after"},
		{"DLQBadIDInPath", http.MethodGet, "/v1/admin/dlq/abc", ``, 422, "id"},
		{"EventsBadWindow", http.MethodGet, "/v1/admin/events?from=2026-10-02T00:00:00Z&to=2026-10-01T00:00:00Z", ``, 422, "to"},
		{"WrongMethod", http.MethodDelete, "/v1/admin/replay", ``, 405, ""},
		{"PauseBadStage", http.MethodPost, "/v1/admin/pause", `{"stage":"lane"}`, 422, "stage"},
		{"ResumeUnknownField", http.MethodPost, "/v1/admin/resume", `{"stage":"relay","by":"x","until":"y"}`, 400, ""},
		{"RetriesBadClass", http.MethodPost, "/v1/admin/retries:resume", `{"class":"poison"}`, 422, "class"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			p := hb.do(t, tc.method, tc.path, tc.body, auth...).problem(t, tc.status)
			if tc.field != "" {
				require.Equal(t, []string{tc.field}, fields(p))
			}
		})
	}
	// The answers of the API are kept by no cache and
	// not sniffed, errors included.
	t.Run("NoStore", func(t *testing.T) {
		for _, path := range []string{"/v1/status", "/v1/admin/dlq", "/v1/admin/events", "/v1/admin/dlq?after=abc", "/v1/nothing"} {
			r := hb.do(t, http.MethodGet, path, "", auth...)
			require.Equal(t, "no-store", r.header.Get("Cache-Control"), path)
			require.Equal(t, "nosniff", r.header.Get("X-Content-Type-Options"), path)
		}
	})
	t.Run("NotJSON", func(t *testing.T) {
		hb.do(t, http.MethodPost, "/v1/admin/verify", "{}", append(auth, "Content-Type", "")...).problem(t, http.StatusUnsupportedMediaType)
	})

	t.Run("ActionsAnInstanceCannotPerform", func(t *testing.T) {
		st := testkit.NewStore(t)
		admin, err := operator.New(&operator.Config{Store: st, Role: "ingest"}, nil)
		require.NoError(t, err)
		h, err := httpapi.New(&httpapi.Config{Admin: admin}, nil)
		require.NoError(t, err)
		srv := httptest.NewServer(h)
		defer srv.Close()
		ingest := &handlerBundle{server: srv}
		p := ingest.do(t, http.MethodGet, "/v1/admin/dlq", "").problem(t, http.StatusNotImplemented)
		require.Equal(t, httpapi.ProblemNotAvailable, p.Type)
		require.Contains(t, p.Detail, "ingest")
		ingest.do(t, http.MethodPost, "/v1/admin/verify", "{}").problem(t, http.StatusNotImplemented)
		ingest.do(t, http.MethodPost, "/v1/admin/retries:resume", `{"class":"record"}`).problem(t, http.StatusNotImplemented)
		ingest.do(t, http.MethodPost, "/v1/admin/replay", window).problem(t, http.StatusNotImplemented)
		// Counting needs the store only.
		r := ingest.do(t, http.MethodPost, "/v1/admin/replay", `{"from":"2026-10-01T00:00:00Z","to":"2026-10-02T00:00:00Z","dryRun":true}`)
		require.Equal(t, http.StatusOK, r.status, string(r.body))
		require.JSONEq(t, `{"dryRun":true,"count":0,"matched":0,"published":0,"redriven":0,"removedRows":0,"done":true}`, string(r.body))
	})
}

// TestAdminRetriesResume: POST /v1/admin/retries:resume answers the halts
// it cleared, and /v1/status shows the halts until then (what the action
// clears: TestResumeRetries in internal/operator).
func TestAdminRetriesResume(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	b := setupAdmin(t, testkit.NewStore(t))
	keys := b.keys()
	pgDown := failpolicy.Infrastructure(failpolicy.SourcePostgres)
	storeDown := failpolicy.Infrastructure(failpolicy.SourceStore)
	_, err := b.rc.Streak(keys, stream.ComponentWorker).Fail(ctx, pgDown, 1)
	require.NoError(t, err)
	_, err = b.rc.Streak(keys, stream.ComponentDispatcher).Fail(ctx, storeDown, 1)
	require.NoError(t, err)
	var snap ostatus.Snapshot
	code, body := b.call(t, http.MethodGet, "/v1/status", nil, &snap)
	require.Equal(t, http.StatusOK, code, string(body))
	require.ElementsMatch(t, []ostatus.HaltedRetries{
		{Component: stream.ComponentWorker, Class: failpolicy.ClassInfrastructure, Code: pgDown.Code},
		{Component: stream.ComponentDispatcher, Class: failpolicy.ClassInfrastructure, Code: storeDown.Code},
	}, snap.RetriesHalted)

	var res operator.RetriesResult
	code, body = b.call(t, http.MethodPost, "/v1/admin/retries:resume", httpapi.RetriesRequest{Class: failpolicy.ClassInfrastructure}, &res)
	require.Equal(t, http.StatusOK, code, string(body))
	require.Equal(t, failpolicy.ClassInfrastructure, res.Class)
	require.Equal(t, []operator.ResumedHalt{
		{Component: stream.ComponentWorker, Code: pgDown.Code, Source: failpolicy.SourcePostgres},
		{Component: stream.ComponentDispatcher, Code: storeDown.Code, Source: failpolicy.SourceStore},
	}, res.Resumed)
	code, body = b.call(t, http.MethodGet, "/v1/status", nil, &snap)
	require.Equal(t, http.StatusOK, code, string(body))
	require.Empty(t, snap.RetriesHalted)
}
