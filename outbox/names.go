package outbox

// StreamDefault is the stream an outbox entry names when its writer is not
// told another (WriterConfig.Stream, --stream). The Redis keys of a stream
// (its dead-letter stream, its budgets, …) are package stream's.
const StreamDefault = "event-stream"

// PayloadField is the stream entry field that carries the Message JSON.
const PayloadField = "payload"
