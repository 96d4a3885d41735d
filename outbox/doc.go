// Package outbox owns the schema of outboxd (the original event, its outbox
// entry, the stream message) and the transactional writer that stores an
// original and its outbox entry atomically, with idempotency keys.
//
// The writer talks to a store through the small Tx and Transactor
// interfaces; the stores of the storage port (package store) provide them.
// Other Go services can import this package: Writer.Write runs its own
// transaction; Writer.WriteInTx joins the caller's transaction so a service
// commits its own writes together with the event and its outbox entry;
// a Committer writes the events of concurrent callers in shared
// transactions (group commit), each caller with its own answer.
//
// Invalid inputs are refused as a whole with a *ValidationError: each
// FieldError names its input by index and the field by its path inside
// the input ("payload.a[0].x"); how to show that to a client is the
// caller's (httpapi writes events[3].deviceKey). Event ids are
// ObjectID-compatible and generated here (NewEventID).
//
// It imports no HTTP, metrics or database driver code (TestDependencies).
package outbox
