// Package worker turns stream entries into read-model rows.
//
// A Worker reads the outbox stream (outbox.StreamDefault) as a member of a
// consumer group (outbox.GroupDefault) and, for each batch of up to
// Config.BatchSize entries:
//
//  1. decodes the messages and re-reads their originals from the store with
//     one read (the message only names the original);
//  2. projects the batch into PostgreSQL in one transaction through a
//     Projector (by default NewEventsProjector: events rows and
//     device_daily_stats counts, idempotently);
//  3. sets syncedAt on the originals with one store write;
//  4. acknowledges the entries with one XACK.
//
// Every step is safe to repeat, so a batch interrupted anywhere (a crash, a
// stop, an outage) converges when it is delivered again: the row exists, the
// stats are unchanged, syncedAt gets set. Delivery is at least once; effects
// in PostgreSQL are exactly once.
//
// On start a worker first drains its own pending entries (a restart under
// the same Config.Consumer name), and every Config.ClaimInterval it takes
// over, with XAUTOCLAIM, entries that other consumers left pending longer
// than Config.ClaimIdle. A missing consumer group (NOGROUP: Redis restarted
// empty) is recreated.
//
// Failures that are not a record's fault (a store unreachable, restarting or
// timing out) are retried with jittered backoff and never dead-letter
// anything; a circuit breaker pauses PostgreSQL work while it is down.
// Records that can never succeed (an unreadable entry, a missing or
// structurally invalid original) go to the dead-letter stream
// outbox.DLQStream(stream) and are acknowledged; a structurally invalid
// original also gets syncFailure{category: non_retryable}. A record whose
// projection keeps failing (a PostgreSQL data error, or an error wrapping
// ErrRecord) stays pending and is parked as poison after
// Config.MaxDeliveries deliveries.
package worker
