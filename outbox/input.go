package outbox

import (
	"bytes"
	"cmp"
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"errors"
	"fmt"
	"strconv"
	"strings"
	"time"
	"unicode"
	"unicode/utf8"

	"go.mongodb.org/mongo-driver/bson"
)

// Limits applied to every Input.
const (
	// MaxKeyLength bounds sourceKey, deviceKey, type and idempotencyKey.
	MaxKeyLength = 200
	// MaxPayloadDepth bounds the nesting of payload objects and arrays.
	MaxPayloadDepth = 32
	// MaxFutureSkew is how far occurredAt may lie after the server's clock.
	MaxFutureSkew = 24 * time.Hour
	// TypeDefault is the type of an event that names none.
	TypeDefault = "event"
)

// MinOccurredAt is the earliest accepted occurredAt (the Unix epoch).
var MinOccurredAt = time.Unix(0, 0).UTC()

// Input is one event as a client submits it.
type Input struct {
	// IdempotencyKey is optional; when empty it is derived from sourceKey,
	// deviceKey and occurredAt (see DeriveKey).
	IdempotencyKey string `json:"idempotencyKey,omitempty"`
	SourceKey      string `json:"sourceKey"`
	DeviceKey      string `json:"deviceKey"`
	// OccurredAt is RFC 3339; it is stored in UTC at millisecond precision,
	// MongoDB's date precision.
	OccurredAt string `json:"occurredAt"`
	// Type defaults to TypeDefault.
	Type string `json:"type,omitempty"`
	// Payload is an optional JSON object.
	Payload json.RawMessage `json:"payload,omitempty"`
}

// FieldError names one invalid field.
type FieldError struct {
	Field  string `json:"field"`
	Reason string `json:"reason"`
}

// ValidationError lists the invalid fields of a request.
type ValidationError struct {
	Fields []FieldError
}

// ErrInvalid is matched by every *ValidationError.
var ErrInvalid = errors.New("invalid event")

func (e *ValidationError) Error() string {
	parts := make([]string, len(e.Fields))
	for i, f := range e.Fields {
		parts[i] = f.Field + ": " + f.Reason
	}
	return "invalid event: " + strings.Join(parts, "; ")
}

// Is makes errors.Is(err, ErrInvalid) true.
func (e *ValidationError) Is(target error) bool { return target == ErrInvalid }

// prepared is a validated input ready to be written.
type prepared struct {
	key        string
	sourceKey  string
	deviceKey  string
	typ        string
	occurredAt time.Time
	payload    bson.M
	hash       string
}

// prepare validates in and normalises it; field names are prefixed with
// prefix (for example "events[3].").
func prepare(in Input, now time.Time, prefix string) (prepared, []FieldError) {
	var errs []FieldError
	bad := func(field, reason string) { errs = append(errs, FieldError{Field: prefix + field, Reason: reason}) }

	checkKey := func(field, v string, required bool) {
		switch {
		case v == "" && required:
			bad(field, "is required")
		case len(v) > MaxKeyLength:
			bad(field, fmt.Sprintf("is longer than %d bytes", MaxKeyLength))
		case !utf8.ValidString(v) || strings.ContainsFunc(v, unicode.IsControl):
			bad(field, "must be printable UTF-8")
		}
	}
	checkKey("sourceKey", in.SourceKey, true)
	checkKey("deviceKey", in.DeviceKey, true)
	checkKey("type", in.Type, false)
	checkKey("idempotencyKey", in.IdempotencyKey, false)

	p := prepared{sourceKey: in.SourceKey, deviceKey: in.DeviceKey, typ: cmp.Or(in.Type, TypeDefault)}
	if in.OccurredAt == "" {
		bad("occurredAt", "is required")
	} else if t, err := time.Parse(time.RFC3339Nano, in.OccurredAt); err != nil {
		bad("occurredAt", "must be an RFC 3339 date-time")
	} else if t = t.UTC().Truncate(time.Millisecond); t.Before(MinOccurredAt) || t.After(now.Add(MaxFutureSkew)) {
		bad("occurredAt", fmt.Sprintf("must lie between %s and %s after now", MinOccurredAt.Format(time.RFC3339), MaxFutureSkew))
	} else {
		p.occurredAt = t
	}

	var canonical []byte
	if len(in.Payload) > 0 && !bytes.Equal(bytes.TrimSpace(in.Payload), []byte("null")) {
		doc, canon, reason := decodePayload(in.Payload)
		if reason != "" {
			bad("payload", reason)
		}
		p.payload, canonical = doc, canon
	}
	if len(errs) > 0 {
		return p, errs
	}
	if p.payload == nil {
		p.payload, canonical = bson.M{}, []byte("{}")
	}
	p.key = cmp.Or(in.IdempotencyKey, DeriveKey(p.sourceKey, p.deviceKey, p.occurredAt))
	p.hash = contentHash(p, canonical)
	return p, nil
}

// DeriveKey is the idempotency key of an event that carries none: a hash of
// sourceKey, deviceKey and occurredAt (UTC, millisecond precision).
func DeriveKey(sourceKey, deviceKey string, occurredAt time.Time) string {
	h := sha256.New()
	for _, s := range []string{sourceKey, deviceKey, occurredAt.UTC().Truncate(time.Millisecond).Format(time.RFC3339Nano)} {
		fmt.Fprintf(h, "%d:%s;", len(s), s)
	}
	return "derived:" + hex.EncodeToString(h.Sum(nil))
}

// contentHash fingerprints what the client sent, so a retry with the same key
// can be told apart from a different event reusing the key.
func contentHash(p prepared, canonicalPayload []byte) string {
	h := sha256.New()
	for _, s := range []string{p.sourceKey, p.deviceKey, p.typ, p.occurredAt.Format(time.RFC3339Nano)} {
		fmt.Fprintf(h, "%d:%s;", len(s), s)
	}
	h.Write(canonicalPayload)
	return hex.EncodeToString(h.Sum(nil))
}

// decodePayload checks that raw is a JSON object fit for MongoDB and returns
// it as BSON plus its canonical JSON (sorted keys). A non-empty reason
// explains why it was refused.
func decodePayload(raw json.RawMessage) (bson.M, []byte, string) {
	dec := json.NewDecoder(bytes.NewReader(raw))
	dec.UseNumber()
	var v any
	if err := dec.Decode(&v); err != nil {
		return nil, nil, "must be a JSON object"
	}
	obj, ok := v.(map[string]any)
	if !ok {
		return nil, nil, "must be a JSON object"
	}
	conv, reason := toBSON(obj, 1)
	if reason != "" {
		return nil, nil, reason
	}
	canonical, err := json.Marshal(obj)
	if err != nil {
		return nil, nil, "must be a JSON object"
	}
	return conv.(bson.M), canonical, ""
}

// toBSON converts a decoded JSON value: json.Number becomes int64 when it is
// integral and fits, float64 otherwise.
func toBSON(v any, depth int) (any, string) {
	if depth > MaxPayloadDepth {
		return nil, fmt.Sprintf("is nested deeper than %d levels", MaxPayloadDepth)
	}
	switch x := v.(type) {
	case map[string]any:
		out := bson.M{}
		for k, e := range x {
			if k == "" || strings.HasPrefix(k, "$") || strings.ContainsRune(k, 0) {
				return nil, fmt.Sprintf("key %q is not allowed (empty, starts with $ or holds NUL)", k)
			}
			c, reason := toBSON(e, depth+1)
			if reason != "" {
				return nil, reason
			}
			out[k] = c
		}
		return out, ""
	case []any:
		out := make(bson.A, len(x))
		for i, e := range x {
			c, reason := toBSON(e, depth+1)
			if reason != "" {
				return nil, reason
			}
			out[i] = c
		}
		return out, ""
	case json.Number:
		if i, err := strconv.ParseInt(string(x), 10, 64); err == nil {
			return i, ""
		}
		f, err := x.Float64()
		if err != nil {
			return nil, fmt.Sprintf("number %s is out of range", x)
		}
		return f, ""
	default:
		return x, ""
	}
}
