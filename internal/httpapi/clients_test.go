package httpapi_test

import (
	"encoding/json"
	"fmt"
	"net/http"
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/outboxd/outboxd/internal/httpapi"
	"github.com/outboxd/outboxd/internal/operator"
	ostatus "github.com/outboxd/outboxd/internal/status"
	"github.com/outboxd/outboxd/internal/testkit"
	"github.com/outboxd/outboxd/outbox"
)

// The tokens of the named ingest clients.
const (
	acmeToken   = "acme-token-5e1c"
	globexToken = "globex-token-8a2f"
)

// TestIngestClients: two named clients and the default one post the same
// reading (a derived key) and the same given key: each gets its own
// original (201), recorded with its client and shown by GET
// /v1/events/{id} and the journey; neither makes the other's reading
// 422, each one's retry is its own duplicate, and the default client may
// not spell a named client's stored key. On both stores.
func TestIngestClients(t *testing.T) {
	t.Parallel()
	for name, open := range bothStores {
		t.Run(name, func(t *testing.T) {
			t.Parallel()
			b := setupAdmin(t, open(t), func(c *httpapi.Config) {
				c.IngestToken = ingestToken
				c.IngestClients = map[string]string{"acme": acmeToken, "globex": globexToken}
				c.Writer = writerOf(c)
			})
			hb := &handlerBundle{st: b.st, server: b.server}
			as := func(token string) []string { return []string{"Authorization", "Bearer " + token} }
			reading := func(v int, key string) string {
				k := ""
				if key != "" {
					k = fmt.Sprintf(`"idempotencyKey":%q,`, key)
				}
				return fmt.Sprintf(`{%s"sourceKey":"plant","deviceKey":"m-1","occurredAt":"2026-10-01T02:00:00Z","payload":{"v":%d}}`, k, v)
			}
			post := func(token, body string, want int) outbox.Result {
				t.Helper()
				r := hb.do(t, http.MethodPost, "/v1/events", body, as(token)...)
				require.Equal(t, want, r.status, string(r.body))
				var res outbox.Result
				require.NoError(t, json.Unmarshal(r.body, &res))
				return res
			}
			clients := []struct{ name, token string }{{"acme", acmeToken}, {"globex", globexToken}, {"", ingestToken}}
			ids := map[string]bool{}
			for i, c := range clients {
				// The same reading with another value: a derived key, each
				// client's own.
				derived := post(c.token, reading(i, ""), http.StatusCreated)
				given := post(c.token, reading(i, "k-1"), http.StatusCreated)
				require.Equal(t, "k-1", given.IdempotencyKey, "the client's key as it sent it")
				require.Equal(t, derived.ID, post(c.token, reading(i, ""), http.StatusOK).ID, "%s's retry", c.name)
				require.Equal(t, given.ID, post(c.token, reading(i, "k-1"), http.StatusOK).ID, "%s's retry", c.name)
				for _, id := range []string{derived.ID, given.ID} {
					ids[id] = true
					ev := hb.event(t, id)
					require.Equal(t, c.name, ev.Client, "stored with its client")
					var got operator.Event
					r := hb.do(t, http.MethodGet, "/v1/events/"+id, "", as(testToken)...)
					require.Equal(t, http.StatusOK, r.status, string(r.body))
					require.NoError(t, json.Unmarshal(r.body, &got))
					require.Equal(t, c.name, got.Client, "GET /v1/events/{id}")
					require.Equal(t, c.name, b.journey(t, id).Original.Client, "the journey")
				}
				require.Equal(t, given.ID, b.journey(t, outbox.ClientKey(c.name, "k-1")).Original.ID, "the journey by the stored key")
			}
			require.Len(t, ids, 6)
			var who httpapi.Whoami
			require.NoError(t, json.Unmarshal(hb.do(t, http.MethodGet, "/v1/whoami", "", as(globexToken)...).body, &who))
			require.Equal(t, httpapi.Whoami{Scope: httpapi.ScopeIngest, Client: "globex", AuthRequired: true, Ingest: true}, who)
			hb.requireStored(t, 6)

			// A reused key with other content is a 422 within the client only.
			p := hb.do(t, http.MethodPost, "/v1/events", reading(99, "k-1"), as(acmeToken)...).problem(t, http.StatusUnprocessableEntity)
			require.Equal(t, httpapi.ProblemMismatch, p.Type)
			// The default client cannot spell acme's stored key.
			p = hb.do(t, http.MethodPost, "/v1/events", reading(0, "client:acme/k-1"), as(ingestToken)...).problem(t, http.StatusUnprocessableEntity)
			require.Equal(t, []string{"idempotencyKey"}, fields(p))
			// A batch is its client's too.
			r := hb.do(t, http.MethodPost, "/v1/events:batch", `{"events":[`+reading(0, "k-1")+`,`+reading(7, "k-2")+`]}`, as(acmeToken)...)
			require.Equal(t, http.StatusOK, r.status, string(r.body))
			var batch struct{ Results []outbox.Result }
			require.NoError(t, json.Unmarshal(r.body, &batch))
			require.True(t, batch.Results[0].Duplicate)
			require.Equal(t, "acme", hb.event(t, batch.Results[1].ID).Client)
			hb.requireStored(t, 7)
		})
	}
}

// writerOf is a writer on the config's store and stream.
func writerOf(c *httpapi.Config) *outbox.Writer {
	return outbox.NewWriter(c.Store, &outbox.WriterConfig{Stream: c.Status.(*ostatus.Status).Stream})
}

// TestIngestClientsConfig: a client's name must be a name and not
// "default", its token its own.
func TestIngestClientsConfig(t *testing.T) {
	t.Parallel()
	for _, tc := range []struct {
		name    string
		clients map[string]string
		wants   []string
	}{
		{"Slash", map[string]string{"a/b": "tok-1"}, []string{"IngestClients", `"a/b"`}},
		{"Default", map[string]string{"default": "tok-1"}, []string{"IngestToken's"}},
		{"Empty", map[string]string{"a": ""}, []string{"IngestClients[a] is empty"}},
		{"SameAsIngest", map[string]string{"a": "i"}, []string{"IngestClients[a] is the same token as IngestToken"}},
		{"SameTwice", map[string]string{"a": "t", "b": "t"}, []string{"IngestClients[b] is the same token as IngestClients[a]"}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			_, err := httpapi.New(&httpapi.Config{IngestToken: "i", IngestClients: tc.clients}, testkit.Logger(t))
			for _, w := range tc.wants {
				require.ErrorContains(t, err, w)
			}
		})
	}
}
