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
//  2. Per document, claim first: a conditional update that sets
//     lastRequeuedAt to this attempt's stamp and increments requeueCount,
//     only while the candidate conditions still hold. A document that no
//     longer matches (another run claimed it, or it got synced or parked
//     meanwhile) is skipped. This is a short per-document lease, not a lock
//     on the whole job: two sweeps at once publish each document once.
//  3. XADD the original's message (origin "reconciler") to the stream
//     (through a stream.Publisher, one message at a time and without a
//     circuit breaker: a failed publish is rolled back at once).
//  4. When XADD fails, roll the claim back, but only while lastRequeuedAt
//     still equals this attempt's stamp: a newer claim by another run is
//     left alone. The rollback restores the previous lastRequeuedAt (null
//     when there was none) and decrements requeueCount, since nothing was
//     requeued; the document is a candidate again at the next sweep. When
//     the rollback itself fails (or the process dies after the claim), the
//     document stays claimed and becomes a candidate again after
//     RequeueAfter: nothing is lost, only delayed.
//
// A document already requeued MaxRequeues times (default 10) is not
// published again: re-publishing it again and again is no fix, something
// downstream keeps failing it. The sweep parks it instead (syncFailure
// category "requeue_exhausted", counted in
// outboxd_reconciler_requeue_exhausted_total) and undoes its claim, so
// requeueCount keeps counting publishes; the histogram
// outboxd_reconciler_requeue_count shows how often the published ones were
// requeued. An operator re-drives parked originals once the cause is fixed
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
// documents it claimed, never the others' sweeps (seed 000).
// TestEveryReplicaSweepsWithoutTheLease proves it with two replicas and a
// worker: each original published once, the read model exact. With
// Config.Lease (--lease) only the replica that holds the lease
// "reconciler:<stream>" sweeps, one at a time. The end of each sweep is
// written into that lease's checkpoint time (by the holder, or briefly
// taking the free lease: RecordSweep), where GET /v1/status of every
// process reads it.
//
// Times come from Config.Now and are truncated to the millisecond, the
// stores' precision, so a claim stamp compares equal when read back.
package reconciler
