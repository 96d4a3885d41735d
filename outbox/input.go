package outbox

import (
	"bytes"
	"cmp"
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"errors"
	"fmt"
	"strings"
	"time"
	"unicode/utf8"
)

// Limits applied to every Input.
const (
	// MaxKeyLength bounds sourceKey, deviceKey, type and idempotencyKey.
	MaxKeyLength = 200
	// MaxPayloadDepth bounds the nesting of payload objects and arrays: the
	// payload object itself is level 1; scalars add no level.
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
	// OccurredAt is an RFC 3339 date-time; it is stored in UTC at
	// millisecond precision, MongoDB's date precision.
	OccurredAt string `json:"occurredAt"`
	// Type defaults to TypeDefault.
	Type string `json:"type,omitempty"`
	// Payload is an optional JSON object.
	Payload json.RawMessage `json:"payload,omitempty"`
	// Client is the name of the ingest client that sent the input (the
	// server sets it from the caller's token, never from the body): its
	// idempotency key, given or derived, is stored under the client's
	// namespace (ClientKey), so that no client can take another's key.
	// "" and ClientDefault keep bare keys.
	Client string `json:"-"`
}

// ClientDefault is the ingest client of the single --ingest-token (and of
// a caller of another scope): its keys are stored bare, as before clients
// had names.
const ClientDefault = "default"

// ClientKeyPrefix starts every key stored for a named client (ClientKey).
// Keys a client gives may not start with it, so that the default client
// cannot take a named client's key.
const ClientKeyPrefix = "client:"

// ClientKey is the idempotency key stored for key sent by client: key
// itself for "" and ClientDefault, ClientKeyPrefix + client + "/" + key
// otherwise (a client name holds no "/", see ClientNameProblem).
func ClientKey(client, key string) string {
	if client == "" || client == ClientDefault {
		return key
	}
	return ClientKeyPrefix + client + "/" + key
}

// MaxClientNameLength bounds an ingest client's name.
const MaxClientNameLength = 64

// ClientNameProblem returns why name cannot name an ingest client, or ""
// when it can: 1 to MaxClientNameLength ASCII letters, digits, '.', '_'
// and '-'.
func ClientNameProblem(name string) string {
	switch {
	case name == "":
		return "is empty"
	case len(name) > MaxClientNameLength:
		return fmt.Sprintf("is longer than %d bytes", MaxClientNameLength)
	}
	for _, r := range name {
		if (r < 'a' || r > 'z') && (r < 'A' || r > 'Z') && (r < '0' || r > '9') && r != '.' && r != '_' && r != '-' {
			return fmt.Sprintf("may hold only ASCII letters, digits, '.', '_' and '-' (holds %q)", r)
		}
	}
	return ""
}

// FieldError is one invalid field of one input. It names the field the
// way Input's JSON does and leaves it to the caller to say where the input
// came from (httpapi names it events[3].deviceKey in a batch request).
type FieldError struct {
	// Index is the input's position among the inputs of the call (0 for
	// the first, or only, one).
	Index int
	// Field is the field's path inside the input: "deviceKey",
	// "occurredAt", "payload", "payload.a[0].x".
	Field string
	// Reason says what is wrong with it: "is required".
	Reason string
}

func (e FieldError) Error() string {
	return fmt.Sprintf("input %d: %s %s", e.Index, e.Field, e.Reason)
}

// ValidationError lists the invalid fields of the inputs of one call, in
// input order. Nothing of such a call is written.
type ValidationError struct {
	Fields []FieldError
	// TooLarge is set when an event is refused for its size alone: it is
	// valid, but takes more bytes in the store than one transaction holds
	// (Committer.Write). Such an error also matches ErrTooLarge.
	TooLarge bool
}

// ErrInvalid is matched by every *ValidationError.
var ErrInvalid = errors.New("invalid event")

// ErrTooLarge is matched by the *ValidationError of an event refused for
// its size in the store (ValidationError.TooLarge): HTTP answers it 413,
// not 422, as the client must send less rather than fix a field.
var ErrTooLarge = errors.New("event too large for the store")

func (e *ValidationError) Error() string {
	parts := make([]string, len(e.Fields))
	for i, f := range e.Fields {
		parts[i] = f.Error()
	}
	return "invalid event: " + strings.Join(parts, "; ")
}

// Is makes errors.Is(err, ErrInvalid) true, and errors.Is(err,
// ErrTooLarge) when e.TooLarge.
func (e *ValidationError) Is(target error) bool {
	return target == ErrInvalid || (e.TooLarge && target == ErrTooLarge)
}

// prepared is a validated input ready to be written.
type prepared struct {
	// key is the idempotency key as stored (ClientKey); clientKey as the
	// client knows it (given or derived).
	key       string
	clientKey string
	// hashedClientKey is, for an event whose key was derived, its key in
	// the form DeriveKey had up to 0.1.0 (hashedDerivedKey), as the client
	// knew it (stored as ClientKey of it); "" for a key the client gave.
	hashedClientKey string
	client          string
	sourceKey       string
	deviceKey       string
	typ             string
	occurredAt      time.Time
	payload         json.RawMessage // canonical JSON
	hash            string
	// bytes is what the original and its outbox entry take in the store
	// (Writer.size).
	bytes int
	// draft is what a write needs of it beside: made by prepareAll for a
	// write, empty for a validation.
	draft draft
}

// prepare validates in, the input at index of its call, and normalises it.
func prepare(in Input, now time.Time, index int) (prepared, []FieldError) {
	var errs []FieldError
	bad := func(field, reason string) {
		errs = append(errs, FieldError{Index: index, Field: field, Reason: reason})
	}

	checkKey := func(field, v string, required bool) {
		if v == "" && !required {
			return
		}
		if reason := KeyProblem(v); reason != "" {
			bad(field, reason)
		}
	}
	checkKey("sourceKey", in.SourceKey, true)
	checkKey("deviceKey", in.DeviceKey, true)
	checkKey("type", in.Type, false)
	checkKey("idempotencyKey", in.IdempotencyKey, false)
	for _, prefix := range []string{DerivedKeyPrefix, ClientKeyPrefix} {
		if strings.HasPrefix(in.IdempotencyKey, prefix) {
			bad("idempotencyKey", fmt.Sprintf("must not start with %q, which is reserved for keys the server makes", prefix))
		}
	}

	p := prepared{sourceKey: in.SourceKey, deviceKey: in.DeviceKey, typ: cmp.Or(in.Type, TypeDefault), client: in.Client}
	if p.client == ClientDefault {
		p.client = ""
	}
	if in.OccurredAt == "" {
		bad("occurredAt", "is required")
	} else if t, err := ParseTime(in.OccurredAt); err != nil {
		bad("occurredAt", "must be an RFC 3339 date-time: "+err.Error())
	} else if t = t.UTC().Truncate(time.Millisecond); t.Before(MinOccurredAt) || t.After(now.Add(MaxFutureSkew)) {
		bad("occurredAt", fmt.Sprintf("must lie between %s and %s after now", MinOccurredAt.Format(time.RFC3339), MaxFutureSkew))
	} else {
		p.occurredAt = t
	}

	if len(in.Payload) > 0 && !bytes.Equal(bytes.TrimSpace(in.Payload), []byte("null")) {
		canon, field, reason := canonicalPayload(in.Payload)
		if reason != "" {
			bad(field, reason)
		}
		p.payload = canon
	}
	if len(errs) > 0 {
		return p, errs
	}
	if p.payload == nil {
		p.payload = json.RawMessage("{}")
	}
	p.clientKey = in.IdempotencyKey
	if p.clientKey == "" {
		sum := derivedSum(p.sourceKey, p.deviceKey, p.occurredAt)
		p.clientKey = orderedDerivedKey(p.occurredAt, sum)
		p.hashedClientKey = hashedDerivedKey(sum)
	}
	p.key = ClientKey(p.client, p.clientKey)
	p.hash = contentHash(p)
	return p, nil
}

// KeyProblem returns why v is not a valid key (sourceKey, deviceKey, type,
// idempotencyKey), or "" when it is: keys are 1 to MaxKeyLength bytes of
// UTF-8 made of graphic characters (letters, marks, numbers, punctuation,
// symbols and the ASCII space), not only spaces. Control, format
// (bidirectional overrides, zero-width), private-use, surrogate and
// unassigned code points and the other space characters are refused: a key
// must read the same everywhere it is printed.
func KeyProblem(v string) string {
	switch {
	case v == "":
		return "is required"
	case len(v) > MaxKeyLength:
		return fmt.Sprintf("is longer than %d bytes", MaxKeyLength)
	case !utf8.ValidString(v):
		return "must be printable UTF-8"
	case strings.TrimSpace(v) == "":
		return "must not be only white space"
	}
	for _, r := range v {
		if r != ' ' && !isGraphic(r) {
			return fmt.Sprintf("must be printable UTF-8 (holds %U)", r)
		}
	}
	return ""
}

// DerivedKeyPrefix starts every key the server derives (DeriveKey). Client
// keys may not start with it, so no client can take the key of someone
// else's keyless event.
const DerivedKeyPrefix = "derived:"

// DeriveKey is the idempotency key of an event that carries none, made of
// sourceKey, deviceKey and occurredAt (UTC, millisecond precision):
// DerivedKeyPrefix, "t", occurredAt's Unix milliseconds in 12 hex digits,
// "-" and the first 16 bytes of a SHA-256 of the three in hex, 54
// characters in all ("derived:t019b7cd9a8c0-5f0c…").
//
// The time comes first so that the keys of events that occur together are
// neighbours in the stores' unique index on the key: a commit then writes
// a few pages of that index, where hashes alone landed all over it, one
// page per event, the most of what a batch wrote once the store held a few
// hundred thousand originals (docs/benchmarks.md, "Sixth pass"). Up to
// 0.1.0 a derived key was the prefix and the whole hash in hex
// (hashedDerivedKey); the writer looks that form up beside this one, so a
// retry of an event stored then is still recognised.
func DeriveKey(sourceKey, deviceKey string, occurredAt time.Time) string {
	occurredAt = occurredAt.UTC().Truncate(time.Millisecond)
	return orderedDerivedKey(occurredAt, derivedSum(sourceKey, deviceKey, occurredAt))
}

// derivedSum is the SHA-256 of a derived key's fields; occurredAt is UTC
// at millisecond precision.
func derivedSum(sourceKey, deviceKey string, occurredAt time.Time) []byte {
	h := sha256.New()
	for _, s := range []string{sourceKey, deviceKey, occurredAt.Format(time.RFC3339Nano)} {
		fmt.Fprintf(h, "%d:%s;", len(s), s)
	}
	return h.Sum(nil)
}

// orderedDerivedKey is DeriveKey's form of the key with sum (derivedSum).
func orderedDerivedKey(occurredAt time.Time, sum []byte) string {
	ms := uint64(occurredAt.UnixMilli()) // from MinOccurredAt on: never negative
	var b [6]byte
	for i := len(b) - 1; i >= 0; i-- {
		b[i] = byte(ms)
		ms >>= 8
	}
	return DerivedKeyPrefix + "t" + hex.EncodeToString(b[:]) + "-" + hex.EncodeToString(sum[:16])
}

// hashedDerivedKey is the form of a derived key up to 0.1.0: the prefix
// and the whole sum (derivedSum) in hex.
func hashedDerivedKey(sum []byte) string {
	return DerivedKeyPrefix + hex.EncodeToString(sum)
}

// contentHash fingerprints what the client sent, so a retry with the same key
// can be told apart from a different event reusing the key.
func contentHash(p prepared) string {
	h := sha256.New()
	for _, s := range []string{p.sourceKey, p.deviceKey, p.typ, p.occurredAt.Format(time.RFC3339Nano)} {
		fmt.Fprintf(h, "%d:%s;", len(s), s)
	}
	h.Write(p.payload)
	return hex.EncodeToString(h.Sum(nil))
}
