// Package storetrace records the calls of a traced event to the storage
// port as OpenTelemetry client spans: Wrap returns a store.Store
// that starts a span around each operation of the event's path (the
// writer's transaction and its statements, the worker's reads and writes,
// the dispatcher's marks, the reconciler's claims, the operator's
// listings), and only under a span that records. Background work without
// one (feed polls, leases, counts) goes through untouched, and so does
// everything while tracing is off: the command wraps its store only when
// tracing is on.
//
// The spans follow the semantic conventions of database client calls, on
// the level of the port: db.system.name is the store's kind (sqlite or
// mongodb), db.operation.name the port's operation, db.collection.name the
// table or collection it reads or writes, db.operation.batch.size the ids of
// a call on several, and outboxd.event.id the id of a call on one. Ids only:
// no payload, no key, no query.
package storetrace

import (
	"context"
	"encoding/json"
	"time"

	"go.opentelemetry.io/otel/attribute"
	semconv "go.opentelemetry.io/otel/semconv/v1.40.0"
	"go.opentelemetry.io/otel/trace"

	"github.com/outboxd/outboxd/internal/tracing"
	"github.com/outboxd/outboxd/outbox"
	"github.com/outboxd/outboxd/store"
)

// Collections (tables) the operations touch.
const (
	collEvents = "events"
	collOutbox = "outbox"
	collLeases = "leases"
)

// Store is a store.Store whose calls under a recording span are spans of
// their own. Operations it does not list pass through (they embed).
type Store struct {
	store.Store
	system attribute.KeyValue
}

// Wrap returns st with its calls traced.
func Wrap(st store.Store) *Store {
	return &Store{Store: st, system: semconv.DBSystemNameKey.String(st.Kind())}
}

// Unwrap returns the store Wrap was given.
func (s *Store) Unwrap() store.Store { return s.Store }

// start starts the span of operation op on coll, about the ids given.
func (s *Store) start(ctx context.Context, op, coll string, ids ...string) (context.Context, trace.Span) {
	if !tracing.Enabled() || !trace.SpanFromContext(ctx).IsRecording() {
		return ctx, trace.SpanFromContext(context.Background())
	}
	attrs := []attribute.KeyValue{s.system, semconv.DBOperationName(op), semconv.DBCollectionName(coll)}
	switch {
	case len(ids) == 1:
		attrs = append(attrs, tracing.EventIDKey.String(ids[0]))
	case len(ids) > 1:
		attrs = append(attrs, semconv.DBOperationBatchSize(len(ids)))
	}
	return tracing.StartChild(ctx, "store."+op, trace.WithSpanKind(trace.SpanKindClient), trace.WithAttributes(attrs...))
}

// call runs f in the span of op.
func call[T any](ctx context.Context, s *Store, op, coll string, ids []string, f func(ctx context.Context) (T, error)) (T, error) {
	ctx, span := s.start(ctx, op, coll, ids...)
	v, err := f(ctx)
	tracing.End(span, err)
	return v, err
}

// PayloadSize measures payload as the wrapped store does
// (outbox.PayloadSizer), or by its JSON when it cannot.
func (s *Store) PayloadSize(payload json.RawMessage) (int, error) {
	if sizer, ok := s.Store.(outbox.PayloadSizer); ok {
		return sizer.PayloadSize(payload)
	}
	return len(payload), nil
}

// WriteTx runs fn in the store's transaction, in a span; the statements
// fn runs through its outbox.Tx are spans in it.
func (s *Store) WriteTx(ctx context.Context, fn func(ctx context.Context, tx outbox.Tx) error) error {
	_, err := call(ctx, s, "WriteTx", collEvents, nil, func(ctx context.Context) (struct{}, error) {
		return struct{}{}, s.Store.WriteTx(ctx, func(ctx context.Context, tx outbox.Tx) error {
			return fn(ctx, &txTrace{s: s, Tx: tx})
		})
	})
	return err
}

// txTrace traces the statements of a write transaction.
type txTrace struct {
	outbox.Tx
	s *Store
}

func (t *txTrace) LookupKeys(ctx context.Context, keys []string) (map[string]outbox.KeyRecord, error) {
	// The keys are the clients': their number only.
	ctx, span := t.s.start(ctx, "LookupKeys", collEvents)
	span.SetAttributes(semconv.DBOperationBatchSize(len(keys)))
	m, err := t.Tx.LookupKeys(ctx, keys)
	tracing.End(span, err)
	return m, err
}

// AnyKeyBetween forwards outbox.KeyRanger to the store's Tx (one index
// probe: no span of its own); a Tx without it answers true, so the writer
// looks up every form of a key, as it does for such a Tx.
func (t *txTrace) AnyKeyBetween(ctx context.Context, from, to string) (bool, error) {
	kr, ok := t.Tx.(outbox.KeyRanger)
	if !ok {
		return true, nil
	}
	return kr.AnyKeyBetween(ctx, from, to)
}

func (t *txTrace) InsertEvents(ctx context.Context, events []outbox.Event) error {
	_, err := call(ctx, t.s, "InsertEvents", collEvents, eventIDs(events), func(ctx context.Context) (struct{}, error) {
		return struct{}{}, t.Tx.InsertEvents(ctx, events)
	})
	return err
}

func (t *txTrace) InsertEntries(ctx context.Context, entries []outbox.Entry) error {
	ids := make([]string, len(entries))
	for i, e := range entries {
		ids[i] = e.EventID
	}
	_, err := call(ctx, t.s, "InsertEntries", collOutbox, ids, func(ctx context.Context) (struct{}, error) {
		return struct{}{}, t.Tx.InsertEntries(ctx, entries)
	})
	return err
}

func eventIDs(events []outbox.Event) []string {
	ids := make([]string, len(events))
	for i := range events {
		ids[i] = events[i].ID
	}
	return ids
}

// LoadEvents traces store.Store.LoadEvents.
func (s *Store) LoadEvents(ctx context.Context, ids []string) (map[string]store.Loaded, error) {
	return call(ctx, s, "LoadEvents", collEvents, ids, func(ctx context.Context) (map[string]store.Loaded, error) {
		return s.Store.LoadEvents(ctx, ids)
	})
}

// MarkSynced traces store.Store.MarkSynced.
func (s *Store) MarkSynced(ctx context.Context, ids []string, at time.Time) (int64, error) {
	return call(ctx, s, "MarkSynced", collEvents, ids, func(ctx context.Context) (int64, error) {
		return s.Store.MarkSynced(ctx, ids, at)
	})
}

// Park traces store.Store.Park.
func (s *Store) Park(ctx context.Context, id string, f outbox.SyncFailure) (bool, error) {
	return call(ctx, s, "Park", collEvents, []string{id}, func(ctx context.Context) (bool, error) {
		return s.Store.Park(ctx, id, f)
	})
}

// Claim traces store.Store.Claim.
func (s *Store) Claim(ctx context.Context, ids []string, at, claimedBefore time.Time) (store.Claimed, error) {
	return call(ctx, s, "Claim", collEvents, ids, func(ctx context.Context) (store.Claimed, error) {
		return s.Store.Claim(ctx, ids, at, claimedBefore)
	})
}

// RollbackClaims traces store.Store.RollbackClaims.
func (s *Store) RollbackClaims(ctx context.Context, at time.Time, claimed []*outbox.Event) (int, error) {
	ids := make([]string, len(claimed))
	for i, ev := range claimed {
		ids[i] = ev.ID
	}
	return call(ctx, s, "RollbackClaims", collEvents, ids, func(ctx context.Context) (int, error) {
		return s.Store.RollbackClaims(ctx, at, claimed)
	})
}

// ListEvents traces store.Store.ListEvents.
func (s *Store) ListEvents(ctx context.Context, q store.EventQuery) ([]*outbox.Event, error) {
	return call(ctx, s, "ListEvents", collEvents, nil, func(ctx context.Context) ([]*outbox.Event, error) {
		return s.Store.ListEvents(ctx, q)
	})
}

// Redrive traces store.Store.Redrive.
func (s *Store) Redrive(ctx context.Context, ids []string) (int64, error) {
	return call(ctx, s, "Redrive", collEvents, ids, func(ctx context.Context) (int64, error) {
		return s.Store.Redrive(ctx, ids)
	})
}

// Undispatched traces store.Store.Undispatched.
func (s *Store) Undispatched(ctx context.Context, stream string, part store.Partition, after string, limit int) ([]outbox.Entry, error) {
	return call(ctx, s, "Undispatched", collOutbox, nil, func(ctx context.Context) ([]outbox.Entry, error) {
		return s.Store.Undispatched(ctx, stream, part, after, limit)
	})
}

// MarkDispatched traces store.Store.MarkDispatched; the ids are the
// entries'.
func (s *Store) MarkDispatched(ctx context.Context, lease store.Lease, ids []string, at time.Time) error {
	_, err := call(ctx, s, "MarkDispatched", collOutbox, nil, func(ctx context.Context) (struct{}, error) {
		trace.SpanFromContext(ctx).SetAttributes(semconv.DBOperationBatchSize(len(ids)))
		return struct{}{}, s.Store.MarkDispatched(ctx, lease, ids, at)
	})
	return err
}

// MarkRelayed traces store.Store.MarkRelayed; the ids are the entries'.
func (s *Store) MarkRelayed(ctx context.Context, lease store.Lease, ids []string, cp store.Checkpoint) error {
	_, err := call(ctx, s, "MarkRelayed", collOutbox, nil, func(ctx context.Context) (struct{}, error) {
		trace.SpanFromContext(ctx).SetAttributes(semconv.DBOperationBatchSize(len(ids)))
		return struct{}{}, s.Store.MarkRelayed(ctx, lease, ids, cp)
	})
	return err
}

// SaveCheckpoint traces store.Store.SaveCheckpoint.
func (s *Store) SaveCheckpoint(ctx context.Context, lease store.Lease, cp store.Checkpoint) error {
	_, err := call(ctx, s, "SaveCheckpoint", collLeases, nil, func(ctx context.Context) (struct{}, error) {
		return struct{}{}, s.Store.SaveCheckpoint(ctx, lease, cp)
	})
	return err
}
