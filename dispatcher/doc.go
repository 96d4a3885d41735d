// Package dispatcher relays outbox entries from MongoDB into the Redis
// stream: the one state transition "outbox entry → stream entry".
//
// A Dispatcher follows a change stream on the outbox collection (inserts
// only, filtered in Go so that one code path serves a real replica set and
// the embedded engine, which panics on change-stream pipelines). It relays
// entries in batches: one pipelined XADD per batch (field "payload" carries
// the entry's message), then one UpdateMany that sets dispatchedAt on the
// batch, then a checkpoint of the change stream's resume token in the
// dispatcher state document (outbox.DispatcherCollection, one document per
// stream). The order of the three steps is the delivery guarantee: nothing is
// marked dispatched and no checkpoint moves past an entry that is not in the
// stream, so a crash anywhere yields duplicates (which workers absorb), never
// loss.
//
// # Start-up and lost positions
//
// When it becomes the leader, the dispatcher opens the change stream first
// (from the saved resume token, or from now when there is none), and only
// then relays every undispatched outbox entry of its stream, oldest first.
// Anything committed while it catches up is therefore either seen by the
// catch-up scan or delivered by the already open stream (entries seen by both
// are relayed once). When the saved token is no longer in the oplog, is
// corrupt, or the open stream falls off the oplog (code 286 on a replica set,
// lungo.ErrLostOplogPosition or "unable to resume" on the embedded engine),
// the dispatcher counts it (outboxd_dispatcher_history_lost_total), reopens
// the stream from now and catches up from the outbox again: no retry loop on
// a dead token.
//
// The embedded engine's oplog is small (1,000 entries by default) and every
// write goes into it, the dispatcher's own dispatchedAt updates included, so
// a large catch-up there usually ends with one counted history loss and a
// second, short catch-up. An idle embedded stream also has no post-batch
// resume token: the dispatcher then keeps the saved token and only advances
// checkpointAt. A real replica set provides a token while idle, and it is
// saved every Config.IdleCheckpoint.
//
// # Leadership
//
// One dispatcher per stream relays at a time. The state document carries a
// lease (owner, leaseExpiresAt) and a fencing term. A dispatcher takes an
// expired or released lease with a conditional update that increments the
// term, renews it every third of Config.LeaseTTL, and writes every
// checkpoint with the filter {_id: stream, term: myTerm}, so a paused former
// leader can never move the checkpoint after another took over; when fenced
// out it stops relaying and goes back to standby. Standbys poll the lease at
// the same interval.
//
// # Redis outages
//
// A failed XADD is retried with jittered exponential back-off
// (Config.BackoffMax) until Redis answers or the dispatcher stops; the batch
// is neither marked nor checkpointed meanwhile. Ingest does not depend on
// Redis and is unaffected.
//
// # Stream length
//
// Config.MaxStreamLen is 0 (no trimming) by default: trimming can delete
// entries that a consumer group has not acknowledged yet, so the stream
// length is an operator's decision (XTRIM, or a MAXLEN chosen well above the
// worst-case backlog); the worker counts trimmed pending entries and the
// reconciler re-publishes them.
//
// Dispatched outbox entries expire through the TTL index that the
// migrations package creates (--outbox-retention).
package dispatcher
