package httpapi_test

import (
	"bytes"
	"compress/gzip"
	"context"
	"fmt"
	"io"
	"net/http"
	"strings"
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/outboxd/outboxd/httpapi"
)

// hostileCase is a request a hostile client sends and the answer it must
// get; nothing may be written for a refusal.
type hostileCase struct {
	name   string
	path   string // "" is /v1/events
	body   string
	header []string
	status int
	fields []string // the fields the problem names, when set
	detail string   // a part of the detail, when set
}

// runHostile sends each case, in order, to one handler and checks the
// answer, and that a refusal wrote nothing.
func runHostile(t *testing.T, cases []hostileCase) {
	t.Helper()
	b := setupHandler(t, nil)
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			path := tc.path
			if path == "" {
				path = "/v1/events"
			}
			before, err := b.st.Counts(context.Background())
			require.NoError(t, err)
			r := b.do(t, http.MethodPost, path, tc.body, tc.header...)
			if tc.status < 400 {
				require.Equal(t, tc.status, r.status, "body: %s", r.body)
				return
			}
			p := r.problem(t, tc.status)
			if tc.fields != nil {
				require.Equal(t, tc.fields, fields(p))
			}
			if tc.detail != "" {
				require.Contains(t, p.Detail, tc.detail)
			}
			b.requireStored(t, before.Total)
		})
	}
}

// event is a valid event object whose members are members (raw JSON, in
// order) plus the ones it lacks.
func event(members ...string) string {
	body := strings.Join(members, ",")
	for _, m := range []string{`"sourceKey":"s"`, `"deviceKey":"d"`, `"occurredAt":"2026-11-01T10:00:00Z"`} {
		name, _, _ := strings.Cut(m, ":")
		if !strings.Contains(body, name+":") {
			body += "," + m
		}
	}
	return "{" + strings.TrimPrefix(body, ",") + "}"
}

func batchOf(items ...string) string { return `{"events":[` + strings.Join(items, ",") + `]}` }

// TestHostileJSON: member names are matched exactly and may appear once, in
// the body, in batch items and in payloads, so a proxy or WAF in front reads
// the values outboxd stores (issue 14, item 5). 400 names the member.
func TestHostileJSON(t *testing.T) {
	t.Parallel()
	many := make([]string, 40)
	for i := range many {
		many[i] = fmt.Sprintf(`"k%d":%d`, i, i)
	}
	runHostile(t, []hostileCase{
		{name: "UpperCaseName", body: `{"SOURCEKEY":"s","deviceKey":"d","occurredAt":"2026-11-01T10:00:00Z"}`,
			status: 400, fields: []string{"SOURCEKEY"}, detail: `did you mean "sourceKey"`},
		{name: "MixedCaseName", body: event(`"sourcekey":"s"`), status: 400, fields: []string{"sourcekey"}},
		{name: "KelvinSignName", body: event(`"source` + "\u212a" + `ey":"s"`), status: 400, fields: []string{"source\u212aey"}},
		{name: "EscapedKelvinSignName", body: event(`"source\u212aey":"s"`), status: 400, fields: []string{"source\u212aey"}},
		{name: "CaseVariantNextToTheName", body: event(`"sourceKey":"s"`, `"SOURCEKEY":"t"`), status: 400, fields: []string{"SOURCEKEY"}},
		{name: "DuplicateName", body: event(`"sourceKey":"a"`, `"sourceKey":"b"`), status: 400, fields: []string{"sourceKey"}, detail: "more than once"},
		{name: "DuplicateThroughAnEscape", body: event(`"deviceKey":"a"`, `"device\u004bey":"b"`), status: 400, fields: []string{"deviceKey"}},
		{name: "DuplicatePayload", body: event(`"payload":{}`, `"payload":{"t":1}`), status: 400, fields: []string{"payload"}},
		{name: "DuplicateInPayload", body: event(`"payload":{"t":1,"t":2}`), status: 400, fields: []string{"payload.t"}},
		{name: "DuplicateDeepInPayload", body: event(`"payload":{"a":[1,{"x":1,"y":{"z":1,"z":2}}]}`), status: 400, fields: []string{"payload.a[1].y.z"}},
		{name: "DuplicateInALargePayloadObject", body: event(`"payload":{` + strings.Join(many, ",") + `,"k7":0}`), status: 400, fields: []string{"payload.k7"}},
		{name: "BatchUpperCaseName", path: "/v1/events:batch", body: `{"EVENTS":[` + event() + `]}`, status: 400, fields: []string{"EVENTS"}},
		{name: "BatchDuplicateName", path: "/v1/events:batch", body: `{"events":[` + event() + `],"events":[]}`, status: 400, fields: []string{"events"}},
		{name: "BatchItemCaseVariant", path: "/v1/events:batch", body: batchOf(event(), event(`"Type":"x"`)), status: 400, fields: []string{"events[1].Type"}},
		{name: "BatchItemDuplicate", path: "/v1/events:batch", body: batchOf(event(), event(`"deviceKey":"a"`, `"deviceKey":"b"`)), status: 400, fields: []string{"events[1].deviceKey"}},
		{name: "BatchItemDuplicateInPayload", path: "/v1/events:batch", body: batchOf(event(`"payload":{"t":1,"t":1}`)), status: 400, fields: []string{"events[0].payload.t"}},

		{name: "SameNameInTwoObjects", body: event(`"deviceKey":"two"`, `"payload":{"a":{"t":1},"b":[{"t":2},{"t":3}],"type":3}`, `"type":"t"`), status: 201},
		{name: "EscapedExactName", body: `{"source\u004bey":"s","deviceKey":"escaped","occurredAt":"2026-11-01T10:00:00Z"}`, status: 201},
		{name: "NamesDifferingInCaseInPayload", body: event(`"deviceKey":"case"`, `"payload":{"T":1,"t":2}`), status: 201},
		{name: "LargePayloadObject", body: event(`"deviceKey":"large"`, `"payload":{`+strings.Join(many, ",")+`}`), status: 201},
		{name: "BatchOfExactNames", path: "/v1/events:batch", body: batchOf(event(`"deviceKey":"b1"`), event(`"deviceKey":"b2"`, `"payload":{"t":1}`)), status: 200},
	})
}

// gzipped returns s compressed with gzip.
func gzipped(t *testing.T, s string) string {
	t.Helper()
	var buf bytes.Buffer
	zw := gzip.NewWriter(&buf)
	_, err := io.WriteString(zw, s)
	require.NoError(t, err)
	require.NoError(t, zw.Close())
	return buf.String()
}

// TestHostileHeaders: headers outboxd does not act on are refused, not
// ignored (issue 14, item 6). No content coding is decoded: 415 with
// Accept-Encoding: identity (RFC 9110 section 15.5.16); an Idempotency-Key
// header on a batch is a 400 that points at the per-item field.
func TestHostileHeaders(t *testing.T) {
	t.Parallel()
	runHostile(t, []hostileCase{
		{name: "GzipBody", body: gzipped(t, event()), header: []string{"Content-Encoding", "gzip"}, status: 415, detail: `"gzip"`},
		{name: "BrotliLabelOnPlainJSON", body: event(), header: []string{"Content-Encoding", "br"}, status: 415, detail: `"br"`},
		{name: "GzipLabelOnPlainJSON", body: event(), header: []string{"Content-Encoding", "GZIP"}, status: 415},
		{name: "IdentityThenGzip", body: event(), header: []string{"Content-Encoding", "identity, gzip"}, status: 415, detail: `"gzip"`},
		{name: "SecondHeaderLine", body: event(), header: []string{"Content-Encoding", "identity", "Content-Encoding", "deflate"}, status: 415},
		{name: "GzipOnABatch", path: "/v1/events:batch", body: gzipped(t, batchOf(event())), header: []string{"Content-Encoding", "gzip"}, status: 415},
		{name: "IdempotencyKeyOnABatch", path: "/v1/events:batch", body: batchOf(event()), header: []string{httpapi.IdempotencyKeyHeader, "batch-key"},
			status: 400, fields: []string{httpapi.IdempotencyKeyHeader}, detail: "events[i].idempotencyKey"},

		{name: "IdentityIsPlain", body: event(`"deviceKey":"identity"`), header: []string{"Content-Encoding", "Identity"}, status: 201},
		{name: "ItemKeysOnABatch", path: "/v1/events:batch", body: batchOf(event(`"idempotencyKey":"item-key"`)), status: 200},
	})

	// The 415 says which coding would do.
	b := setupHandler(t, nil)
	r := b.do(t, http.MethodPost, "/v1/events", event(), "Content-Encoding", "br")
	r.problem(t, http.StatusUnsupportedMediaType)
	require.Equal(t, "identity", r.header.Get("Accept-Encoding"))
	b.requireStored(t, 0)
}
