package worker

import (
	"context"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgxpool"

	"github.com/outboxd/outboxd/outbox"
)

// Projector writes a batch of originals into the read model. The default
// is readmodel.NewProjector (package readmodel: the events table and the
// daily statistics).
//
// The worker owns the transaction: it begins tx, calls Project once per
// attempt, and commits. A serialization failure or deadlock (40001, 40P01)
// makes the worker roll back and call Project again in a new transaction, so
// Project must only write through tx and keep no state between calls.
//
// events holds each original once (the worker de-duplicates the batch by
// event id) in ascending event id order; the slice and the events must not be
// retained. Project must be idempotent: the same event may come again in a
// later batch (redelivery, replay, reconciliation), and must then leave the
// read model unchanged.
//
// A returned error is classified by the worker: connection errors, timeouts
// and server shutdowns pause consumption and are retried; PostgreSQL data
// errors (classes 22 and 23) and errors wrapping ErrRecord count against the
// failing records, which are parked after Config.MaxDeliveries deliveries.
type Projector interface {
	Project(ctx context.Context, tx pgx.Tx, events []*outbox.Event) error
}

// ProjectorFunc adapts a function to Projector.
type ProjectorFunc func(ctx context.Context, tx pgx.Tx, events []*outbox.Event) error

// Project calls f.
func (f ProjectorFunc) Project(ctx context.Context, tx pgx.Tx, events []*outbox.Event) error {
	return f(ctx, tx, events)
}

// PipelinedProjector is a Projector that can also queue its writes on a
// pgx.Batch, none of them depending on a result of another: the worker then
// sends the whole transaction (BEGIN with its timeouts, the queued
// statements, COMMIT) as one pipeline, in one round trip instead of three or
// more. QueueProject must queue what Project writes; the worker calls it
// instead of Project, under the same rules (once per attempt, retried after
// a serialization failure or deadlock, errors classified alike). The
// worker prepares each statement's SQL once per connection, so the SQL
// should come from a small fixed set (the values go in as arguments). The
// default, readmodel's Projector, is one.
type PipelinedProjector interface {
	Projector
	QueueProject(b *pgx.Batch, events []*outbox.Event) error
}

// Preparer is a Projector that checks itself against PostgreSQL before
// its first batch: the worker calls Prepare in Start, and does not start
// when it fails. Prepare must be safe to call from several workers and
// cheap once it succeeded. A SQL projection (package projection) prepares
// its statements there.
type Preparer interface {
	Prepare(ctx context.Context, pool *pgxpool.Pool) error
}

// Checker is a Projector that can tell which originals its read model
// holds: verify, the continuous audit and verify --repair (which
// re-publishes the originals it does not hold) work on any read model whose
// projector is one. Projected returns those of ids that are projected,
// reading through tx (a read-only transaction). Where the projector is not
// a Checker, they say once that the read model cannot be checked.
type Checker interface {
	Projected(ctx context.Context, tx pgx.Tx, ids []string) (map[string]bool, error)
}

// TypeChecker is a Checker whose read model holds rows of some event
// types only: Checks reports whether originals of eventType get rows.
// Verify, the audit and verify --repair check only those originals (one of
// a type the projector only updates rows for, or skips, has no row by
// design and is not drift). Optional: a Checker that is not one is checked
// for every type. A SQL projection file with a `-- key:` line is one.
type TypeChecker interface {
	Checker
	Checks(eventType string) bool
}

// Unprojector is a Checker that can also remove the rows of originals
// (and fix what was derived from them), for replay --rebuild; it returns
// how many originals had rows. Optional: without it --rebuild is refused.
// A SQL projection file with a `-- key:` line is one.
type Unprojector interface {
	Checker
	Unproject(ctx context.Context, tx pgx.Tx, ids []string) (int64, error)
}

// Recomputer is a Checker that can also set what its read model derives
// from originals' rows (counters, totals) to what the rows say, for the
// given originals: verify --repair calls it, for the synced originals
// without rows it is about to re-publish, before it re-publishes them,
// so that each is counted once when projected again (a row deleted by hand
// left its count behind). Recompute returns how many of events it
// recomputed for; 0 when it has nothing to recompute. Optional: without
// it repair only re-publishes. A SQL projection file is one (its
// `-- recompute:` statements).
type Recomputer interface {
	Checker
	Recompute(ctx context.Context, tx pgx.Tx, events []*outbox.Event) (int, error)
}
