package outbox

import (
	"encoding/json"
	"reflect"
	"strings"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/outboxd/outboxd/internal/raceflag"
)

// sampleMessage is a message as ingest writes it.
func sampleMessage() Message {
	return Message{
		EventID: "65f1c0de00112233445566aa", IdempotencyKey: "order-17:line-3", SourceKey: "plant-4",
		DeviceKey: "press-12", OccurredAt: time.Date(2026, 12, 5, 10, 0, 0, 123e6, time.UTC),
		CreatedAt: time.Date(2026, 12, 5, 10, 0, 1, 0, time.UTC), Origin: OriginOutbox,
	}
}

// messageVariants returns messages that take both paths of the codec.
func messageVariants() map[string]Message {
	base := sampleMessage()
	with := func(f func(m *Message)) Message {
		m := base
		f(&m)
		return m
	}
	return map[string]Message{
		"AsIngestWritesIt": base,
		"Traced": with(func(m *Message) {
			m.TraceParent = "00-4bf92f3577b34da6a3ce929d0e0e4736-00f067aa0ba902b7-01"
			m.Origin = OriginReconciler
		}),
		"Nanoseconds":       with(func(m *Message) { m.OccurredAt = m.OccurredAt.Add(456789) }),
		"ZeroTimes":         with(func(m *Message) { m.OccurredAt, m.CreatedAt = time.Time{}, time.Time{} }),
		"Year9999":          with(func(m *Message) { m.OccurredAt = time.Date(9999, 12, 31, 23, 59, 59, 999999999, time.UTC) }),
		"ZeroOffsetNotUTC":  with(func(m *Message) { m.OccurredAt = m.OccurredAt.In(time.FixedZone("GMT", 0)) }),
		"Offset":            with(func(m *Message) { m.CreatedAt = m.CreatedAt.In(time.FixedZone("CET", 3600)) }),
		"Quote":             with(func(m *Message) { m.IdempotencyKey = `say "hi"` }),
		"Backslash":         with(func(m *Message) { m.SourceKey = `C:\plant` }),
		"HTMLBytes":         with(func(m *Message) { m.DeviceKey = "<a&b>" }),
		"Control":           with(func(m *Message) { m.DeviceKey = "a\tb\x01" }),
		"NonASCII":          with(func(m *Message) { m.SourceKey = "Köln–Süd\u2028" }),
		"InvalidUTF8":       with(func(m *Message) { m.SourceKey = "a\xffb" }),
		"Empty":             {},
		"OtherOriginString": with(func(m *Message) { m.Origin = "dlq-replay" }),
		"Typed":             with(func(m *Message) { m.Type = "order.placed" }),
		"TypedAndTraced":    with(func(m *Message) { m.Type, m.TraceParent = "t", "00-1-2-01" }),
		"WithPayload":       with(func(m *Message) { m.Type, m.Payload = "t", json.RawMessage(`{"a":"<b>","n":1}`) }),
		"PayloadByRef":      with(func(m *Message) { m.Type, m.PayloadRef = "t", true }),
		"ReadAfter":         with(func(m *Message) { m.ReadAfter = "1796464800.7" }),
		"TracedAndReadAfter": with(func(m *Message) {
			m.Type, m.TraceParent, m.ReadAfter = "t", "00-1-2-01", "1796464800.7"
		}),
		"ReadAfterNotPlain": with(func(m *Message) { m.ReadAfter = `a"b` }),
	}
}

// TestMessageCodecCoversEveryField: the direct codec writes and reads the
// fields below, in this order; a field added to Message must be added to
// it (encodeMessage, parseMessage and the key constants) and here, or the
// direct path would drop it.
func TestMessageCodecCoversEveryField(t *testing.T) {
	t.Parallel()
	var tags []string
	typ := reflect.TypeFor[Message]()
	for i := range typ.NumField() {
		tags = append(tags, typ.Field(i).Tag.Get("json"))
	}
	require.Equal(t, []string{"eventId", "idempotencyKey", "sourceKey", "deviceKey", "occurredAt", "createdAt",
		"origin", "type,omitempty", "payload,omitempty", "payloadRef,omitempty", "traceparent,omitempty", "readAfter,omitempty"}, tags)
}

// TestMessageEncodeIsEncodingJSON: Encode writes what encoding/json writes,
// directly for plain messages.
func TestMessageEncodeIsEncodingJSON(t *testing.T) {
	t.Parallel()
	direct := map[string]bool{"AsIngestWritesIt": true, "Traced": true, "Nanoseconds": true, "ZeroTimes": true,
		"Year9999": true, "ZeroOffsetNotUTC": true, "Empty": true, "OtherOriginString": true, "Typed": true, "TypedAndTraced": true,
		"ReadAfter": true, "TracedAndReadAfter": true}
	for name, m := range messageVariants() {
		t.Run(name, func(t *testing.T) {
			want, err := json.Marshal(m)
			require.NoError(t, err)
			require.Equal(t, string(want), m.Encode())
			_, ok := encodeMessage(m)
			require.Equal(t, direct[name], ok, "direct path")
		})
	}
}

// TestMessageDecodeIsEncodingJSON: decodeMessage reads what encoding/json
// reads, directly for what Encode writes of a plain message, and refuses
// what encoding/json refuses.
func TestMessageDecodeIsEncodingJSON(t *testing.T) {
	t.Parallel()
	for name, m := range messageVariants() {
		t.Run(name, func(t *testing.T) {
			raw := m.Encode()
			requireDecodesAsEncodingJSON(t, raw)
			// Any time encoding/json reads is read directly too (an offset
			// as well), so plain strings decide.
			direct := len(m.Payload) == 0 && !m.PayloadRef // a payload goes through encoding/json
			for _, s := range []string{m.EventID, m.IdempotencyKey, m.SourceKey, m.DeviceKey, string(m.Origin), m.Type, m.TraceParent, m.ReadAfter} {
				direct = direct && plain(s)
			}
			_, ok := parseMessage(raw)
			require.Equal(t, direct, ok, "direct path")
		})
	}
	raw := sampleMessage().Encode()
	others := map[string]string{
		"Reordered":        `{"sourceKey":"s","eventId":"65f1c0de00112233445566aa","deviceKey":"d","occurredAt":"2026-12-05T10:00:00Z","createdAt":"2026-12-05T10:00:00Z","idempotencyKey":"k","origin":"outbox"}`,
		"Spaces":           strings.ReplaceAll(raw, `":"`, `": "`),
		"TrailingSpace":    raw + " ",
		"Trailing":         raw + "x",
		"UnknownField":     strings.Replace(raw, `"}`, `","extra":"x"}`, 1),
		"Escaped":          strings.Replace(raw, "plant-4", `plant\u002d4`, 1),
		"HTMLBytesRaw":     strings.Replace(raw, "plant-4", "<p&4>", 1),
		"BadTime":          strings.Replace(raw, "2026-12-05T10:00:00.123Z", "2026-13-05T10:00:00Z", 1),
		"TimeOffset":       strings.Replace(raw, "2026-12-05T10:00:00.123Z", "2026-12-05T11:00:00.123+01:00", 1),
		"TimeLowerZ":       strings.Replace(raw, "2026-12-05T10:00:00.123Z", "2026-12-05t10:00:00.123z", 1),
		"TimeEscaped":      strings.Replace(raw, "2026-12-05T10:00:00.123Z", `2026-12-05T10:00:00.123\u005a`, 1),
		"Truncated":        raw[:len(raw)-2],
		"Unterminated":     raw[:40],
		"NotAnObject":      `"x"`,
		"EmptyTraceParent": strings.Replace(raw, `"}`, `","traceparent":""}`, 1),
		"NullTraceParent":  strings.Replace(raw, `"}`, `","traceparent":null}`, 1),
		"ReadAfterFirst":   strings.Replace(raw, `"}`, `","readAfter":"1.2","traceparent":"t"}`, 1),
		"EmptyReadAfter":   strings.Replace(raw, `"}`, `","readAfter":""}`, 1),
		"NumberReadAfter":  strings.Replace(raw, `"}`, `","readAfter":12}`, 1),
		"ControlByte":      strings.Replace(raw, "plant-4", "plant\x01", 1),
		"NonASCII":         strings.Replace(raw, "plant-4", "Köln", 1),
		"InvalidUTF8":      strings.Replace(raw, "plant-4", "a\xffb", 1),
		"Empty":            "",
	}
	for name, raw := range others {
		t.Run(name, func(t *testing.T) {
			requireDecodesAsEncodingJSON(t, raw)
		})
	}
}

// requireDecodesAsEncodingJSON fails unless decodeMessage and
// json.Unmarshal agree on raw: both refuse it, or both read the same
// message; what parseMessage reads directly is encoding/json's too.
func requireDecodesAsEncodingJSON(t testing.TB, raw string) {
	t.Helper()
	var want Message
	wantErr := json.Unmarshal([]byte(raw), &want)
	got, err := decodeMessage(raw)
	if wantErr != nil {
		require.Error(t, err, "encoding/json refuses %q", raw)
		_, ok := parseMessage(raw)
		require.False(t, ok, "read directly although encoding/json refuses %q", raw)
		return
	}
	require.NoError(t, err, "encoding/json reads %q", raw)
	require.Equal(t, want, got, "%q", raw)
	if direct, ok := parseMessage(raw); ok {
		require.Equal(t, want, direct, "%q", raw)
	}
}

// TestMessageReadAfterRoundTrip: a message carries ReadAfter through
// Encode and DecodeMessage, writes the key only when it is set, and a
// message written before it was carried decodes with none; WithRelay sets
// it (and the traceparent) on an entry's message and leaves the rest as
// ingest wrote it.
func TestMessageReadAfterRoundTrip(t *testing.T) {
	t.Parallel()
	m := sampleMessage()
	m.ReadAfter = "1796464800.7"
	got, err := DecodeMessage(m.Values())
	require.NoError(t, err)
	require.Equal(t, m, got)
	require.Contains(t, m.Encode(), `"readAfter":"1796464800.7"`)

	old := sampleMessage()
	require.NotContains(t, old.Encode(), "readAfter", "written only when set")
	got, err = DecodeMessage(old.Values())
	require.NoError(t, err)
	require.Empty(t, got.ReadAfter)
	require.Equal(t, old, got)

	ingest := sampleMessage().Encode()
	require.Equal(t, ingest, WithRelay(ingest, "", ""), "nothing to add")
	for name, c := range map[string]struct{ tp, after string }{
		"ReadAfter": {"", "1796464800.7"}, "TraceParent": {"00-1-2-01", ""}, "Both": {"00-1-2-01", "1796464800.7"},
	} {
		t.Run(name, func(t *testing.T) {
			got, err := decodeMessage(WithRelay(ingest, c.tp, c.after))
			require.NoError(t, err)
			want := sampleMessage()
			want.TraceParent, want.ReadAfter = c.tp, c.after
			require.Equal(t, want, got)
		})
	}
	require.Equal(t, "not json", WithRelay("not json", "00-1-2-01", "1.2"), "not a message: as it is")
}

// FuzzMessageEncode: for any strings and times, Encode is encoding/json's
// bytes, and the direct path is taken only where encoding/json would not
// fail.
func FuzzMessageEncode(f *testing.F) {
	for _, m := range messageVariants() {
		_, offset := m.CreatedAt.Zone()
		f.Add(m.EventID, m.IdempotencyKey, m.SourceKey, m.DeviceKey, string(m.Origin), m.Type, m.TraceParent, m.ReadAfter,
			m.OccurredAt.UnixNano(), m.CreatedAt.UnixNano(), offset)
	}
	f.Add("a", "b", "c", "d", "e", "t", "f", "r", int64(-62167219200000000), int64(1)<<62, -3600)
	f.Fuzz(func(t *testing.T, id, key, src, dev, origin, typ, tp, after string, occurred, created int64, offset int) {
		zone := time.FixedZone("z", offset%(48*3600))
		m := Message{EventID: id, IdempotencyKey: key, SourceKey: src, DeviceKey: dev, Origin: Origin(origin), Type: typ,
			TraceParent: tp, ReadAfter: after, OccurredAt: time.Unix(0, occurred).UTC(), CreatedAt: time.Unix(0, created).In(zone)}
		want, err := json.Marshal(m)
		if err != nil {
			_, ok := encodeMessage(m)
			require.False(t, ok, "direct path for a message encoding/json refuses: %v", err)
			return
		}
		require.Equal(t, string(want), m.Encode())
		requireDecodesAsEncodingJSON(t, string(want))
	})
}

// FuzzMessageDecode: for any input, decodeMessage agrees with
// encoding/json.
func FuzzMessageDecode(f *testing.F) {
	for _, m := range messageVariants() {
		f.Add(m.Encode())
	}
	f.Add(`{"eventId":"x","idempotencyKey":"k","sourceKey":"s","deviceKey":"d","occurredAt":"2026-12-05T10:00:00Z","createdAt":"0000-01-01T00:00:00.5Z","origin":"o","traceparent":"t"}`)
	f.Add(`{"eventId":"x","idempotencyKey":"k","sourceKey":"s","deviceKey":"d","occurredAt":"2026-02-30T10:00:00Z","createdAt":"2026-12-05T24:00:00Z","origin":"o"}`)
	f.Fuzz(func(t *testing.T, raw string) {
		requireDecodesAsEncodingJSON(t, raw)
	})
}

// TestMessageCodecAllocations: Encode allocates the string it returns, and
// DecodeMessage nothing (the strings share the payload's memory).
func TestMessageCodecAllocations(t *testing.T) {
	if raceflag.Enabled {
		t.Skip("the race detector allocates too")
	}
	m := sampleMessage()
	m.TraceParent = "00-4bf92f3577b34da6a3ce929d0e0e4736-00f067aa0ba902b7-01"
	require.Equal(t, 1.0, testing.AllocsPerRun(100, func() { _ = m.Encode() }), "Encode")
	values := m.Values()
	var err error
	require.Zero(t, testing.AllocsPerRun(100, func() { _, err = DecodeMessage(values) }), "DecodeMessage")
	require.NoError(t, err)
}

// BenchmarkMessage compares the codec with encoding/json on a message as
// ingest writes it: go test -run ^$ -bench Message ./outbox.
func BenchmarkMessage(b *testing.B) {
	m := sampleMessage()
	raw := m.Encode()
	values := m.Values()
	b.Run("Encode", func(b *testing.B) {
		b.ReportAllocs()
		for b.Loop() {
			_ = m.Encode()
		}
	})
	b.Run("EncodeEncodingJSON", func(b *testing.B) {
		b.ReportAllocs()
		for b.Loop() {
			_, _ = json.Marshal(m)
		}
	})
	b.Run("Decode", func(b *testing.B) {
		b.ReportAllocs()
		for b.Loop() {
			_, _ = DecodeMessage(values)
		}
	})
	b.Run("DecodeEncodingJSON", func(b *testing.B) {
		b.ReportAllocs()
		for b.Loop() {
			var got Message
			_ = json.Unmarshal([]byte(raw), &got)
		}
	})
}

// TestDraftMessage: the message record joins from an input's draft and the
// transaction's time is, byte for byte, the one Encode writes for the
// original record returns, on both paths of the codec and with the payload
// carried or referred to; a redrawn record has a new id.
func TestDraftMessage(t *testing.T) {
	t.Parallel()
	now := time.Date(2026, 12, 6, 18, 0, 0, 120e6, time.UTC)
	inputs := []Input{
		{SourceKey: "plant-4", DeviceKey: "press-12", OccurredAt: "2026-12-05T10:00:00.123Z", Payload: json.RawMessage(`{"t":21.5}`)},
		{SourceKey: "Zürich <north>", DeviceKey: `a "quoted" & key`, Type: "reading", OccurredAt: "2026-12-05T10:00:00Z",
			IdempotencyKey: `k"createdAt":"0001-01-01T00:00:00.000000001Z"`, Payload: json.RawMessage(`{"createdAt":"0001-01-01T00:00:00.000000001Z"}`)},
		{SourceKey: "s", DeviceKey: "d", Client: "acme", OccurredAt: "2026-12-05T10:00:00.5Z", Payload: json.RawMessage(`{"big":"` + strings.Repeat("x", 100) + `"}`)},
	}
	for name, opts := range map[string]*MessageOptions{"Default": nil, "Payload": {Payload: true}, "PayloadRef": {Payload: true, PayloadMax: 64}} {
		t.Run(name, func(t *testing.T) {
			t.Parallel()
			w := NewWriter(nil, &WriterConfig{Message: opts, Partitions: 4, Routes: Routes{"reading": "readings"}})
			prep, err := w.prepareAll(inputs, true)
			require.NoError(t, err)
			for i, p := range prep {
				for _, redraw := range []bool{false, true} {
					ev, entry := w.record(p, now, "", redraw)
					require.Equal(t, ev.MessageWith(OriginOutbox, opts).Encode(), entry.Message, "input %d, redraw %v", i, redraw)
					require.Equal(t, ev.ID, entry.EventID)
					require.Equal(t, redraw, ev.ID != p.draft.id, "input %d: the draft's id unless redrawn", i)
					require.Equal(t, w.StreamOf(ev.Type), entry.Stream)
					require.Equal(t, PartitionOf(ev.SourceKey, ev.DeviceKey, 4), entry.Partition)
					require.True(t, now.Equal(ev.CreatedAt) && now.Equal(entry.CreatedAt))
				}
			}
			prep, err = w.prepareAll(inputs, false)
			require.NoError(t, err)
			require.Empty(t, prep[0].draft.id, "a validation makes no draft")
		})
	}
}
