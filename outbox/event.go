package outbox

import (
	"encoding/json"
	"errors"
	"fmt"
	"time"

	"go.mongodb.org/mongo-driver/bson"
	"go.mongodb.org/mongo-driver/bson/primitive"
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

// Event is an original in the events collection.
type Event struct {
	ID             primitive.ObjectID `bson:"_id"`
	IdempotencyKey string             `bson:"idempotencyKey"`
	SourceKey      string             `bson:"sourceKey"`
	DeviceKey      string             `bson:"deviceKey"`
	Type           string             `bson:"type"`
	OccurredAt     time.Time          `bson:"occurredAt"`
	Payload        bson.M             `bson:"payload"`
	ContentHash    string             `bson:"contentHash"`
	CreatedAt      time.Time          `bson:"createdAt"`
	SyncedAt       *time.Time         `bson:"syncedAt"`
	LastRequeuedAt *time.Time         `bson:"lastRequeuedAt"`
	RequeueCount   int64              `bson:"requeueCount"`
	SyncFailure    *SyncFailure       `bson:"syncFailure"`
}

// SyncFailure parks an original that the worker could not project.
type SyncFailure struct {
	Category   string    `bson:"category" json:"category"`
	Code       string    `bson:"code" json:"code"`
	Message    string    `bson:"message" json:"message"`
	At         time.Time `bson:"at" json:"at"`
	Deliveries int64     `bson:"deliveries" json:"deliveries"`
}

// State returns pending, synced or failed.
func (e *Event) State() string {
	switch {
	case e.SyncFailure != nil:
		return "failed"
	case e.SyncedAt != nil:
		return "synced"
	default:
		return "pending"
	}
}

// Message returns the stream message for e.
func (e *Event) Message(origin Origin) Message {
	return Message{
		EventID:        e.ID.Hex(),
		IdempotencyKey: e.IdempotencyKey,
		SourceKey:      e.SourceKey,
		DeviceKey:      e.DeviceKey,
		OccurredAt:     e.OccurredAt.UTC(),
		CreatedAt:      e.CreatedAt.UTC(),
		Origin:         origin,
	}
}

// Entry is a document of the outbox collection.
type Entry struct {
	ID      primitive.ObjectID `bson:"_id"`
	EventID primitive.ObjectID `bson:"eventId"`
	Stream  string             `bson:"stream"`
	// Message is the JSON that goes into the stream entry's payload field.
	Message      string     `bson:"message"`
	CreatedAt    time.Time  `bson:"createdAt"`
	DispatchedAt *time.Time `bson:"dispatchedAt"`
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
}

// ErrBadMessage is wrapped by DecodeMessage errors.
var ErrBadMessage = errors.New("bad stream message")

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
// while pending) or a malformed payload yields an error wrapping ErrBadMessage.
func DecodeMessage(values map[string]any) (Message, error) {
	var m Message
	raw, ok := values[PayloadField].(string)
	if !ok {
		return m, fmt.Errorf("%w: no %q field", ErrBadMessage, PayloadField)
	}
	if err := json.Unmarshal([]byte(raw), &m); err != nil {
		return m, fmt.Errorf("%w: %v", ErrBadMessage, err)
	}
	if _, err := primitive.ObjectIDFromHex(m.EventID); err != nil {
		return m, fmt.Errorf("%w: eventId %q is not an ObjectID", ErrBadMessage, m.EventID)
	}
	return m, nil
}
