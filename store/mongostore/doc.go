// Package mongostore is the MongoDB store of the storage port (package
// store): the production store, on a replica set through the official Go
// driver, and on lungo's in-process engine (LungoMemory) in tests and in
// demos of the MongoDB path.
//
// Data model (database --mongo-db, "outboxd" by default):
//   - events: the originals; _id is the event's ObjectID; a unique index on
//     idempotencyKey; the reconciler index (see Migrate).
//   - outbox: the entries; _id is an ObjectID assigned on insert, which is
//     the entry id (hex); dispatchedAt null until relayed; a TTL index
//     removes dispatched entries after the retention.
//   - leases: one document per lease (the dispatcher's per stream, named
//     after the stream; the reconciler's "reconciler:<stream>"): owner,
//     leaseExpiresAt, fencing term, and for the dispatcher the checkpoint
//     (resumeToken, checkpointAt). Lease times are the server's clock.
//   - clock: one document ("now") whose writes read the server's clock
//     ($currentDate): leases and readiness (Ping) use it.
//
// Every write goes to the primary with majority write concern and a
// deadline; every transaction and read of originals goes to the primary,
// whatever readPreference the URI names (the status counts go to a
// secondary of bounded staleness: Options.CountsMaxStaleness); the
// worker's read of originals is after the cluster time of the change
// events that delivered their entries (store.WithReadAfter,
// outbox.Entry.ReadAfter); every command carries the time
// its deadline leaves as maxTimeMS. Transactions run in the store's own
// loop (runTx), bounded by the caller's deadline with the commit included.
// Lease times are the server's (the clock collection). docs/mongodb.md
// lists each behaviour only a server shows and the test that proves it,
// most of them through the real driver against a scripted server
// (fakeserver_internal_test.go). The feed is a change stream on
// the outbox: its resume token is the position; ChangeStreamHistoryLost and
// its relatives mean the position is lost; invalidate, drop, rename and
// dropDatabase end the feed (store.ErrFeedInvalidated).
//
// lungo differs from a server in ways this package absorbs: change-stream
// pipelines panic there, so entries are filtered in Go on lungo and with a
// $match on a server; lungo has no aggregation (counts use CountDocuments);
// its unique-index error is not a driver error; an idle lungo stream has no
// post-batch resume token.
package mongostore
