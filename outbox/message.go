package outbox

import (
	"encoding/json"
	"errors"
	"fmt"
	"strings"
	"time"
)

// Message is the JSON carried in a stream entry's payload field. Workers
// always re-read the original; the message names it, with its type, and
// (MessageOptions.Payload) its payload, so that a consumer in any language
// can use the stream without the store.
type Message struct {
	EventID        string    `json:"eventId"`
	IdempotencyKey string    `json:"idempotencyKey"`
	SourceKey      string    `json:"sourceKey"`
	DeviceKey      string    `json:"deviceKey"`
	OccurredAt     time.Time `json:"occurredAt"`
	CreatedAt      time.Time `json:"createdAt"`
	Origin         Origin    `json:"origin"`
	// Type is the original's type. Messages written before it was carried
	// have none.
	Type string `json:"type,omitempty"`
	// Payload is the original's payload when the message carries it
	// (MessageOptions.Payload) and it is at most MessageOptions.PayloadMax
	// bytes; PayloadRef is set instead when it is larger: a consumer
	// fetches the original (GET /v1/events/{id}).
	Payload    json.RawMessage `json:"payload,omitempty"`
	PayloadRef bool            `json:"payloadRef,omitempty"`
	// TraceParent is the W3C traceparent of the span that put the message
	// into the stream (the dispatcher's relay, the reconciler's or a
	// replay's publish); the worker's span continues it. Absent when that
	// was not traced: the message is handled the same.
	TraceParent string `json:"traceparent,omitempty"`
	// ReadAfter is the store's position of the commit that wrote the
	// message's outbox entry, as the dispatcher's feed saw it (MongoDB: the
	// change event's cluster time), opaque to everyone but the store: the
	// worker hands it back with its read of the original
	// (store.WithReadAfter), so that the read sees that commit. Absent
	// when the entry did not come through a feed that knows one (a
	// catch-up, SQLite, the reconciler, a replay) and in messages written
	// before it was carried: the worker reads as before.
	ReadAfter string `json:"readAfter,omitempty"`
}

// WithTraceParent returns the message JSON msg (an Entry's Message) with
// its TraceParent set to traceParent. A msg that is not a message is
// returned as it is (the worker dead-letters it as before).
func WithTraceParent(msg, traceParent string) string {
	m, err := decodeMessage(msg)
	if err != nil {
		return msg
	}
	m.TraceParent = traceParent
	return m.Encode()
}

// WithRelay returns the message JSON msg (an Entry's Message) with what the
// dispatcher's relay adds to it: TraceParent set to traceParent and
// ReadAfter to readAfter (an Entry's ReadAfter), each only when it is not
// empty. msg is returned as it is when both are empty, and when it is not
// a message (the worker dead-letters it as before).
func WithRelay(msg, traceParent, readAfter string) string {
	if traceParent == "" && readAfter == "" {
		return msg
	}
	m, err := decodeMessage(msg)
	if err != nil {
		return msg
	}
	if traceParent != "" {
		m.TraceParent = traceParent
	}
	if readAfter != "" {
		m.ReadAfter = readAfter
	}
	return m.Encode()
}

// ErrBadMessage is wrapped by DecodeMessage errors.
var ErrBadMessage = errors.New("bad stream message")

// ErrTrimmed is wrapped by DecodeMessage when the entry has no data at all:
// the stream was trimmed (or the entry deleted) while it was pending.
var ErrTrimmed = errors.New("stream entry trimmed while pending")

// Encode returns the message JSON, byte for byte what encoding/json
// writes for m.
func (m Message) Encode() string {
	if s, ok := encodeMessage(m); ok {
		return s
	}
	b, err := json.Marshal(m)
	if err != nil { // only plain strings and times: cannot fail
		panic(err)
	}
	return string(b)
}

// Values returns the stream entry fields for XADD.
func (m Message) Values() map[string]any {
	return map[string]any{PayloadField: m.Encode()}
}

// DecodeMessage reads a stream entry's fields. A nil map (an entry trimmed
// while pending) yields an error wrapping ErrTrimmed and ErrBadMessage; a
// malformed payload one wrapping ErrBadMessage.
func DecodeMessage(values map[string]any) (Message, error) {
	var m Message
	if values == nil {
		return m, fmt.Errorf("%w: %w", ErrBadMessage, ErrTrimmed)
	}
	raw, ok := values[PayloadField].(string)
	if !ok {
		return m, fmt.Errorf("%w: no %q field", ErrBadMessage, PayloadField)
	}
	m, err := decodeMessage(raw)
	if err != nil {
		return m, fmt.Errorf("%w: %w", ErrBadMessage, err)
	}
	if !IsEventID(m.EventID) {
		return m, fmt.Errorf("%w: eventId %q is not an ObjectID", ErrBadMessage, m.EventID)
	}
	return m, nil
}

// A stream message is encoded and decoded once per event on the hot paths
// (ingest's transaction writes it, every worker reads it), where
// encoding/json's reflection cost 6% of the time ingest holds the SQLite
// writer and 15% of a worker's CPU. The message is a fixed record of plain
// strings and two UTC times, so both directions have a direct path for the
// form Encode writes and fall back to encoding/json for anything else: the
// bytes and the values are encoding/json's in every case
// (FuzzMessageEncode, FuzzMessageDecode).

// The message's JSON keys, in the order of its fields (encoding/json's
// order), each with the separator before it.
const (
	keyEventID        = `{"eventId":"`
	keyIdempotencyKey = `","idempotencyKey":"`
	keySourceKey      = `","sourceKey":"`
	keyDeviceKey      = `","deviceKey":"`
	keyOccurredAt     = `","occurredAt":"`
	keyCreatedAt      = `","createdAt":"`
	keyOrigin         = `","origin":"`
	keyType           = `","type":"`
	keyTraceParent    = `","traceparent":"`
	keyReadAfter      = `","readAfter":"`
	messageEnd        = `"}`
)

// plainByte reports whether encoding/json writes c as it is in a string
// (printable ASCII other than the quote, the backslash and the three bytes
// it escapes for HTML) and reads it back as it is.
func plainByte(c byte) bool {
	return c >= 0x20 && c < 0x7f && c != '"' && c != '\\' && c != '<' && c != '>' && c != '&'
}

// plain reports whether every byte of s is plainByte.
func plain(s string) bool {
	for i := 0; i < len(s); i++ {
		if !plainByte(s[i]) {
			return false
		}
	}
	return true
}

// plainTime reports whether encoding/json writes t as t.AppendFormat with
// RFC3339Nano writes it: a four-digit year and a zero offset ("Z").
func plainTime(t time.Time) bool {
	_, offset := t.Zone()
	year := t.Year()
	return offset == 0 && year >= 0 && year <= 9999
}

// encodeMessage writes m's JSON directly and reports true, or reports false
// (having written nothing) when a string or a time is not plain.
func encodeMessage(m Message) (string, bool) {
	if len(m.Payload) > 0 || m.PayloadRef { // encoding/json's compaction and escapes decide
		return "", false
	}
	strs := [...]string{m.EventID, m.IdempotencyKey, m.SourceKey, m.DeviceKey, string(m.Origin), m.Type, m.TraceParent, m.ReadAfter}
	n := len(keyEventID) + len(keyIdempotencyKey) + len(keySourceKey) + len(keyDeviceKey) +
		len(keyOccurredAt) + len(keyCreatedAt) + len(keyOrigin) + len(keyType) + len(keyTraceParent) + len(keyReadAfter) + len(messageEnd) +
		2*len(time.RFC3339Nano)
	for _, s := range strs {
		if !plain(s) {
			return "", false
		}
		n += len(s)
	}
	if !plainTime(m.OccurredAt) || !plainTime(m.CreatedAt) {
		return "", false
	}
	var b strings.Builder
	b.Grow(n)
	var buf [len(time.RFC3339Nano) + 8]byte
	b.WriteString(keyEventID)
	b.WriteString(m.EventID)
	b.WriteString(keyIdempotencyKey)
	b.WriteString(m.IdempotencyKey)
	b.WriteString(keySourceKey)
	b.WriteString(m.SourceKey)
	b.WriteString(keyDeviceKey)
	b.WriteString(m.DeviceKey)
	b.WriteString(keyOccurredAt)
	b.Write(m.OccurredAt.AppendFormat(buf[:0], time.RFC3339Nano))
	b.WriteString(keyCreatedAt)
	b.Write(m.CreatedAt.AppendFormat(buf[:0], time.RFC3339Nano))
	b.WriteString(keyOrigin)
	b.WriteString(string(m.Origin))
	if m.Type != "" {
		b.WriteString(keyType)
		b.WriteString(m.Type)
	}
	if m.TraceParent != "" {
		b.WriteString(keyTraceParent)
		b.WriteString(m.TraceParent)
	}
	if m.ReadAfter != "" {
		b.WriteString(keyReadAfter)
		b.WriteString(m.ReadAfter)
	}
	b.WriteString(messageEnd)
	return b.String(), true
}

// decodeMessage reads the message JSON raw: directly when it has the form
// Encode writes (the keys in order, printable ASCII strings without
// escapes, nothing else), with encoding/json otherwise. The strings of a
// directly read message share raw's memory.
func decodeMessage(raw string) (Message, error) {
	if m, ok := parseMessage(raw); ok {
		return m, nil
	}
	var m Message
	err := json.Unmarshal([]byte(raw), &m)
	return m, err
}

// parseMessage reads raw when it has the form Encode writes, and reports
// false for anything else (encoding/json then decides).
func parseMessage(raw string) (Message, bool) {
	p := messageParser{s: raw, ok: true}
	var m Message
	m.EventID = p.field(keyEventID)
	m.IdempotencyKey = p.field(keyIdempotencyKey)
	m.SourceKey = p.field(keySourceKey)
	m.DeviceKey = p.field(keyDeviceKey)
	m.OccurredAt = p.time(keyOccurredAt)
	m.CreatedAt = p.time(keyCreatedAt)
	m.Origin = Origin(p.field(keyOrigin))
	if p.ok && strings.HasPrefix(p.s[p.i:], keyType) {
		m.Type = p.field(keyType)
	}
	if p.ok && strings.HasPrefix(p.s[p.i:], keyTraceParent) {
		m.TraceParent = p.field(keyTraceParent)
	}
	if p.ok && strings.HasPrefix(p.s[p.i:], keyReadAfter) {
		m.ReadAfter = p.field(keyReadAfter)
	}
	if !p.ok || p.s[p.i:] != messageEnd {
		return Message{}, false
	}
	return m, true
}

// messageParser reads the fields of a message in order; ok turns false at
// the first byte that is not of the direct form, and stays false.
type messageParser struct {
	s  string
	i  int
	ok bool
}

// field reads key (with the separator before it) and the string value
// after it, up to its closing quote, which is left for the next key.
func (p *messageParser) field(key string) string {
	if !p.ok || !strings.HasPrefix(p.s[p.i:], key) {
		p.ok = false
		return ""
	}
	start := p.i + len(key)
	end := start
	for end < len(p.s) && p.s[end] != '"' {
		// Up to the quote that ends the value, every byte must be one that
		// encoding/json reads as it is: printable ASCII but the backslash
		// ('<', '>' and '&' too, though Encode never writes them so).
		if c := p.s[end]; c < 0x20 || c >= 0x7f || c == '\\' {
			p.ok = false
			return ""
		}
		end++
	}
	if end == len(p.s) {
		p.ok = false
		return ""
	}
	p.i = end
	return p.s[start:end]
}

// time reads key and a time value as encoding/json does (time.Time's
// UnmarshalJSON reads the text between the quotes with UnmarshalText).
func (p *messageParser) time(key string) time.Time {
	s := p.field(key)
	if !p.ok {
		return time.Time{}
	}
	var t time.Time
	if err := t.UnmarshalText([]byte(s)); err != nil {
		p.ok = false
		return time.Time{}
	}
	return t
}
