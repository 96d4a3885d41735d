// Package reconciler is the backstop of the pipeline: it finds originals that
// never reached syncedAt and puts their message back into the same stream,
// so the worker's normal, idempotent path finishes them. It never writes to
// PostgreSQL itself: recovery has no second implementation of the projection.
//
// One sweep:
//
//  1. Candidates: events with syncedAt == null, syncFailure == null,
//     createdAt older than MinAge (so work still in flight is left alone)
//     and lastRequeuedAt absent, null or older than RequeueAfter; oldest
//     createdAt first, at most Limit per sweep. Reaching the limit is not a
//     failure: the next sweep continues. The query is served by an
//     index of each store (store.Store.Candidates).
//  2. Claim first, every candidate of the sweep in one store transaction
//     (store.Store.Claim): a conditional update that sets lastRequeuedAt to
//     this attempt's stamp and increments requeueCount on each document
//     while the candidate conditions still hold for it, returning each
//     claimed document as it was before. A document that no longer matches
//     (another run claimed it, or it got synced or parked meanwhile) is
//     skipped. Each claim is a short per-document lease, not a lock on the
//     whole job: two sweeps at once publish each document once.
//  3. XADD the claimed originals' messages (origin "reconciler") to the
//     stream in one pipeline (one per partition), through a
//     stream.Publisher without a circuit breaker: the pipeline answers for
//     each message (stream.Added), so each document's outcome is exact.
//  4. Roll back the claims of the messages that were not added, in one
//     store write (store.Store.RollbackClaims), each only while its
//     lastRequeuedAt still equals this attempt's stamp: a newer claim by
//     another run is left alone. The rollback restores the previous
//     lastRequeuedAt (null when there was none) and decrements
//     requeueCount, since nothing was requeued; the document is a candidate
//     again at the next sweep. When the rollback itself fails (or the
//     process dies after the claim), the documents stay claimed and become
//     candidates again after RequeueAfter: nothing is lost, only delayed.
//
// A sweep therefore costs the store a constant number of round trips
// whatever its size (on MongoDB: the candidate query, a transaction of a
// find, an updateMany and the commit, the counts; docs/mongodb.md). The
// price of claiming the sweep at once: a reconciler that dies between its
// claim and its publish holds every candidate of that sweep (at most
// Limit) until RequeueAfter, where a claim per document held one.
//
// A document already requeued MaxRequeues times (default 10) is not
// published again: re-publishing it again and again is no fix, something
// downstream keeps failing it. The sweep parks it instead (syncFailure
// category "requeue_exhausted", counted in
// outboxd_reconciler_requeue_exhausted_total) and undoes its claim, so
// requeueCount keeps counting publishes; the histogram
// outboxd_reconciler_requeue_count shows how often the published ones were
// requeued. An operator redrives parked originals once the cause is fixed
// (outboxd replay --state failed, which starts a fresh budget).
//
// Every document is tried independently; the Report counts what happened
// and Report.Failed tells the caller (the reconcile role exits 1) that at
// least one document failed. The report also carries the age of the oldest
// unsynced original and the parked (syncFailure) originals by category,
// from the store's counts.
//
// Sweep runs one sweep on demand (outboxd reconcile). Start runs the
// schedule (outboxd reconcile --every, and dev): every Config.Every, on
// every replica. There is no lock over the whole job by default: the
// per-document claims keep each document published once however many
// replicas sweep at once, and a slow or wedged replica holds back only the
// documents it claimed (one sweep's, at most Limit), never the others'
// sweeps.
// TestEveryReplicaSweepsWithoutTheLease proves it with two replicas and a
// worker: each original published once, the read model exact. With
// Config.Lease (--lease) only the replica that holds the lease
// "reconciler:<stream>" sweeps, one at a time. The end of each sweep is
// recorded as the store's mark "sweep:<stream>" (RecordSweep,
// store.LastSweep), where GET /v1/status of every process reads it.
//
// Times come from Config.Now and are truncated to the millisecond, the
// stores' precision, so a claim stamp compares equal when read back.
package reconciler
