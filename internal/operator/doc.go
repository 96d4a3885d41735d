// Package operator holds the operator actions of outboxd as a library:
// what `outboxd dlq`, `replay` and `verify`, the console and the admin API
// (/v1/admin/, package httpapi) do, over the store (package store), Redis
// (package stream) and the read model (package readmodel). It imports
// neither go-redis nor pgx; httpapi maps its routes onto it.
//
// # A map
//
// New builds an Operator from a Config: the store (required), a
// stream.Client and a ReadModel (readmodel.New), each optional; an action
// that needs a backend the instance lacks fails with ErrNotAvailable.
//
//   - Dead letters: ListDLQ (a DLQQuery by category and code, paged),
//     DeadLetter (one, with its original), ReplayDLQ and DropDLQ (a
//     DLQAction: ids, or all of a category and code, one chunk per call).
//     A replay clears the original's syncFailure, publishes it with origin
//     dlq-replay, and only then removes the dead letter.
//   - Replay by boundary: Replay (a ReplayQuery: a window of occurredAt or
//     createdAt, a source or device, a state; DryRun counts, Rebuild first
//     takes the chunk's rows out of the read model) and ListEvents (an
//     EventsQuery: what a replay would touch).
//   - Verify and repair: Verify (a VerifyQuery) compares, chunk by chunk,
//     the synced originals with the rows, the rows with the originals and
//     the statistics with the rows; Repair re-publishes what is missing
//     and recomputes the statistics.
//   - The journey: Journey follows one original (by id or idempotency key)
//     from its outbox entry through the stream, its replay lane, the
//     dead-letter stream and the consumer group to its read-model row.
//   - Halted retries: ResumeRetries (a RetriesQuery: a failure class)
//     clears a halt of the error-streak rule for the group's workers and
//     the stream's dispatchers, in Redis (stream.Streak), where every
//     process reads it.
//
// Every action that publishes (DLQ replay, replay, repair) publishes into
// the replay lane (stream.Keys.Replay), which the workers read only when
// the stream has nothing for them, at a bounded rate: live events keep
// their latency while a large window is replayed.
//
// Queries are typed (time.Time, store.TimeField) in the store.EventQuery
// style; a zero bound is open where a window may be. Results are JSON
// types: the admin API answers them as they are and the CLI decodes them.
//
// # Errors
//
// An error a caller can act on is an *Error whose Kind errors.Is matches:
// ErrInvalid (Fields names each invalid field: 422 at the API),
// ErrNotFound (404), ErrNotAvailable (this instance lacks the backend:
// 501) and ErrUnavailable (Redis, PostgreSQL or the store failed or is
// unreachable: 503; the action can run again). Any other error is the
// action's own failure (500).
//
// Every repair re-enters the normal path, a stream message that the worker
// projects idempotently; no action writes a read-model row itself.
package operator
