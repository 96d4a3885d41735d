// Package dispatcher relays outbox entries from the store into the Redis
// stream: the one state transition "outbox entry → stream entry".
//
// A Dispatcher follows the store's feed of the outbox (store.Store.OpenFeed:
// the outbox sequence on SQLite, a change stream on MongoDB) and relays
// entries in batches: one pipelined XADD per batch through a
// stream.Publisher (field "payload" carries the entry's message), then one
// store write (store.Store.MarkRelayed, fenced by the lease) that marks the
// batch dispatched and checkpoints the feed position in the lease's state
// together. The order of the two steps is the delivery guarantee: nothing
// is marked dispatched and no checkpoint moves past an entry that is not
// in the stream, so a crash anywhere yields duplicates (which workers
// absorb), never loss.
//
// The batches go through a pipeline (pipeline.go): while the feed delivers
// full batches (it is behind), and between full pages of a catch-up, the
// next batch is read while this one is added to the stream, and the store
// writes run on a goroutine of their own: a batch is handed over after its
// XADD and the relay goes on at once. Batches handed over while a write
// runs are merged into the next write, and while less than BatchSize
// entries wait, a write starts at most every Config.MarkInterval (100ms):
// a feed that delivers single events costs the store one write per
// interval, not one per batch (outboxd_dispatcher_mark_writes_total beside
// outboxd_dispatcher_batches_total). One write is in flight at a time, in
// batch order, holding only batches whose XADD went through, so the
// guarantee above holds; the relay waits for the writes (and writes what
// is queued at once) before an idle checkpoint, a scan of the outbox
// (catch-up, sweep: an entry whose write is still to come would read as
// undispatched and be relayed twice) and before it stops. A failed write
// (fenced, the store down) stops the relay; the batches added after it
// stay unmarked and are relayed again. A crash relays again the entries
// of at most one MarkInterval, or one write in flight.
//
// # Start-up and lost positions
//
// When it becomes the leader, the dispatcher opens the feed from the saved
// position and relays what it delivers: every entry committed after the
// position, in commit order (the entries before it were marked with the
// checkpoint). Without a saved position it opens the feed from now and only
// then relays every undispatched outbox entry of its stream in entry id
// order (the catch-up). Anything committed while it catches up is therefore
// either seen by the catch-up or delivered by the already open feed
// (entries seen by both are relayed once). The catch-up runs only when the
// feed cannot deliver what is undispatched because the id order is not the
// commit order on MongoDB (ObjectIDs of two writer processes within one
// second sort by their random process bytes), so a catch-up keeps each
// device's order only for entries of one writer process, or a second
// apart. When the saved position is no longer in the store's history, is
// unreadable, or the open feed falls off the history (code 286 on a replica
// set), the dispatcher counts it (outboxd_dispatcher_history_lost_total),
// reopens the feed from now and catches up from the outbox again: no retry
// loop on a dead position. A feed that ends because the outbox was dropped,
// renamed or restored (MongoDB's invalidate) is handled the same way and
// counted in outboxd_dispatcher_feed_invalidated_total; its position is
// never checkpointed.
//
// # The periodic sweep
//
// Every Config.SweepInterval the leader relays the undispatched entries
// older than Config.SweepMinAge. On a replica set a change stream opened at
// the primary's last applied optime can start after a commit that reserved
// an earlier timestamp but was not visible yet (an oplog hole); if that
// commit becomes visible after the catch-up, neither the catch-up nor the
// feed relays it. An entry whose change event could not be decoded is in the
// same place. The sweep relays both within Config.SweepInterval (counted in
// outboxd_dispatcher_swept_total); without it they would wait for the next
// leadership or the reconciler.
//
// # Maintenance: retention and the stream watch
//
// The leader's housekeeping runs in services of their own beside the relay
// (package internal/maintenance; maintenance.go), started when a
// dispatcher takes the lead and stopped when it loses it, so a standby
// deletes, trims and exports nothing. The retention service, every
// Config.SweepInterval (on the whole stream's or partition 0's dispatcher),
// deletes the dispatched entries older than Config.OutboxRetention and the
// synced originals past their retention: their type's
// (Config.EventRetentionTypes), else their source's
// (Config.EventRetentionSources), else Config.EventRetention (at most
// EventPurgeMax per retention a round; store.Store.DeleteSynced with a
// store.SyncedScope). A failed deletion is logged and tried again the next
// round: the relay never waits for it. The watch is below.
//
// # Leadership
//
// One dispatcher per stream relays at a time (package internal/leader): the
// store keeps a lease (owner, expiry) with a fencing term under the stream's
// name. A dispatcher takes an expired or released lease, incrementing the
// term, renews it every third of Config.LeaseTTL (each renewal bounded by
// the time the lease has left), and writes every mark and checkpoint
// under its owner and term, so a paused former leader can never
// move the checkpoint after another took over; when fenced out it stops
// relaying and goes back to standby. Standbys poll the lease at the same
// interval.
//
// # Redis outages
//
// A failed XADD is retried with jittered exponential back-off
// (Config.BackoffMax) until Redis answers or the dispatcher stops; the batch
// is neither marked nor checkpointed meanwhile. A circuit breaker around
// Redis (outboxd_dispatcher_breaker_state) opens after
// Config.BreakerFailures consecutive failed pipelines, stays open
// Config.BreakerTimeout and then lets one probe through, so a Redis that
// comes back is used again within BreakerTimeout. The error-streak rule
// (outboxd_error_streak, outboxd_retries_halted) watches the
// dispatcher's failures too; see Dispatcher.ResumeRetries. Ingest does not
// depend on Redis and is unaffected.
//
// # Tracing
//
// With tracing on (docs/tracing.md), each relayed entry that carries its
// ingest request's trace context (outbox.Entry.TraceParent) gets a relay
// span, a child of that context, and its stream message carries the relay
// span's traceparent for the worker; the batch's store calls are recorded
// under the first traced entry's span. Entries without a context are
// relayed as they are.
//
// # Reading after the commit
//
// An entry the store's feed delivered with the position of its commit
// (outbox.Entry.ReadAfter: on MongoDB the change event's cluster time) is
// relayed with that position in its message (outbox.Message.ReadAfter),
// so that the worker reads its original at or after that commit
// (store.WithReadAfter); an entry relayed by a catch-up or the sweep has
// none, and its message is relayed as ingest wrote it.
//
// # Stream length and Redis's memory
//
// The leader's watch service trims: every Config.TrimInterval (1s) it trims
// the stream and its replay lane below the lowest id any consumer group
// still needs and older than Config.StreamRetention
// (stream.Client.Trim), reads Redis's memory and the groups' lag, and
// exports them. The leader does it because there is one per stream, it
// holds the lease already, and it is the role that fills the stream; the
// watch runs beside the relay, so it goes on trimming, and freeing
// memory, while the relay holds. The relay reads only the watch's verdict
// (pressure.go): while used_memory is at or above Config.MemoryHigh
// percent of maxmemory, or Redis answers an XADD with OOM, it holds
// (Backpressure): no XADD, nothing marked, no
// checkpoint, outboxd_dispatcher_backpressure = 1; a full Redis does not
// open the breaker nor count for the streak rule, so the relay resumes by
// itself once memory is back. The stream.Client's MAXLEN policy
// (stream.Config.MaxLen, 0 by default) stays an operator's option; it can
// delete unacknowledged entries, which the worker counts as trimmed and
// the reconciler re-publishes.
package dispatcher
