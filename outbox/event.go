package outbox

import (
	"encoding/json"
	"errors"
	"fmt"
	"time"
)

// Origin says which component put a message into the stream.
type Origin string

// Origins of a stream message.
const (
	OriginOutbox     Origin = "outbox"
	OriginReconciler Origin = "reconciler"
	OriginReplay     Origin = "replay"
	OriginDLQReplay  Origin = "dlq-replay"
)

// Failure categories of SyncFailure.
const (
	CategoryNonRetryable = "non_retryable"
	CategoryPoison       = "poison"
)

// States of an original, as GET /v1/events/{id} reports them.
const (
	StatePending = "pending"
	StateSynced  = "synced"
	StateFailed  = "failed"
)

// Event is an original: what ingest stored for one accepted event. Times are
// UTC at millisecond precision (MongoDB's), in every store.
type Event struct {
	// ID is a 24-hex-digit ObjectID, chosen by the writer.
	ID             string
	IdempotencyKey string
	SourceKey      string
	DeviceKey      string
	Type           string
	OccurredAt     time.Time
	// Payload is the canonical JSON object (sorted keys) the client sent,
	// "{}" when it sent none. A store may hold it in another form (BSON) and
	// gives it back as equivalent JSON.
	Payload     json.RawMessage
	ContentHash string
	CreatedAt   time.Time
	// SyncedAt is set by the worker once the read model holds the event.
	SyncedAt *time.Time
	// LastRequeuedAt is the reconciler's claim stamp.
	LastRequeuedAt *time.Time
	// RequeueCount counts the reconciler's successful claims.
	RequeueCount int64
	// SyncFailure parks an original that will not be projected.
	SyncFailure *SyncFailure
	// TraceParent is the W3C traceparent of the ingest request that
	// created the original, "" when it was not traced (tracing off, or the
	// trace not sampled). The reconciler's and the operator's re-publishes
	// link their spans to it.
	TraceParent string
}

// SyncFailure parks an original that the worker could not project.
type SyncFailure struct {
	Category   string    `json:"category"`
	Code       string    `json:"code"`
	Message    string    `json:"message"`
	At         time.Time `json:"at"`
	Deliveries int64     `json:"deliveries"`
}

// State returns StatePending, StateSynced or StateFailed.
func (e *Event) State() string {
	switch {
	case e.SyncFailure != nil:
		return StateFailed
	case e.SyncedAt != nil:
		return StateSynced
	default:
		return StatePending
	}
}

// Message returns the stream message for e.
func (e *Event) Message(origin Origin) Message {
	return Message{
		EventID:        e.ID,
		IdempotencyKey: e.IdempotencyKey,
		SourceKey:      e.SourceKey,
		DeviceKey:      e.DeviceKey,
		OccurredAt:     e.OccurredAt.UTC(),
		CreatedAt:      e.CreatedAt.UTC(),
		Origin:         origin,
	}
}

// Entry is an outbox entry: one per original, relayed to Stream by the
// dispatcher.
type Entry struct {
	// ID is assigned by the store on insert. Within one store, IDs of one
	// stream sort (as strings) in the order the store hands entries out.
	ID      string
	EventID string
	Stream  string
	// Partition is the entry's partition of Stream (0 ≤ Partition <
	// partitions), fixed at ingest by PartitionOf from the original's
	// sourceKey and deviceKey; always 0 with one partition.
	Partition int
	// Message is the JSON that goes into the stream entry's payload field.
	Message      string
	CreatedAt    time.Time
	DispatchedAt *time.Time
	// TraceParent is the W3C traceparent the dispatcher's relay span
	// continues: the ingest request's (as the original's TraceParent), ""
	// when it was not traced. Message does not carry it; the dispatcher
	// puts its own span's into the message it relays.
	TraceParent string
}

// Message is the JSON carried in a stream entry's payload field. Workers
// always re-read the original; the message only names it.
type Message struct {
	EventID        string    `json:"eventId"`
	IdempotencyKey string    `json:"idempotencyKey"`
	SourceKey      string    `json:"sourceKey"`
	DeviceKey      string    `json:"deviceKey"`
	OccurredAt     time.Time `json:"occurredAt"`
	CreatedAt      time.Time `json:"createdAt"`
	Origin         Origin    `json:"origin"`
	// TraceParent is the W3C traceparent of the span that put the message
	// into the stream (the dispatcher's relay, the reconciler's or a
	// replay's publish); the worker's span continues it. Absent when that
	// was not traced: the message is handled the same.
	TraceParent string `json:"traceparent,omitempty"`
}

// WithTraceParent returns the message JSON msg (an Entry's Message) with
// its TraceParent set to traceParent. A msg that is not a message is
// returned as it is (the worker dead-letters it as before).
func WithTraceParent(msg, traceParent string) string {
	var m Message
	if err := json.Unmarshal([]byte(msg), &m); err != nil {
		return msg
	}
	m.TraceParent = traceParent
	return m.Encode()
}

// ErrBadMessage is wrapped by DecodeMessage errors.
var ErrBadMessage = errors.New("bad stream message")

// ErrTrimmed is wrapped by DecodeMessage when the entry has no data at all:
// the stream was trimmed (or the entry deleted) while it was pending.
var ErrTrimmed = errors.New("stream entry trimmed while pending")

// Encode returns the message JSON.
func (m Message) Encode() string {
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
	if err := json.Unmarshal([]byte(raw), &m); err != nil {
		return m, fmt.Errorf("%w: %w", ErrBadMessage, err)
	}
	if !IsEventID(m.EventID) {
		return m, fmt.Errorf("%w: eventId %q is not an ObjectID", ErrBadMessage, m.EventID)
	}
	return m, nil
}
