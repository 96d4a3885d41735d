// Package projection runs a read model written in SQL: a file of
// statements with named parameters bound from the original (:eventId,
// :idempotencyKey, :sourceKey, :deviceKey, :type, :occurredAt,
// :createdAt, :payload and :payload.<path> for a field of the payload),
// which the worker runs for a whole batch in its one transaction, as one
// pipeline (see docs/projections.md).
//
// Load (or Parse) reads a file; Prepare checks every statement against
// PostgreSQL and learns the type it infers for each parameter; the File is
// then a worker.PipelinedProjector, and with a `-- key: TABLE.COLUMN` line
// a worker.Checker, so verify, the audit and repair work on its read
// model, a worker.Unprojector (replay --rebuild; `-- unproject:`
// statements take the removed originals' share out of derived rows) and a
// worker.Recomputer (repair; `-- recompute:` statements set derived rows
// to what the rows say). Demo is the demo read model (the events and device_daily_stats
// tables of the migrations) as such a file.
package projection
