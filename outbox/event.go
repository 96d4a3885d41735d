package outbox

import (
	"cmp"
	"encoding/json"
	"time"

	"github.com/outboxd/outboxd/internal/bounds"
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

// Failure categories of SyncFailure and of dead letters.
const (
	// CategoryNonRetryable: the record can never succeed as it is (an
	// unreadable message, a structurally invalid original).
	CategoryNonRetryable = "non_retryable"
	// CategoryPoison: the record kept failing its projection.
	CategoryPoison = "poison"
	// CategoryInfrastructure: the record was given up for a cause outside
	// it (its stream entry trimmed while pending, its original not found:
	// a lagging secondary, a commit not visible yet); a later try may
	// succeed, which is what a redrive policy of this category is for.
	CategoryInfrastructure = "infrastructure"
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
	ID string
	// IdempotencyKey is the key as stored: for a named Client, under its
	// namespace (ClientKey).
	IdempotencyKey string
	// Client is the name of the ingest client that sent the original, ""
	// for the default client (a single --ingest-token, or none).
	Client     string
	SourceKey  string
	DeviceKey  string
	Type       string
	OccurredAt time.Time
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

// Message returns the stream message for e: it names the original and
// its type.
func (e *Event) Message(origin Origin) Message {
	return Message{
		EventID:        e.ID,
		IdempotencyKey: e.IdempotencyKey,
		SourceKey:      e.SourceKey,
		DeviceKey:      e.DeviceKey,
		OccurredAt:     e.OccurredAt.UTC(),
		CreatedAt:      e.CreatedAt.UTC(),
		Origin:         origin,
		Type:           e.Type,
	}
}

// PayloadMaxDefault is the default MessageOptions.PayloadMax: 64 KiB.
const PayloadMaxDefault = 64 << 10

// MessageOptions says what a stream message carries besides the
// original's name and type (--message-payload, --message-payload-max).
type MessageOptions struct {
	// Payload puts the original's payload into the message. Defaults to
	// false: consumers fetch the original.
	Payload bool
	// PayloadMax is the largest payload (bytes of its JSON) a message
	// carries; a larger one goes by reference (Message.PayloadRef).
	// Defaults to PayloadMaxDefault.
	PayloadMax int
}

// Validate checks o as a writer takes it (a zero PayloadMax is
// PayloadMaxDefault); its error names the field.
func (o *MessageOptions) Validate() error {
	if o != nil && o.PayloadMax < 0 {
		return bounds.Errorf("PayloadMax", o.PayloadMax, "must be at least 1")
	}
	return nil
}

// MessageWith returns e's message with what opts asks for besides (a nil
// opts: Message).
func (e *Event) MessageWith(origin Origin, opts *MessageOptions) Message {
	m := e.Message(origin)
	if opts == nil || !opts.Payload {
		return m
	}
	payload := e.Payload
	if len(payload) == 0 {
		payload = json.RawMessage("{}")
	}
	if len(payload) > cmp.Or(opts.PayloadMax, PayloadMaxDefault) {
		m.PayloadRef = true
	} else {
		m.Payload = payload
	}
	return m
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
	// ReadAfter is the store's position of the commit that inserted the
	// entry, set by a feed that knows one (MongoDB's change stream: the
	// change event's cluster time), opaque; "" otherwise (a catch-up, an
	// operator's listing, SQLite). The dispatcher puts it into the message
	// it relays (Message.ReadAfter), and the worker reads the original at
	// or after it (store.WithReadAfter). It is not stored.
	ReadAfter string
}
