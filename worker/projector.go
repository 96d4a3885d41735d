package worker

import (
	"context"

	"github.com/jackc/pgx/v5"

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
