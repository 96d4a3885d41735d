// Package stream is the one package of outboxd that talks to Redis for the
// pipeline: the dispatcher, the worker, the reconciler, the status and the
// operator actions all go through it, and no other production package
// imports go-redis (golangci-lint's depguard holds that).
//
// # A map
//
//   - Keys: the name of every Redis key, each from one method: the stream,
//     its dead-letter stream (<stream>:dlq), the consumer group's delivery
//     budgets (<stream>:<group>:failures), the replay lane
//     (<stream>:replay: ReplayLane gives its keys as a stream of its own),
//     the error-streak rule's state (Streak) and, for a stream split into
//     partitions, each partition's keys under one hash tag.
//   - Client: the pipeline's Redis, over a go-redis universal client (a
//     single node, Sentinel or a Cluster), with the stream's length policy
//     (Config.MaxLen). Trim removes what every consumer group has
//     acknowledged (trim.go); Memory, Lags, Writable and IsOOM tell how full
//     Redis is (memory.go). Its reads: Len, ScanBack (a bounded look back in a
//     stream), Figures (the status's lengths and pending count),
//     Deliveries (where entries stand in the group), and the dead-letter
//     stream's DeadLetters, DeadLettersByID and DeleteDeadLetters.
//     Figures include the replay lane's (length, pending, lag, entries
//     read) and the halted retries.
//   - Publisher: the one way a message gets into a stream: a batch of
//     outbox messages in one pipeline, behind an optional circuit breaker
//     (failpolicy.NewBreaker). Publish takes the stored message JSON (the
//     dispatcher's outbox entries), PublishEvents originals with their
//     origin (the reconciler, replays), in a span of its own linked to the
//     originals' ingest traces when tracing is on (docs/tracing.md);
//     PublishError and Added tell which messages of a batch went in.
//   - Group: a consumer of the consumer group, with what a worker does:
//     Ensure (create the group and the stream), Read (XREADGROUP, never
//     BLOCK 0; ReadNew waits on the stream and its replay lane at once),
//     Reclaim (XAUTOCLAIM, trimmed entries included), Budgets,
//     Finish (dead letters, XACK and budgets in one MULTI/EXEC), Touch
//     (keep held entries from being taken over), Consumers and
//     RemoveConsumer (housekeeping).
//   - Entry: a stream entry as read (Values nil once its data is gone);
//     DeadLetter: the dead-letter record, one type that the worker encodes
//     and the operator decodes.
//   - Streak: the error-streak rule of a component (the group's workers,
//     the stream's dispatchers) for all its processes, a hash changed by
//     one script per operation (failpolicy.SharedStreak).
//   - Failure and IsNoGroup: how Redis errors are classified for the
//     failure policy (outage or unknown reply; the consumer group gone).
//
// # Names and layout
//
// A stream entry has one field, outbox.PayloadField ("payload"), holding
// an outbox.Message as JSON (with the trace context of the span that put
// it there, "traceparent", when that was traced). A dead letter has the fields category, code,
// error, entryId, eventId, stream, group, consumer, deliveries, at and
// payload; dead letters written before the code field existed carry the
// code in reason, and Decode reads it there.
//
// A stream of one partition (the default; --partitions splits it) keeps
// the key names it had before partitions existed: event-stream,
// event-stream:dlq, event-stream:read-model:failures. A partitioned
// stream's keys are those of each partition (Keys.Split, Keys.Partition).
package stream
