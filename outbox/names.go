package outbox

// Collection names in the MongoDB database (--mongo-db).
const (
	// EventsCollection holds the originals.
	EventsCollection = "events"
	// OutboxCollection holds one entry per original until it is relayed and
	// the retention period has passed.
	OutboxCollection = "outbox"
	// DispatcherCollection holds the dispatcher's state, one document per
	// stream: resume token, checkpoint time and lease.
	DispatcherCollection = "dispatcher_state"
)

// Redis names.
const (
	// StreamDefault is the default stream (--stream).
	StreamDefault = "event-stream"
	// GroupDefault is the default consumer group (--group).
	GroupDefault = "read-model"
	// PayloadField is the stream entry field that carries the Message JSON.
	PayloadField = "payload"
)

// DLQStream returns the dead-letter stream of stream.
func DLQStream(stream string) string { return stream + ":dlq" }
