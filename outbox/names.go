package outbox

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
