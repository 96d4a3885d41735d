// Package outbox owns the document and message schema of outboxd, the
// transactional writer that stores an original event and its outbox entry in
// one MongoDB transaction, and the ingest HTTP handler.
//
// Other Go services can import it: Writer.Write runs its own transaction;
// Writer.WriteInSession joins the caller's transaction so a service can commit
// its own writes together with the event and its outbox entry.
package outbox
