// Command outboxd-peer is the peer of outboxd's benchmarks (make
// bench-peer): the pipeline a Go team would build for the same job with
// Watermill instead of outboxd. It is a module of its own, so that
// outboxd's go.mod does not link Watermill.
//
//   - ingest: POST /v1/events and /v1/events:batch take the JSON outboxd
//     takes and answer as outboxd does (id, idempotencyKey, duplicate). A
//     request is one PostgreSQL transaction: the originals (table
//     peer_originals, the system of record) and their messages, through
//     watermill-sql's publisher on that transaction, wrapped by the
//     forwarder's publisher (the transactional outbox of watermill-sql).
//   - forward: Watermill's Forwarder reads the outbox table with
//     watermill-sql's subscriber and publishes each message to the Redis
//     stream with watermill-redisstream.
//   - work: a Watermill router reads the stream in a consumer group
//     (watermill-redisstream) and, per message, projects the event into
//     the read model with outboxd's own statement (readmodel.Projector)
//     and marks its original synced, in one PostgreSQL transaction.
//   - dev: the three in one process.
//
// Usage, the way the benchmark harness runs outboxd's roles:
//
//	outboxd-peer ROLE --http-addr 127.0.0.1:8080 --postgres-url URL --redis-url URL --stream NAME --group NAME
//
// Every role serves GET /readyz once its tables exist. The libraries run
// with their defaults except where a flag says otherwise (the outbox
// subscriber's --poll-interval, 10ms, so that its latency is not one
// second).
package main
