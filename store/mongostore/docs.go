package mongostore

import (
	"bytes"
	"encoding/json"
	"errors"
	"fmt"
	"time"

	"go.mongodb.org/mongo-driver/bson"
	"go.mongodb.org/mongo-driver/bson/primitive"
	"go.mongodb.org/mongo-driver/mongo"

	"github.com/outboxd/outboxd/outbox"
	"github.com/outboxd/outboxd/store"
)

// eventDoc is an original as stored in the events collection.
type eventDoc struct {
	ID             primitive.ObjectID `bson:"_id"`
	IdempotencyKey string             `bson:"idempotencyKey"`
	SourceKey      string             `bson:"sourceKey"`
	DeviceKey      string             `bson:"deviceKey"`
	Type           string             `bson:"type"`
	OccurredAt     time.Time          `bson:"occurredAt"`
	Payload        bson.Raw           `bson:"payload,omitempty"`
	ContentHash    string             `bson:"contentHash"`
	CreatedAt      time.Time          `bson:"createdAt"`
	SyncedAt       *time.Time         `bson:"syncedAt"`
	LastRequeuedAt *time.Time         `bson:"lastRequeuedAt"`
	RequeueCount   int64              `bson:"requeueCount"`
	SyncFailure    *failureDoc        `bson:"syncFailure"`
	// TraceParent is the ingest request's W3C traceparent; absent when it
	// was not traced.
	TraceParent string `bson:"traceparent,omitempty"`
	// Client is the name of the ingest client that sent the original;
	// absent for the default client.
	Client string `bson:"client,omitempty"`
}

// failureDoc is outbox.SyncFailure in BSON.
type failureDoc struct {
	Category   string    `bson:"category"`
	Code       string    `bson:"code"`
	Message    string    `bson:"message"`
	At         time.Time `bson:"at"`
	Deliveries int64     `bson:"deliveries"`
}

// entryDoc is an outbox entry as stored.
type entryDoc struct {
	ID      primitive.ObjectID `bson:"_id"`
	EventID primitive.ObjectID `bson:"eventId"`
	Stream  string             `bson:"stream"`
	// Partition is absent for partition 0 (and for every entry written
	// before partitions), so an unpartitioned outbox keeps its documents.
	Partition    int        `bson:"partition,omitempty"`
	Message      string     `bson:"message"`
	CreatedAt    time.Time  `bson:"createdAt"`
	DispatchedAt *time.Time `bson:"dispatchedAt"`
	// TraceParent is the trace context the relay continues; absent when
	// the ingest request was not traced.
	TraceParent string `bson:"traceparent,omitempty"`
}

// toEventDoc converts an original for insertion; its payload becomes a
// BSON document (integers that fit in 64 bits stay integers).
func toEventDoc(e *outbox.Event) (*eventDoc, error) {
	id, err := primitive.ObjectIDFromHex(e.ID)
	if err != nil {
		return nil, fmt.Errorf("event id %q is not an ObjectID: %w", e.ID, err)
	}
	payload, err := payloadToBSON(e.Payload)
	if err != nil {
		return nil, fmt.Errorf("event %s: %w", e.ID, err)
	}
	d := &eventDoc{
		ID: id, IdempotencyKey: e.IdempotencyKey, SourceKey: e.SourceKey, DeviceKey: e.DeviceKey, Type: e.Type,
		OccurredAt: e.OccurredAt.UTC(), Payload: payload, ContentHash: e.ContentHash, CreatedAt: e.CreatedAt.UTC(),
		SyncedAt: utcp(e.SyncedAt), LastRequeuedAt: utcp(e.LastRequeuedAt), RequeueCount: e.RequeueCount,
		TraceParent: e.TraceParent, Client: e.Client,
	}
	if f := e.SyncFailure; f != nil {
		d.SyncFailure = &failureDoc{Category: f.Category, Code: f.Code, Message: f.Message, At: f.At.UTC(), Deliveries: f.Deliveries}
	}
	return d, nil
}

// event converts a stored original; its payload comes back as relaxed
// extended JSON, which for a payload that came in as JSON is plain JSON.
func (d *eventDoc) event() (*outbox.Event, error) {
	payload := json.RawMessage("{}")
	if len(d.Payload) > 0 {
		b, err := bson.MarshalExtJSON(d.Payload, false, false)
		if err != nil {
			return nil, fmt.Errorf("%w: event %s: payload: %w", store.ErrCorrupt, d.ID.Hex(), err)
		}
		payload = b
	}
	e := &outbox.Event{
		ID: d.ID.Hex(), IdempotencyKey: d.IdempotencyKey, SourceKey: d.SourceKey, DeviceKey: d.DeviceKey, Type: d.Type,
		OccurredAt: d.OccurredAt.UTC(), Payload: payload, ContentHash: d.ContentHash, CreatedAt: d.CreatedAt.UTC(),
		SyncedAt: utcp(d.SyncedAt), LastRequeuedAt: utcp(d.LastRequeuedAt), RequeueCount: d.RequeueCount,
		TraceParent: d.TraceParent, Client: d.Client,
	}
	if f := d.SyncFailure; f != nil {
		e.SyncFailure = &outbox.SyncFailure{Category: f.Category, Code: f.Code, Message: f.Message, At: f.At.UTC(), Deliveries: f.Deliveries}
	}
	return e, nil
}

func (d *entryDoc) entry() outbox.Entry {
	return outbox.Entry{
		ID: d.ID.Hex(), EventID: d.EventID.Hex(), Stream: d.Stream, Partition: d.Partition, Message: d.Message,
		CreatedAt: d.CreatedAt.UTC(), DispatchedAt: utcp(d.DispatchedAt), TraceParent: d.TraceParent,
	}
}

func utcp(t *time.Time) *time.Time {
	if t == nil {
		return nil
	}
	u := t.UTC()
	return &u
}

// objectIDs parses ids, skipping any that is not an ObjectID (it names no
// document).
func objectIDs(ids []string) []primitive.ObjectID {
	out := make([]primitive.ObjectID, 0, len(ids))
	for _, id := range ids {
		if oid, err := primitive.ObjectIDFromHex(id); err == nil {
			out = append(out, oid)
		}
	}
	return out
}

// idsIn returns the condition on _id that matches exactly ids:
// {$gte: lowest, $lte: highest, $in: ids}. The range changes nothing on a
// server, where the _id index serves $in, but lungo scans the collection
// and compares every document with every $in element; the range lets it
// reject documents outside the batch with two comparisons (measured: a
// 256-id batch against 100k originals went from seconds to milliseconds).
// ids must not be empty.
func idsIn(ids []primitive.ObjectID) bson.D {
	lo, hi := ids[0], ids[0]
	for _, id := range ids[1:] {
		if bytes.Compare(id[:], lo[:]) < 0 {
			lo = id
		}
		if bytes.Compare(id[:], hi[:]) > 0 {
			hi = id
		}
	}
	return bson.D{{Key: "$gte", Value: lo}, {Key: "$lte", Value: hi}, {Key: "$in", Value: ids}}
}

func isNoDocuments(err error) bool { return errors.Is(err, mongo.ErrNoDocuments) }

// pendingFilter matches originals neither synced nor parked. Every
// syncFailure has a category, so a null category means no syncFailure; the
// reconciler index holds syncFailure.category (not the free-text message).
func pendingFilter() bson.D {
	return bson.D{{Key: "syncedAt", Value: nil}, {Key: "syncFailure.category", Value: nil}}
}
