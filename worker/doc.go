// Package worker turns stream entries into read-model rows.
//
// A Worker reads the outbox stream (outbox.StreamDefault) in Redis as a
// member of a consumer group (Config.Group, "read-model" by default) and,
// for each batch of up to Config.BatchSize entries:
//
//  1. decodes the messages and re-reads their originals from the store with
//     one read (the message only names the original);
//  2. projects the batch into PostgreSQL in one transaction through a
//     Projector (by default outboxd's own read model, the one `outboxd
//     work` builds: events rows and device_daily_stats counts,
//     idempotently), sent in one round trip
//     when the Projector is a PipelinedProjector;
//  3. sets syncedAt on the originals with one store write;
//  4. acknowledges the entries with one XACK.
//
// Every step is safe to repeat, so a batch interrupted anywhere (a crash, a
// stop, an outage) converges when it is delivered again: the row exists, the
// stats are unchanged, syncedAt gets set. Delivery is at least once; effects
// in PostgreSQL are exactly once.
//
// With a backlog (a read returned a full batch) the batches overlap: the
// next batch is read and its originals loaded (step 1) while this one is
// projected, and this one's steps 3 and 4, its tail, are written while the
// next one is projected. One tail is written at a time, in order: a batch
// waits for the tail before its own, so at most one batch is projected and
// not yet synced and acknowledged beyond the one being projected; with
// nothing left to project the worker waits for the tail before it waits
// for new entries, so its holds and counts are never late. A tail
// that fails is retried on its own (steps 3 and 4 are idempotent); one that
// cannot be written stops the worker, as a failing batch does, and its
// entries stay pending. An Ordered worker, a batch of the replay lane and
// a batch of less than Config.BatchSize run their steps in turn.
//
// Under a light load the batches are small, and their tails are gathered
// (Config.TailGather, 5ms): the tail of a batch of less than
// Config.BatchSize whose events were all projected waits for the tails of
// the batches of the next few milliseconds, and step 3 then runs once for
// all of them, step 4 after it once for all. A batch with a held entry or
// a dead letter, a full batch, a pause, a reclaim and a stop write the
// gathered tails first.
//
// On start a worker first drains its own pending entries (a restart under
// the same Config.Consumer name), and every Config.ClaimInterval it takes
// over, with XAUTOCLAIM, entries that other consumers left pending longer
// than Config.ClaimIdle. A missing consumer group (NOGROUP: Redis restarted
// empty) is recreated.
//
// # The replay lane
//
// Replays (`outboxd replay` and the admin API's) arrive in a stream of
// their own, the replay lane (the Redis key <stream>:replay), which the
// worker consumes with
// the same group and consumer name: only when the stream has no backlog for
// it (a read of the stream came back with less than a batch: the lane then
// gets the next turn, so that a trickle of live events does not starve it),
// and at most Config.ReplayRate entries a second
// (Config.ReplayLimiter, shared by the Workers of a process), in batches
// of a twentieth of a second of that rate. A worker with nothing to do waits
// on both streams in one XREADGROUP. Everything else holds on the lane as
// on the stream: its own pending entries drained at start, XAUTOCLAIM,
// touches, delivery budgets (a hash of its own,
// <stream>:replay:<group>:failures) and the one dead-letter stream.
// outboxd_worker_replay_acked_total counts the lane's acknowledged
// entries.
//
// # Pauses, cancels and the projection rate
//
// An operator's pause of the group's live projection or of its replay lane
// (store.Pause, `outboxd pause`) is read from the store at most every
// second: the paused lane is neither read nor projected (what a read had
// returned is held, touched, until the resume), the other goes on. Entries
// of the lane added before a cancel of the replays (`outboxd replay
// cancel`, store.RecordReplayCancel) are acknowledged unprojected.
// Config.ProjectionRate bounds the live projection of the whole group
// through one rate kept in Redis, shared by its workers.
// Config.DeadLetterHook hears of each new dead letter.
//
// # Batch size and PostgreSQL timeouts
//
// Config.AutoBatch is the tuning loop: the batch size moves between
// AutoBatchMin and AutoBatchMax (500 and 2,000) to keep the p95 of the
// projection transactions of full batches under Config.ProjectionTarget
// (outboxd_worker_batch_size). Every projection transaction begins with
// SET LOCAL lock_timeout and statement_timeout (Config.LockTimeout,
// Config.StatementTimeout) in its BEGIN round trip; one that ends on
// either is counted in outboxd_worker_pg_timeouts_total{kind} and retried
// as an infrastructure failure, and with AutoBatch halves the batch.
//
// # Failure policy
//
// Every failure is classified in one place (classify.go) as infrastructure,
// a record's own, or unknown, with a bounded code (postgres_<SQLSTATE>,
// store_unavailable, original_missing, …).
//
// Infrastructure failures (Redis, the store or PostgreSQL down, restarting,
// timing out) pause the worker: the batch in flight stays pending and is
// retried with jittered backoff (Config.BackoffMax). They never charge a
// record and never dead-letter anything. A circuit breaker around
// PostgreSQL and one around the store (outboxd_worker_breaker_state) open
// after Config.BreakerFailures consecutive infrastructure failures, stay
// open Config.BreakerTimeout, then let one probe through. While paused, the
// worker touches the entries it holds every Config.ClaimIdle/4 (an XCLAIM
// to itself with JUSTID, which restarts their idle time and leaves the
// delivery count alone), so no other worker's XAUTOCLAIM takes them: with
// two or more workers, an outage of any length hands nothing from worker
// to worker. Only a dead or wedged worker's entries are taken over. The
// touch covers every entry pending to the consumer, so an entry Redis
// delivered to it in a reply the worker never got (a read that timed out
// while Redis was stopped and ran when it resumed) would never be taken
// over: every Config.ClaimIdle, between batches, the worker lists its own
// pending entries (XPENDING, which delivers nothing) and reads and
// delivers again only those it does not hold
// (outboxd_worker_recovered_total; TestWorkerRecoversEntriesItsReadLost).
//
// Record failures have a delivery budget kept apart from Redis's delivery
// count (which rises with every XAUTOCLAIM and history read): the hash
// <stream>:<group>:failures counts, per entry, the deliveries that failed
// because of the record, and only those. A failing record stays pending,
// held by the worker, for another delivery after Config.RecordBackoff
// doubled per failure (about 1s, then 2s, with jitter: with the default
// MaxDeliveries of 3 the third failure dead-letters, so only those two
// waits happen); its
// Config.MaxDeliveries-th failure sends it to the dead-letter stream
// <stream>:dlq (`outboxd dlq list` shows it) and acknowledges it: as poison
// with syncFailure set when its projection keeps failing (a PostgreSQL data error, an error
// wrapping ErrRecord, or an error nobody recognises), as non_retryable when
// its original stays missing (a secondary behind, a commit not visible
// yet). Records that can never succeed go at once as non_retryable: an
// unreadable entry (bad_message), an entry whose data the stream no longer
// holds (trimmed; counted in outboxd_worker_trimmed_total, and the
// reconciler re-publishes its original), a structurally invalid original
// (syncFailure set). The dead letters, the XACK and the budget updates of a
// batch are one MULTI/EXEC, so a crash leaves no duplicate dead letter.
// Dead letters are counted in outboxd_worker_dead_letters_total{category,
// code}.
//
// The error-streak rule watches every failure: the same code
// Config.StreakLimit (50) times in a row, counted for the whole consumer
// group in Redis, halts automatic retries of its class in
// every worker of the group and raises an alarm until it clears
// (outboxd_error_streak, outboxd_retries_halted, an error log); see
// Worker.ResumeRetries for what halted means and how it clears. A streak
// of record errors (the records' own fault) never stops the worker: the
// records failing with that code go to the dead-letter stream at once,
// and every other record is projected as usual.
//
// # Tracing
//
// With tracing on (docs/tracing.md), each event of a batch whose message
// carries a trace context (outbox.Message.TraceParent: the relay's, or a
// re-publish's) gets a projection span, a child of that context, ended
// when the batch is acknowledged or with the event's own failure; the
// batch's store reads and writes, its PostgreSQL transaction and its
// acknowledgement are recorded under the first traced event's span, which
// the others link to. A reclaimed or redelivered entry continues the same
// trace. A re-published event's span also links to its ingest trace.
// Messages without a context are handled as before, without a span.
//
// Consumers of the group idle longer than Config.ConsumerExpiry with
// nothing pending are removed (XGROUP DELCONSUMER, in one script with the
// check that nothing is pending).
package worker
