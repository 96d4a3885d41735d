package httpapi

import (
	"bytes"
	"encoding/json"
	"errors"
	"reflect"
	"testing"
	"time"

	"github.com/outboxd/outboxd/outbox"
)

// fuzzBatchMax keeps the batch limit small enough for the fuzzer to cross.
const fuzzBatchMax = 4

// decodeRequest is what the handler runs on a body before writing anything.
func decodeRequest(w *outbox.Writer, body []byte, key string, batch bool) ([]outbox.Input, error) {
	var inputs []outbox.Input
	var err error
	if batch {
		inputs, _, err = decodeBatch(w, body, fuzzBatchMax, decodeOptions{})
	} else {
		inputs, _, err = decodeEvent(w, body, key, decodeOptions{})
	}
	return inputs, err
}

// encodeRequest is the body that carries inputs.
func encodeRequest(t *testing.T, inputs []outbox.Input, batch bool) []byte {
	t.Helper()
	var v any = inputs[0]
	if batch {
		v = map[string]any{"events": inputs}
	}
	b, err := json.Marshal(v)
	if err != nil {
		t.Fatalf("error encoding accepted inputs: %v", err)
	}
	return b
}

// FuzzDecodeEvent checks request decoding and validation: it never panics,
// every refusal is a 400 (*requestError) or a 422 (*validationError naming a
// field), the member-name check and encoding/json agree on what is JSON, and
// an accepted body passes Writer.Validate and survives re-encoding
// unchanged, as the same event (key and content hash).
func FuzzDecodeEvent(f *testing.F) {
	for _, s := range []struct {
		body  string
		key   string
		batch bool
	}{
		{`{"sourceKey":"src","deviceKey":"d1","occurredAt":"2026-11-01T10:00:00.123Z","payload":{"t":21.5,"n":3}}`, "", false},
		{`{"sourceKey":"src","deviceKey":"d1","occurredAt":"2026-11-01T10:00:00+02:00","type":"temp"}`, "client-key", false},
		{`{"idempotencyKey":"a","sourceKey":"s","deviceKey":"d","occurredAt":"2026-11-01T10:00:00Z"}`, "b", false},
		{`{"sourceKey":"s","deviceKey":"d","occurredAt":"2026-11-01T10:00:00Z","payload":null}`, "", false},
		{`{"sourceKey":"s","deviceKey":"d","occurredAt":"2026-11-01T10:00:00Z","payload":{"big":1e400}}`, "", false},
		{`{"sourceKey":"s","deviceKey":"d","occurredAt":"2026-11-01T10:00:00Z","payload":{"a":{"b":[1,2,{"c":"\ud800<>&"}]}}}`, "", false},
		{`{"SOURCEKEY":"s","deviceKey":"d","occurredAt":"2026-11-01T10:00:00Z","sourceKey":"t"}`, "", false},
		{"{\"sourceKey\":\"s\xff\",\"deviceKey\":\"d\",\"occurredAt\":\"2026-11-01T10:00:00Z\"}", "", false},
		{`{"sourceKey":"s","deviceKey":"d","occurredAt":"2026-11-01T10:00:00Z"} {}`, "", false},
		{`{"sourceKey":"s","deviceKey":"d","occurredAt":"2026-11-01T10:00:00Z","x":1}`, "", false},
		{`{"sourceKey":5}`, "", false},
		{`null`, "", false},
		{`{"events":[{"sourceKey":"s","deviceKey":"d1","occurredAt":"2026-11-01T10:00:00Z"},{"idempotencyKey":"k","sourceKey":"s","deviceKey":"d2","occurredAt":"2026-11-01T10:00:00Z","payload":{"v":[true,null]}}]}`, "", true},
		{`{"events":[null,7,{"sourceKey":"s"}]}`, "", true},
		{`{"events":[]}`, "", true},
		{`{"events":[{},{},{},{},{}]}`, "", true},
		{`{"events":{"sourceKey":"s"}}`, "", true},
		{`{"sourceKey":"s","deviceKey":"d","occurredAt":"2026-11-01T10:00:00Z","sourceKey":"s"}`, "", false},
		{`{"sourceKey":"s","deviceKey":"d","occurredAt":"2026-11-01T10:00:00Z","device\u004bey":"e"}`, "", false},
		{`{"source\u212aey":"s","deviceKey":"d","occurredAt":"2026-11-01T10:00:00Z"}`, "", false},
		{`{"sourceKey":"s","deviceKey":"d","occurredAt":"2026-11-01T10:00:00Z","payload":{"a":[{"b":1,"b":2}],"A":1}}`, "", false},
		{`{"sourceKey":"s","deviceKey":"d","occurredAt":"2026-11-01T10:00:00Z","payload":{"\u0061":1,"b":-0.5e-3}}`, "", false},
		{`{"events":[{"sourceKey":"s","deviceKey":"d","occurredAt":"2026-11-01T10:00:00Z","Type":"t"}],"events":[]}`, "", true},
		{`{"events":[{"sourceKey":"s","deviceKey":"d","occurredAt":"2026-11-01T10:00:00Z"},{"sourceKey":"s","sourceKey":"t"}]}`, "", true},
	} {
		f.Add([]byte(s.body), s.key, s.batch)
	}
	w := outbox.NewWriter(nil, &outbox.WriterConfig{Now: func() time.Time { return time.Date(2026, 11, 2, 0, 0, 0, 0, time.UTC) }})

	f.Fuzz(func(t *testing.T, body []byte, key string, batch bool) {
		if isObject(body) {
			// The name check reads the first value as encoding/json does.
			var raw json.RawMessage
			jsonErr := json.NewDecoder(bytes.NewReader(body)).Decode(&raw)
			for _, sh := range []shape{shapeEvent, shapeBatch} {
				switch err := checkNames(body, sh); {
				case errors.Is(err, errSyntax) && jsonErr == nil:
					t.Fatalf("the name check refuses JSON that encoding/json reads: %q", body)
				case err == nil && jsonErr != nil:
					t.Fatalf("the name check reads what encoding/json refuses (%v): %q", jsonErr, body)
				}
			}
		}
		inputs, err := decodeRequest(w, body, key, batch)
		if err != nil {
			var (
				re *requestError
				ve *validationError
			)
			switch {
			case errors.As(err, &re):
				if re.detail == "" {
					t.Fatalf("400 without detail: %#v", re)
				}
			case errors.As(err, &ve):
				if len(ve.Fields) == 0 {
					t.Fatal("422 naming no field")
				}
				for _, fe := range ve.Fields {
					if fe.Field == "" || fe.Reason == "" {
						t.Fatalf("422 with an unnamed field: %#v", fe)
					}
				}
			default:
				t.Fatalf("unclassified error %T: %v", err, err)
			}
			return
		}
		if len(inputs) == 0 || (!batch && len(inputs) != 1) || len(inputs) > fuzzBatchMax {
			t.Fatalf("accepted %d inputs (batch %v)", len(inputs), batch)
		}
		// The one-pass decoder reads what encoding/json reads.
		var want []outbox.Input
		if batch {
			var req struct{ Events []outbox.Input }
			if err := json.Unmarshal(body, &req); err != nil {
				t.Fatalf("accepted a batch encoding/json refuses: %v", err)
			}
			want = req.Events
		} else {
			var in outbox.Input
			if err := json.Unmarshal(body, &in); err != nil {
				t.Fatalf("accepted an event encoding/json refuses: %v", err)
			}
			if key != "" {
				in.IdempotencyKey = key
			}
			want = []outbox.Input{in}
		}
		for i := range want {
			got, w := inputs[i], want[i]
			if !bytes.Equal(bytes.TrimSpace(got.Payload), bytes.TrimSpace(w.Payload)) {
				t.Fatalf("payload %d read as %q, encoding/json reads %q", i, got.Payload, w.Payload)
			}
			got.Payload, w.Payload = nil, nil
			if !reflect.DeepEqual(got, w) {
				t.Fatalf("event %d read as %+v, encoding/json reads %+v", i, got, w)
			}
		}
		if err := w.Validate(inputs); err != nil {
			t.Fatalf("accepted body fails Writer.Validate: %v", err)
		}

		enc := encodeRequest(t, inputs, batch)
		again, err := decodeRequest(w, enc, "", batch)
		if err != nil {
			t.Fatalf("re-encoded body refused: %v\n%s", err, enc)
		}
		if enc2 := encodeRequest(t, again, batch); !bytes.Equal(enc, enc2) {
			t.Fatalf("re-encoding is not stable:\n%s\n%s", enc, enc2)
		}
		first, err := w.Prepare(inputs)
		if err != nil {
			t.Fatal(err)
		}
		second, err := w.Prepare(again)
		if err != nil {
			t.Fatal(err)
		}
		for i := range first.Len() {
			if first.Key(i) != second.Key(i) || first.ContentHash(i) != second.ContentHash(i) {
				t.Fatalf("input %d changed identity after re-encoding: %s/%s vs %s/%s", i, first.Key(i), first.ContentHash(i), second.Key(i), second.ContentHash(i))
			}
		}
	})
}
