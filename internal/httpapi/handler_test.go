package httpapi_test

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net/http"
	"net/http/httptest"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/promhttp"
	"github.com/stretchr/testify/require"

	"github.com/outboxd/outboxd/internal/httpapi"
	ostatus "github.com/outboxd/outboxd/internal/status"
	"github.com/outboxd/outboxd/internal/testkit"
	"github.com/outboxd/outboxd/outbox"
	"github.com/outboxd/outboxd/store"
	"github.com/outboxd/outboxd/store/sqlitestore"
)

const testToken = "s3cret-token"

type handlerBundle struct {
	st      store.Store
	server  *httptest.Server
	handler http.Handler
}

// setupHandler serves the ingest API on a fresh SQLite store; cfg's
// Writer (with a running Committer, as outboxd serves it), Store and Ready
// are filled in when empty.
func setupHandler(t *testing.T, cfg *httpapi.Config) *handlerBundle {
	t.Helper()
	return setupHandlerOn(t, testkit.NewStore(t), cfg)
}

func setupHandlerOn(t *testing.T, st store.Store, cfg *httpapi.Config) *handlerBundle {
	t.Helper()
	if cfg == nil {
		cfg = &httpapi.Config{}
	}
	if cfg.Writer == nil {
		cfg.Writer = outbox.NewWriter(st, nil)
		c, err := outbox.NewCommitter(cfg.Writer, nil)
		require.NoError(t, err)
		require.NoError(t, c.Start(context.Background()))
		t.Cleanup(func() { require.NoError(t, c.Stop(context.Background())) })
		cfg.Committer = c
	}
	if cfg.Store == nil {
		cfg.Store = st
	}
	if cfg.Ready == nil {
		cfg.Ready = []httpapi.Check{{Name: "store", Func: st.Ping}}
	}
	h, err := httpapi.New(cfg, testkit.Logger(t))
	require.NoError(t, err)
	srv := httptest.NewServer(h)
	t.Cleanup(srv.Close)
	return &handlerBundle{st: st, server: srv, handler: h}
}

// reply is a decoded answer.
type reply struct {
	status int
	header http.Header
	body   []byte
}

func (r reply) json(t *testing.T) map[string]any {
	t.Helper()
	var v map[string]any
	require.NoError(t, json.Unmarshal(r.body, &v), "body: %s", r.body)
	return v
}

// problem checks that r is a problem document with status and returns it.
func (r reply) problem(t *testing.T, status int) httpapi.Problem {
	t.Helper()
	require.Equal(t, status, r.status, "body: %s", r.body)
	require.Equal(t, httpapi.ProblemContentType, r.header.Get("Content-Type"))
	var p httpapi.Problem
	require.NoError(t, json.Unmarshal(r.body, &p))
	require.Equal(t, status, p.Status)
	require.NotEmpty(t, p.Type)
	require.NotEmpty(t, p.Title)
	return p
}

func fields(p httpapi.Problem) []string {
	out := make([]string, len(p.Errors))
	for i, e := range p.Errors {
		out[i] = e.Field
	}
	return out
}

// postConcurrently sends n POST /v1/events at once, the i-th with body(i)
// and the header pairs, and returns the replies in order.
func (b *handlerBundle) postConcurrently(t *testing.T, n int, body func(i int) string, header ...string) []reply {
	t.Helper()
	replies := make([]reply, n)
	start := make(chan struct{})
	var wg sync.WaitGroup
	for i := range n {
		wg.Go(func() {
			<-start
			req, err := http.NewRequest(http.MethodPost, b.server.URL+"/v1/events", strings.NewReader(body(i)))
			if err != nil {
				replies[i] = reply{status: -1, body: []byte(err.Error())}
				return
			}
			req.Header.Set("Content-Type", "application/json")
			for j := 0; j+1 < len(header); j += 2 {
				req.Header.Set(header[j], header[j+1])
			}
			res, err := b.server.Client().Do(req)
			if err != nil {
				replies[i] = reply{status: -1, body: []byte(err.Error())}
				return
			}
			defer res.Body.Close()
			data, _ := io.ReadAll(res.Body)
			replies[i] = reply{status: res.StatusCode, body: data}
		})
	}
	close(start)
	wg.Wait()
	return replies
}

// do sends a request; header pairs are name, value ("Host" sets the
// request's Host, an empty value removes the header).
func (b *handlerBundle) do(t *testing.T, method, path, body string, header ...string) reply {
	t.Helper()
	req, err := http.NewRequest(method, b.server.URL+path, strings.NewReader(body))
	require.NoError(t, err)
	if body != "" {
		req.Header.Set("Content-Type", "application/json")
	}
	for i := 0; i+1 < len(header); i += 2 {
		switch {
		case header[i] == "Host":
			req.Host = header[i+1]
		case header[i+1] == "":
			req.Header.Del(header[i])
		default:
			req.Header.Add(header[i], header[i+1])
		}
	}
	res, err := b.server.Client().Do(req)
	require.NoError(t, err)
	defer res.Body.Close()
	data, err := io.ReadAll(res.Body)
	require.NoError(t, err)
	return reply{status: res.StatusCode, header: res.Header, body: data}
}

// requireStored checks the number of originals and outbox entries.
func (b *handlerBundle) requireStored(t *testing.T, n int64) {
	t.Helper()
	testkit.RequireStored(t, b.st, n)
}

// event reads an original.
func (b *handlerBundle) event(t *testing.T, id string) *outbox.Event {
	t.Helper()
	return testkit.Event(t, b.st, id)
}

func eventJSON(device string) string {
	return fmt.Sprintf(`{"sourceKey":"src","deviceKey":%q,"occurredAt":"2026-11-01T10:00:00.123Z","payload":{"t":21.5,"n":3}}`, device)
}

func TestHandler(t *testing.T) {
	t.Parallel()

	t.Run("CreatedThenDuplicate", func(t *testing.T) {
		t.Parallel()
		b := setupHandler(t, nil)
		first := b.do(t, http.MethodPost, "/v1/events", eventJSON("d1"))
		require.Equal(t, http.StatusCreated, first.status, "body: %s", first.body)
		require.Equal(t, "application/json", first.header.Get("Content-Type"))
		v := first.json(t)
		require.Equal(t, false, v["duplicate"])
		require.True(t, strings.HasPrefix(v["idempotencyKey"].(string), "derived:"))
		id := v["id"].(string)
		require.Equal(t, "/v1/events/"+id, first.header.Get("Location"))

		again := b.do(t, http.MethodPost, "/v1/events", eventJSON("d1"))
		require.Equal(t, http.StatusOK, again.status, "body: %s", again.body)
		w := again.json(t)
		require.Equal(t, id, w["id"])
		require.Equal(t, true, w["duplicate"])
		b.requireStored(t, 1)
	})

	t.Run("IdempotencyKeyHeader", func(t *testing.T) {
		t.Parallel()
		b := setupHandler(t, nil)
		r := b.do(t, http.MethodPost, "/v1/events", eventJSON("d1"), httpapi.IdempotencyKeyHeader, "client-key-1")
		require.Equal(t, http.StatusCreated, r.status, "body: %s", r.body)
		require.Equal(t, "client-key-1", r.json(t)["idempotencyKey"])
		require.Equal(t, "client-key-1", b.event(t, r.json(t)["id"].(string)).IdempotencyKey)
	})

	t.Run("ConcurrentSameKeyYieldsOneOriginal", func(t *testing.T) {
		t.Parallel()
		b := setupHandler(t, nil)
		const n = 50
		replies := b.postConcurrently(t, n, func(int) string { return eventJSON("same") }, httpapi.IdempotencyKeyHeader, "one-key")
		created := 0
		var id string
		for _, r := range replies {
			require.Contains(t, []int{http.StatusCreated, http.StatusOK}, r.status, "body: %s", r.body)
			if r.status == http.StatusCreated {
				created++
			}
			got := r.json(t)["id"].(string)
			if id == "" {
				id = got
			}
			require.Equal(t, id, got)
		}
		require.Equal(t, 1, created)
		b.requireStored(t, 1)
	})

	t.Run("KeyReuseWithOtherContentIs422", func(t *testing.T) {
		t.Parallel()
		b := setupHandler(t, nil)
		first := b.do(t, http.MethodPost, "/v1/events", eventJSON("d1"), httpapi.IdempotencyKeyHeader, "k1")
		require.Equal(t, http.StatusCreated, first.status)
		id := first.json(t)["id"].(string)

		other := `{"sourceKey":"src","deviceKey":"d1","occurredAt":"2026-11-01T10:00:00.123Z","payload":{"t":99}}`
		p := b.do(t, http.MethodPost, "/v1/events", other, httpapi.IdempotencyKeyHeader, "k1").problem(t, http.StatusUnprocessableEntity)
		require.Equal(t, httpapi.ProblemMismatch, p.Type)
		require.Equal(t, []string{httpapi.IdempotencyKeyHeader}, fields(p))
		require.NotContains(t, p.Detail, id, "another event's id is not the caller's to learn")

		require.JSONEq(t, `{"t":21.5,"n":3}`, string(b.event(t, id).Payload))
		b.requireStored(t, 1)
	})

	t.Run("RejectionsWriteNothing", func(t *testing.T) {
		t.Parallel()
		b := setupHandler(t, &httpapi.Config{AuthToken: testToken, MaxBody: 4096})
		auth := "Bearer " + testToken
		valid := eventJSON("d1")
		tests := []struct {
			name        string
			body        string
			header      []string
			status      int
			fields      []string
			detail      string
			contentType string // "" keeps application/json; "-" removes it
		}{
			{name: "Malformed", body: `{"sourceKey":`, status: 400, detail: "malformed JSON"},
			{name: "MalformedSyntax", body: `{"sourceKey" "a"}`, status: 400, detail: "malformed JSON"},
			{name: "Empty", body: ` `, status: 400, detail: "empty"},
			{name: "NotAnObject", body: `[1,2]`, status: 400, detail: "JSON object"},
			{name: "UnknownField", body: `{"sourceKey":"s","deviceKey":"d","occurredAt":"2026-11-01T10:00:00Z","colour":"red"}`, status: 400, fields: []string{"colour"}, detail: `"colour"`},
			{name: "InvalidUTF8", body: "{\"sourceKey\":\"s\xff\",\"deviceKey\":\"d\",\"occurredAt\":\"2026-11-01T10:00:00Z\"}", status: 400, detail: "UTF-8"},
			{name: "TrailingGarbage", body: valid + ` x`, status: 400, detail: "after"},
			{name: "TrailingObject", body: valid + valid, status: 400, detail: "after"},
			{name: "MissingToken", body: valid, header: []string{"Authorization", ""}, status: 401},
			{name: "WrongToken", body: valid, header: []string{"Authorization", ""}, status: 401},
			{name: "TooLarge", body: fmt.Sprintf(`{"sourceKey":"s","deviceKey":"d","occurredAt":"2026-11-01T10:00:00Z","payload":{"x":%q}}`, strings.Repeat("a", 5000)), status: 413},
			{name: "NoContentType", body: valid, contentType: "-", status: 415},
			{name: "TextContentType", body: valid, contentType: "text/plain", status: 415},
			{name: "OtherCharset", body: valid, contentType: "application/json; charset=latin1", status: 415},
			{name: "MissingSourceKey", body: `{"deviceKey":"d","occurredAt":"2026-11-01T10:00:00Z"}`, status: 422, fields: []string{"sourceKey"}},
			{name: "MissingDeviceKey", body: `{"sourceKey":"s","occurredAt":"2026-11-01T10:00:00Z"}`, status: 422, fields: []string{"deviceKey"}},
			{name: "MissingOccurredAt", body: `{"sourceKey":"s","deviceKey":"d"}`, status: 422, fields: []string{"occurredAt"}},
			{name: "BadOccurredAt", body: `{"sourceKey":"s","deviceKey":"d","occurredAt":"yesterday"}`, status: 422, fields: []string{"occurredAt"}},
			{name: "AbsurdOccurredAt", body: `{"sourceKey":"s","deviceKey":"d","occurredAt":"9999-01-01T00:00:00Z"}`, status: 422, fields: []string{"occurredAt"}},
			{name: "LongType", body: fmt.Sprintf(`{"sourceKey":"s","deviceKey":"d","occurredAt":"2026-11-01T10:00:00Z","type":%q}`, strings.Repeat("t", 201)), status: 422, fields: []string{"type"}},
			{name: "ControlInKey", body: `{"sourceKey":"s\u0001","deviceKey":"d","occurredAt":"2026-11-01T10:00:00Z"}`, status: 422, fields: []string{"sourceKey"}},
			{name: "PayloadNotObject", body: `{"sourceKey":"s","deviceKey":"d","occurredAt":"2026-11-01T10:00:00Z","payload":[1]}`, status: 422, fields: []string{"payload"}},
			{name: "PayloadDollarKey", body: `{"sourceKey":"s","deviceKey":"d","occurredAt":"2026-11-01T10:00:00Z","payload":{"$set":1}}`, status: 422, fields: []string{"payload"}},
			{name: "WrongType", body: `{"sourceKey":5,"deviceKey":"d","occurredAt":"2026-11-01T10:00:00Z"}`, status: 422, fields: []string{"sourceKey"}},
			{name: "LongHeaderKey", body: valid, header: []string{httpapi.IdempotencyKeyHeader, strings.Repeat("k", 201)}, status: 422, fields: []string{httpapi.IdempotencyKeyHeader}},
			{name: "EmptyHeaderKey", body: valid, header: []string{httpapi.IdempotencyKeyHeader, " "}, status: 422, fields: []string{httpapi.IdempotencyKeyHeader}},
			{name: "HeaderAndBodyKeyDiffer", body: `{"idempotencyKey":"a","sourceKey":"s","deviceKey":"d","occurredAt":"2026-11-01T10:00:00Z"}`, header: []string{httpapi.IdempotencyKeyHeader, "b"}, status: 422, fields: []string{"idempotencyKey"}},
		}
		for _, tt := range tests {
			t.Run(tt.name, func(t *testing.T) {
				header := append([]string{"Authorization", auth}, tt.header...)
				switch tt.name {
				case "MissingToken":
					header = nil
				case "WrongToken":
					header = []string{"Authorization", "Bearer not-" + testToken}
				}
				switch tt.contentType {
				case "":
				case "-":
					header = append(header, "Content-Type", "")
				default:
					header = append(header, "Content-Type", "")
					header = append(header, "Content-Type", tt.contentType)
				}
				p := b.do(t, http.MethodPost, "/v1/events", tt.body, header...).problem(t, tt.status)
				if tt.fields != nil {
					require.Equal(t, tt.fields, fields(p))
				}
				if tt.detail != "" {
					require.Contains(t, p.Detail, tt.detail)
				}
				b.requireStored(t, 0)
			})
		}
	})

	t.Run("Auth", func(t *testing.T) {
		t.Parallel()
		b := setupHandler(t, &httpapi.Config{AuthToken: testToken})
		r := b.do(t, http.MethodPost, "/v1/events", eventJSON("d1"))
		r.problem(t, http.StatusUnauthorized)
		require.Contains(t, r.header.Get("WWW-Authenticate"), "Bearer")
		b.do(t, http.MethodGet, "/v1/events/0123456789abcdef01234567", "").problem(t, http.StatusUnauthorized)
		b.do(t, http.MethodPost, "/v1/events:batch", `{"events":[]}`).problem(t, http.StatusUnauthorized)
		b.do(t, http.MethodGet, "/v1/nothing", "").problem(t, http.StatusUnauthorized)

		require.Equal(t, http.StatusOK, b.do(t, http.MethodGet, "/healthz", "").status)
		require.Equal(t, http.StatusOK, b.do(t, http.MethodGet, "/readyz", "").status)

		r = b.do(t, http.MethodPost, "/v1/events", eventJSON("d1"), "Authorization", "bearer "+testToken)
		require.Equal(t, http.StatusCreated, r.status, "body: %s", r.body)
		b.requireStored(t, 1)
	})

	t.Run("Batch", func(t *testing.T) {
		t.Parallel()
		b := setupHandler(t, nil)
		body := fmt.Sprintf(`{"events":[%s,%s,{"idempotencyKey":"mine","sourceKey":"s","deviceKey":"d3","occurredAt":"2026-11-01T10:00:00Z"}]}`,
			eventJSON("d1"), eventJSON("d2"))
		r := b.do(t, http.MethodPost, "/v1/events:batch", body)
		require.Equal(t, http.StatusOK, r.status, "body: %s", r.body)
		var res struct{ Results []outbox.Result }
		require.NoError(t, json.Unmarshal(r.body, &res))
		require.Len(t, res.Results, 3)
		require.Equal(t, "mine", res.Results[2].IdempotencyKey)
		for i, device := range []string{"d1", "d2", "d3"} {
			require.False(t, res.Results[i].Duplicate)
			require.Equal(t, device, b.event(t, res.Results[i].ID).DeviceKey, "results are in request order")
		}
		b.requireStored(t, 3)

		// The same batch again: all duplicates, same ids, same order.
		r = b.do(t, http.MethodPost, "/v1/events:batch", body)
		require.Equal(t, http.StatusOK, r.status)
		var again struct{ Results []outbox.Result }
		require.NoError(t, json.Unmarshal(r.body, &again))
		for i := range again.Results {
			require.True(t, again.Results[i].Duplicate)
			require.Equal(t, res.Results[i].ID, again.Results[i].ID)
		}
		b.requireStored(t, 3)
	})

	t.Run("BatchIsAllOrNothing", func(t *testing.T) {
		t.Parallel()
		b := setupHandler(t, &httpapi.Config{MaxBatch: 3})
		bad := `{"sourceKey":"s","occurredAt":"2026-11-01T10:00:00Z"}`
		tests := []struct {
			name   string
			body   string
			status int
			fields []string
		}{
			{"OneInvalidItem", fmt.Sprintf(`{"events":[%s,%s,%s]}`, eventJSON("d1"), eventJSON("d2"), bad), 422, []string{"events[2].deviceKey"}},
			{"SingleInvalidItem", fmt.Sprintf(`{"events":[%s]}`, bad), 422, []string{"events[0].deviceKey"}},
			{"ItemNotObject", fmt.Sprintf(`{"events":[%s,7]}`, eventJSON("d1")), 422, []string{"events[1]"}},
			{"ItemWrongType", fmt.Sprintf(`{"events":[%s,{"sourceKey":"s","deviceKey":true,"occurredAt":"2026-11-01T10:00:00Z"}]}`, eventJSON("d1")), 422, []string{"events[1].deviceKey"}},
			{"Empty", `{"events":[]}`, 422, []string{"events"}},
			{"Missing", `{}`, 422, []string{"events"}},
			{"TooMany", fmt.Sprintf(`{"events":[%s,%s,%s,%s]}`, eventJSON("d1"), eventJSON("d2"), eventJSON("d3"), eventJSON("d4")), 422, []string{"events"}},
			{"EventsNotArray", `{"events":{}}`, 422, []string{"events"}},
			{"UnknownItemField", fmt.Sprintf(`{"events":[%s,{"sourceKey":"s","deviceKey":"d","occurredAt":"2026-11-01T10:00:00Z","extra":1}]}`, eventJSON("d1")), 400, []string{"events[1].extra"}},
			{"UnknownTopField", fmt.Sprintf(`{"events":[%s],"more":1}`, eventJSON("d1")), 400, []string{"more"}},
		}
		for _, tt := range tests {
			t.Run(tt.name, func(t *testing.T) {
				p := b.do(t, http.MethodPost, "/v1/events:batch", tt.body).problem(t, tt.status)
				require.Equal(t, tt.fields, fields(p))
				b.requireStored(t, 0)
			})
		}
	})

	// The outbox names an invalid field by its input's index and its path
	// in the input; the API renders the path the client wrote, and the
	// problem's errors hold only field and reason.
	t.Run("InvalidFieldsOnTheWire", func(t *testing.T) {
		t.Parallel()
		b := setupHandler(t, nil)
		noDevice := `{"sourceKey":"s","occurredAt":"2026-11-01T10:00:00Z"}`
		r := b.do(t, http.MethodPost, "/v1/events:batch",
			fmt.Sprintf(`{"events":[%s,%s,%s,%s]}`, eventJSON("d1"), eventJSON("d2"), eventJSON("d3"), noDevice))
		p := r.problem(t, http.StatusUnprocessableEntity)
		require.Equal(t, httpapi.ProblemValidation, p.Type)
		require.Equal(t, "invalid event: events[3].deviceKey: is required", p.Detail)
		var raw struct {
			Errors []map[string]any `json:"errors"`
		}
		require.NoError(t, json.Unmarshal(r.body, &raw))
		require.Equal(t, []map[string]any{{"field": "events[3].deviceKey", "reason": "is required"}}, raw.Errors)

		p = b.do(t, http.MethodPost, "/v1/events", noDevice).problem(t, http.StatusUnprocessableEntity)
		require.Equal(t, "invalid event: deviceKey: is required", p.Detail)
		require.Equal(t, []string{"deviceKey"}, fields(p))
		b.requireStored(t, 0)
	})

	t.Run("BatchMismatchWritesNothingNew", func(t *testing.T) {
		t.Parallel()
		b := setupHandler(t, nil)
		keyed := `{"idempotencyKey":"k","sourceKey":"s","deviceKey":"d9","occurredAt":"2026-11-01T10:00:00Z"}`
		r := b.do(t, http.MethodPost, "/v1/events:batch", `{"events":[`+keyed+`]}`)
		require.Equal(t, http.StatusOK, r.status, "body: %s", r.body)
		other := `{"idempotencyKey":"k","sourceKey":"s","deviceKey":"d9","occurredAt":"2026-11-01T10:00:00Z","payload":{"other":true}}`
		p := b.do(t, http.MethodPost, "/v1/events:batch", `{"events":[`+eventJSON("d1")+`,`+other+`]}`).problem(t, http.StatusUnprocessableEntity)
		require.Equal(t, httpapi.ProblemMismatch, p.Type)
		require.Equal(t, []string{"events[1].idempotencyKey"}, fields(p))
		b.requireStored(t, 1)
	})

	t.Run("GetEvent", func(t *testing.T) {
		t.Parallel()
		b := setupHandler(t, nil)
		body := `{"sourceKey":"src","deviceKey":"d1","type":"temp","occurredAt":"2026-11-01T10:00:00.123+01:00","payload":{"t":21.5,"n":3,"nested":{"a":[1,"x",null]}}}`
		created := b.do(t, http.MethodPost, "/v1/events", body)
		require.Equal(t, http.StatusCreated, created.status, "body: %s", created.body)
		id := created.json(t)["id"].(string)

		r := b.do(t, http.MethodGet, "/v1/events/"+id, "")
		require.Equal(t, http.StatusOK, r.status, "body: %s", r.body)
		v := r.json(t)
		require.Equal(t, id, v["id"])
		require.Equal(t, "pending", v["state"])
		require.Equal(t, "src", v["sourceKey"])
		require.Equal(t, "d1", v["deviceKey"])
		require.Equal(t, "temp", v["type"])
		require.Equal(t, "2026-11-01T09:00:00.123Z", v["occurredAt"])
		require.Equal(t, map[string]any{"t": 21.5, "n": 3.0, "nested": map[string]any{"a": []any{1.0, "x", nil}}}, v["payload"])
		require.Contains(t, v, "syncedAt")
		require.Nil(t, v["syncedAt"])
		require.Nil(t, v["syncFailure"])
		require.Equal(t, 0.0, v["requeueCount"])
		require.NotEmpty(t, v["createdAt"])
		require.NotEmpty(t, v["idempotencyKey"])

		b.do(t, http.MethodGet, "/v1/events/0123456789abcdef01234567", "").problem(t, http.StatusNotFound)
		b.do(t, http.MethodGet, "/v1/events/not-an-id", "").problem(t, http.StatusNotFound)
	})

	t.Run("Routes", func(t *testing.T) {
		t.Parallel()
		reg := prometheus.NewRegistry()
		st := testkit.NewStore(t)
		b := setupHandlerOn(t, st, &httpapi.Config{
			Registerer: reg,
			Metrics:    promhttp.HandlerFor(reg, promhttp.HandlerOpts{}),
			Status:     &ostatus.Status{Store: st, Stream: "s", Group: "g"},
		})
		r := b.do(t, http.MethodGet, "/healthz", "")
		require.Equal(t, http.StatusOK, r.status)
		require.Equal(t, map[string]any{"status": "ok"}, r.json(t))
		require.Equal(t, http.StatusOK, b.do(t, http.MethodGet, "/readyz", "").status)

		r = b.do(t, http.MethodGet, "/v1/status", "")
		require.Equal(t, http.StatusOK, r.status)
		require.Equal(t, 0.0, r.json(t)["events"].(map[string]any)["total"])

		r = b.do(t, http.MethodGet, "/v1/events", "")
		r.problem(t, http.StatusMethodNotAllowed)
		require.Equal(t, http.MethodPost, r.header.Get("Allow"))
		r = b.do(t, http.MethodGet, "/v1/events:batch", "")
		r.problem(t, http.StatusMethodNotAllowed)
		require.Equal(t, http.MethodPost, r.header.Get("Allow"))
		b.do(t, http.MethodDelete, "/v1/events/0123456789abcdef01234567", "").problem(t, http.StatusMethodNotAllowed)
		b.do(t, http.MethodPost, "/healthz", "{}").problem(t, http.StatusMethodNotAllowed)
		b.do(t, http.MethodGet, "/nowhere", "").problem(t, http.StatusNotFound)

		// The colon route is its own route, not /v1/events with a suffix.
		r = b.do(t, http.MethodPost, "/v1/events:batch", `{"events":[`+eventJSON("d1")+`]}`)
		require.Equal(t, http.StatusOK, r.status, "body: %s", r.body)
		require.Contains(t, r.json(t), "results")

		r = b.do(t, http.MethodGet, "/metrics", "")
		require.Equal(t, http.StatusOK, r.status)
		require.Contains(t, string(r.body), `outboxd_http_requests_total{code="200",route="GET /healthz"} 1`)
		require.Contains(t, string(r.body), `outboxd_http_request_duration_seconds_count{route="POST /v1/events:batch"} 1`)
	})

	t.Run("ReadyzFailsWhenNotReady", func(t *testing.T) {
		t.Parallel()
		b := setupHandler(t, &httpapi.Config{Ready: []httpapi.Check{
			{Name: "store", Func: func(context.Context) error { return nil }},
			{Name: "redis", Func: func(context.Context) error { return errors.New("dial tcp 10.0.0.7:6379: secret detail") }},
		}})
		r := b.do(t, http.MethodGet, "/readyz", "")
		require.Equal(t, http.StatusServiceUnavailable, r.status)
		require.NotEmpty(t, r.header.Get("Retry-After"))
		require.Equal(t, map[string]any{"status": "unavailable", "checks": map[string]any{"store": "ok", "redis": "unavailable"}}, r.json(t))
		require.NotContains(t, string(r.body), "secret", "the cause stays in the log")
		require.Equal(t, http.StatusOK, b.do(t, http.MethodGet, "/healthz", "").status)
	})

	t.Run("ReadyzFailsWhenStoreCloses", func(t *testing.T) {
		t.Parallel()
		b := setupHandler(t, nil)
		require.Equal(t, http.StatusOK, b.do(t, http.MethodGet, "/readyz", "").status)
		require.NoError(t, b.st.Close(context.Background()))
		require.Equal(t, http.StatusServiceUnavailable, b.do(t, http.MethodGet, "/readyz", "").status)
	})
}

// TestHandlerStoreUnavailable closes the store under the handler: 503 with
// Retry-After, and after reopening, the store holds exactly what it held.
func TestHandlerStoreUnavailable(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	first := testkit.NewSQLite(t)
	h, err := httpapi.New(&httpapi.Config{Writer: outbox.NewWriter(first, nil), Store: first, RetryAfter: 1500 * time.Millisecond}, testkit.Logger(t))
	require.NoError(t, err)
	post := func(path, body string) *httptest.ResponseRecorder {
		req := httptest.NewRequest(http.MethodPost, path, strings.NewReader(body))
		req.Header.Set("Content-Type", "application/json")
		rec := httptest.NewRecorder()
		h.ServeHTTP(rec, req)
		return rec
	}
	rec := post("/v1/events", eventJSON("before"))
	require.Equal(t, http.StatusCreated, rec.Code, rec.Body.String())

	require.NoError(t, first.Close(ctx))
	for _, tc := range []struct{ path, body string }{
		{"/v1/events", eventJSON("after")},
		{"/v1/events:batch", `{"events":[` + eventJSON("a1") + `,` + eventJSON("a2") + `]}`},
	} {
		rec = post(tc.path, tc.body)
		require.Equal(t, http.StatusServiceUnavailable, rec.Code, rec.Body.String())
		require.Equal(t, "2", rec.Header().Get("Retry-After"))
		require.Equal(t, httpapi.ProblemContentType, rec.Header().Get("Content-Type"))
		var p httpapi.Problem
		require.NoError(t, json.Unmarshal(rec.Body.Bytes(), &p))
		require.Equal(t, httpapi.ProblemUnavailable, p.Type)
	}

	again, err := sqlitestore.Open(ctx, first.Path(), nil)
	require.NoError(t, err)
	t.Cleanup(func() { _ = again.Close(context.Background()) })
	testkit.RequireStored(t, again, 1)
}

// TestHandlerStoreUnavailableMongo is the same on the MongoDB store: a
// closed engine (or client) answers 503.
func TestHandlerStoreUnavailableMongo(t *testing.T) {
	t.Parallel()
	st := testkit.NewMongo(t, nil)
	b := setupHandlerOn(t, st, nil)
	require.Equal(t, http.StatusCreated, b.do(t, http.MethodPost, "/v1/events", eventJSON("before")).status)
	require.NoError(t, st.Close(context.Background()))
	p := b.do(t, http.MethodPost, "/v1/events", eventJSON("after")).problem(t, http.StatusServiceUnavailable)
	require.Equal(t, httpapi.ProblemUnavailable, p.Type)
}

func TestNewHandlerConfig(t *testing.T) {
	t.Parallel()
	st := testkit.NewStore(t)
	w := outbox.NewWriter(st, nil)

	t.Run("NilConfigMeansDefaults", func(t *testing.T) {
		t.Parallel()
		h, err := httpapi.New(&httpapi.Config{Writer: w}, nil)
		require.NoError(t, err)
		// The default body limit is 1 MiB: a body just over it is 413.
		big := bytes.Repeat([]byte(" "), int(httpapi.MaxBodyDefault)+1)
		req := httptest.NewRequest(http.MethodPost, "/v1/events", bytes.NewReader(big))
		req.Header.Set("Content-Type", "application/json; charset=utf-8")
		rec := httptest.NewRecorder()
		h.ServeHTTP(rec, req)
		require.Equal(t, http.StatusRequestEntityTooLarge, rec.Code)
	})

	t.Run("InvalidValuesNameTheField", func(t *testing.T) {
		t.Parallel()
		for _, tc := range []struct {
			field string
			cfg   *httpapi.Config
		}{
			{"MaxBody", &httpapi.Config{MaxBody: -1}},
			{"MaxBody", &httpapi.Config{MaxBody: httpapi.MaxBodyMax + 1}},
			{"MaxBatch", &httpapi.Config{MaxBatch: -1}},
			{"RetryAfter", &httpapi.Config{RetryAfter: -time.Second}},
			{"RequestTimeout", &httpapi.Config{RequestTimeout: -time.Second}},
			{"AuthToken", &httpapi.Config{AuthToken: "a b"}},
		} {
			_, err := httpapi.New(tc.cfg, nil)
			require.ErrorContains(t, err, tc.field)
		}
	})

	t.Run("SharesMetricsBetweenHandlers", func(t *testing.T) {
		t.Parallel()
		reg := prometheus.NewRegistry()
		_, err := httpapi.New(&httpapi.Config{Writer: w, Registerer: reg}, nil)
		require.NoError(t, err)
		_, err = httpapi.New(&httpapi.Config{Writer: w, Registerer: reg}, nil)
		require.NoError(t, err)
	})
}
