package httpapi_test

import (
	"bytes"
	"compress/gzip"
	"context"
	"fmt"
	"io"
	"net/http"
	"strconv"
	"strings"
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/outboxd/outboxd/internal/httpapi"
	"github.com/outboxd/outboxd/outbox"
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
// the values outboxd stores. 400 names the member.
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
// ignored. No content coding is decoded: 415 with
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

// TestHostileKeys: a client cannot take the key the server derives for
// someone else's keyless event, and a batch whose items
// share a key with different content names both items, not an id that was
// never stored (item 3).
func TestHostileKeys(t *testing.T) {
	t.Parallel()

	t.Run("DerivedKeyPrefixIsReserved", func(t *testing.T) {
		t.Parallel()
		b := setupHandler(t, nil)
		victim := event(`"deviceKey":"victim"`, `"payload":{"t":1}`)
		occurredAt, err := outbox.ParseTime("2026-11-01T10:00:00Z")
		require.NoError(t, err)
		derived := outbox.DeriveKey("s", "victim", occurredAt)
		intruder := event(`"deviceKey":"intruder"`, `"payload":{"t":666}`)
		for _, tc := range []struct {
			name, path, body string
			header           []string
			field            string
		}{
			{"Header", "/v1/events", intruder, []string{httpapi.IdempotencyKeyHeader, derived}, httpapi.IdempotencyKeyHeader},
			{"HeaderWithSpaces", "/v1/events", intruder, []string{httpapi.IdempotencyKeyHeader, "  " + derived}, httpapi.IdempotencyKeyHeader},
			{"HeaderAndBody", "/v1/events", event(`"idempotencyKey":"`+derived+`"`, `"deviceKey":"intruder"`), []string{httpapi.IdempotencyKeyHeader, derived}, httpapi.IdempotencyKeyHeader},
			{"Body", "/v1/events", event(`"idempotencyKey":"`+derived+`"`, `"deviceKey":"intruder"`), nil, "idempotencyKey"},
			{"BatchItem", "/v1/events:batch", batchOf(event(`"idempotencyKey":"`+derived+`"`, `"deviceKey":"intruder"`)), nil, "events[0].idempotencyKey"},
			{"SecondBatchItem", "/v1/events:batch", batchOf(event(`"deviceKey":"other"`), event(`"idempotencyKey":"derived:x"`)), nil, "events[1].idempotencyKey"},
		} {
			t.Run(tc.name, func(t *testing.T) {
				p := b.do(t, http.MethodPost, tc.path, tc.body, tc.header...).problem(t, http.StatusUnprocessableEntity)
				require.Equal(t, []string{tc.field}, fields(p))
				require.Contains(t, p.Errors[0].Reason, `"derived:"`)
				b.requireStored(t, 0)
			})
		}
		// The victim's keyless event is stored, and its retry is a duplicate.
		r := b.do(t, http.MethodPost, "/v1/events", victim)
		require.Equal(t, http.StatusCreated, r.status, "body: %s", r.body)
		require.Equal(t, derived, r.json(t)["idempotencyKey"])
		again := b.do(t, http.MethodPost, "/v1/events", victim)
		require.Equal(t, http.StatusOK, again.status, "body: %s", again.body)
		require.Equal(t, r.json(t)["id"], again.json(t)["id"])
		b.requireStored(t, 1)
	})

	t.Run("ConflictInsideABatchNamesBothItems", func(t *testing.T) {
		t.Parallel()
		b := setupHandler(t, nil)
		for _, tc := range []struct {
			name  string
			items []string
			first int
			other int
		}{
			{"SameKey", []string{event(`"idempotencyKey":"k"`, `"payload":{"t":1}`), event(`"idempotencyKey":"k"`, `"payload":{"t":2}`)}, 0, 1},
			{"SameDerivedKey", []string{event(`"deviceKey":"x"`), event(`"deviceKey":"y"`), event(`"deviceKey":"x"`, `"type":"other"`)}, 0, 2},
			{"AfterADuplicate", []string{event(`"idempotencyKey":"k2"`), event(`"idempotencyKey":"k2"`), event(`"idempotencyKey":"k2"`, `"payload":{"t":3}`)}, 0, 2},
		} {
			t.Run(tc.name, func(t *testing.T) {
				p := b.do(t, http.MethodPost, "/v1/events:batch", batchOf(tc.items...)).problem(t, http.StatusUnprocessableEntity)
				require.Equal(t, httpapi.ProblemMismatch, p.Type)
				require.Equal(t, []string{fmt.Sprintf("events[%d].idempotencyKey", tc.other)}, fields(p))
				require.Contains(t, p.Detail, fmt.Sprintf("events[%d] and events[%d]", tc.first, tc.other))
				require.Contains(t, p.Errors[0].Reason, fmt.Sprintf("events[%d]", tc.first))
				require.NotRegexp(t, `[0-9a-f]{24}`, p.Detail, "no id of an event that was never stored")
				b.requireStored(t, 0)
			})
		}
		// A conflict with a stored original does not name it: its id is not
		// the caller's to learn.
		stored := b.do(t, http.MethodPost, "/v1/events", event(`"idempotencyKey":"kept"`))
		require.Equal(t, http.StatusCreated, stored.status)
		id := stored.json(t)["id"].(string)
		p := b.do(t, http.MethodPost, "/v1/events:batch", batchOf(event(`"deviceKey":"z"`), event(`"idempotencyKey":"kept"`, `"payload":{"t":9}`))).problem(t, http.StatusUnprocessableEntity)
		require.Equal(t, []string{"events[1].idempotencyKey"}, fields(p))
		require.NotContains(t, p.Detail, id)
		b.requireStored(t, 1)
	})
}

// TestHostileInputRules: the documented input rules hold at the API (issue
// 14, item 4): keys are printable, occurredAt follows RFC 3339 section 5.6
// in both directions, the depth limit counts objects and arrays only, a
// NUL in a payload string is refused, and so is a number PostgreSQL's
// numeric cannot hold (the read model's jsonb would refuse it); 422 names
// the field.
func TestHostileInputRules(t *testing.T) {
	t.Parallel()
	nested := func(n int, leaf string) string {
		return strings.Repeat(`{"a":`, n-1) + leaf + strings.Repeat(`}`, n-1)
	}
	at := func(v string) string { return `"occurredAt":"` + v + `"` }
	runHostile(t, []hostileCase{
		{name: "WhitespaceOnlyKey", body: event(`"sourceKey":"   "`), status: 422, fields: []string{"sourceKey"}},
		{name: "BidiOverrideInKey", body: event(`"deviceKey":"a\u202eb"`), status: 422, fields: []string{"deviceKey"}, detail: "U+202E"},
		{name: "ZeroWidthInKey", body: event(`"deviceKey":"a\u200bb"`), status: 422, fields: []string{"deviceKey"}},
		{name: "PrivateUseInType", body: event(`"type":"\ue000"`), status: 422, fields: []string{"type"}},
		{name: "NoBreakSpaceInHeaderKey", body: event(), header: []string{httpapi.IdempotencyKeyHeader, "a\u00a0b"}, status: 422, fields: []string{httpapi.IdempotencyKeyHeader}},
		{name: "OffsetOf24Hours", body: event(at("2026-11-01T10:00:00+24:00")), status: 422, fields: []string{"occurredAt"}, detail: "offset"},
		{name: "OffsetOf60Minutes", body: event(at("2026-11-01T10:00:00+01:60")), status: 422, fields: []string{"occurredAt"}},
		{name: "LeapSecondNotAtMidnightUTC", body: event(at("2026-11-01T10:00:60Z")), status: 422, fields: []string{"occurredAt"}},
		{name: "NoSuchDay", body: event(at("2026-02-29T10:00:00Z")), status: 422, fields: []string{"occurredAt"}},
		{name: "SpaceForT", body: event(at("2026-11-01 10:00:00Z")), status: 422, fields: []string{"occurredAt"}},
		{name: "OneDigitMonth", body: event(at("2026-1-01T10:00:00Z")), status: 422, fields: []string{"occurredAt"}},
		{name: "ThirtyThreeLevels", body: event(`"payload":` + nested(33, `{"x":1}`)), status: 422, fields: []string{"payload" + strings.Repeat(".a", 32)}},
		{name: "NulInPayloadString", body: event(`"payload":{"note":"a\u0000b"}`), status: 422, fields: []string{"payload.note"}, detail: "NUL"},
		{name: "NulInBatchPayload", path: "/v1/events:batch", body: batchOf(event(`"deviceKey":"n1"`), event(`"payload":{"l":["x\u0000"]}`)), status: 422, fields: []string{"events[1].payload.l[0]"}},
		{name: "NumberBeyondNumeric", body: event(`"payload":{"a":[1,{"n":1e-20000}]}`), status: 422, fields: []string{"payload.a[1].n"}},
		{name: "NumberUnderflowingAFloat", body: event(`"payload":{"n":1e-16383}`), status: 422, fields: []string{"payload.n"}},
		{name: "BatchNumberBeyondNumeric", path: "/v1/events:batch", body: batchOf(event(`"deviceKey":"p1"`), event(`"payload":{"n":1.0e-16383}`)), status: 422, fields: []string{"events[1].payload.n"}},

		{name: "LowerCaseTAndZ", body: event(`"deviceKey":"lower"`, at("2026-11-01t10:00:00z")), status: 201},
		{name: "UnknownLocalOffset", body: event(`"deviceKey":"minus-zero"`, at("2026-11-01T10:00:00-00:00")), status: 201},
		{name: "OffsetOf23Hours59", body: event(`"deviceKey":"offset"`, at("2026-11-01T10:00:00+23:59")), status: 201},
		{name: "LongFraction", body: event(`"deviceKey":"fraction"`, at("2026-11-01T10:00:00.123456789123Z")), status: 201},
		{name: "LeapSecond", body: event(`"deviceKey":"leap"`, at("2016-12-31T23:59:60Z")), status: 201},
		{name: "LeapSecondWithOffset", body: event(`"deviceKey":"leap-offset"`, at("2017-01-01T00:59:60+01:00")), status: 201},
		{name: "ThirtyTwoLevelsScalarLeaf", body: event(`"deviceKey":"deep1"`, `"payload":`+nested(32, `{"x":1}`)), status: 201},
		{name: "ThirtyTwoLevelsStringLeaf", body: event(`"deviceKey":"deep2"`, `"payload":`+nested(32, `{"x":"s"}`)), status: 201},
		{name: "ZeroAtTheSmallestNumericScale", body: event(`"deviceKey":"zero-scale"`, `"payload":{"z":0e-16383}`), status: 201},
		{name: "PrintableKeys", body: event(`"sourceKey":"Gerät 7 / Halle ü"`, `"deviceKey":"センサー"`), status: 201},
	})
}

// TestMaxValues: a body with more JSON values than Config.MaxValues (the
// payload's, the event's own members and the batch's array counted) is
// answered 413 naming the bound, and nothing is stored; one at the bound
// goes in.
func TestMaxValues(t *testing.T) {
	t.Parallel()
	b := setupHandler(t, &httpapi.Config{MaxValues: 20})
	payload := func(n int) string {
		return `{"sourceKey":"s","deviceKey":"d` + strconv.Itoa(n) + `","occurredAt":"2026-11-01T10:00:00Z","payload":{"a":[` +
			strings.TrimSuffix(strings.Repeat("1,", n), ",") + `]}}`
	}
	// The event object, its 3 strings, the payload object and its array:
	// 6 values besides the array's n.
	r := b.do(t, http.MethodPost, "/v1/events", payload(15))
	p := r.problem(t, http.StatusRequestEntityTooLarge)
	require.Contains(t, p.Detail, "20 JSON values")
	require.Contains(t, p.Detail, "max-values")
	r = b.do(t, http.MethodPost, "/v1/events:batch", `{"events":[`+payload(1)+`,`+payload(2)+`,`+payload(3)+`]}`)
	r.problem(t, http.StatusRequestEntityTooLarge)
	b.requireStored(t, 0)
	require.Equal(t, http.StatusCreated, b.do(t, http.MethodPost, "/v1/events", payload(14)).status)
	b.requireStored(t, 1)
}
