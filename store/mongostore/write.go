package mongostore

import (
	"context"
	"fmt"

	"github.com/256dpi/lungo"
	"go.mongodb.org/mongo-driver/bson"
	"go.mongodb.org/mongo-driver/bson/primitive"

	"github.com/outboxd/outboxd/outbox"
)

// WriteTx runs fn in one MongoDB transaction (majority write concern),
// bounded by ctx's deadline (or Options.OpTimeout), the commit included:
// see runTx for what runs again. The writer above adds no retry loop of
// its own for transient errors (only one run again after a lost key race).
func (s *Store) WriteTx(ctx context.Context, fn func(ctx context.Context, tx outbox.Tx) error) error {
	return s.runTx(ctx, "writing events", func(sc lungo.ISessionContext) error { return fn(sc, s.Tx(sc)) })
}

// Tx returns the writer's view of a transaction the caller runs on this
// store's client (s.Database().Client().StartSession(), then
// WithTransaction): outbox.Writer.WriteInTx stores events in it, so they
// commit or abort with the caller's own writes.
func (s *Store) Tx(sc lungo.ISessionContext) outbox.Tx { return &tx{s: s, sc: sc} }

type tx struct {
	s  *Store
	sc lungo.ISessionContext
}

func (t *tx) LookupKeys(ctx context.Context, keys []string) (map[string]outbox.KeyRecord, error) {
	out := make(map[string]outbox.KeyRecord, len(keys))
	if len(keys) == 0 {
		return out, nil
	}
	ctx = t.ctx(ctx)
	cur, err := t.s.events.Find(ctx, bson.M{"idempotencyKey": bson.M{"$in": keys}},
		findOptions(ctx).SetProjection(bson.M{"_id": 1, "idempotencyKey": 1, "contentHash": 1}))
	if err != nil {
		return nil, wrap(err, "looking up idempotency keys")
	}
	var found []struct {
		ID          primitive.ObjectID `bson:"_id"`
		Key         string             `bson:"idempotencyKey"`
		ContentHash string             `bson:"contentHash"`
	}
	if err := cur.All(ctx, &found); err != nil {
		return nil, wrap(err, "reading idempotency keys")
	}
	for _, f := range found {
		out[f.Key] = outbox.KeyRecord{ID: f.ID.Hex(), ContentHash: f.ContentHash}
	}
	return out, nil
}

func (t *tx) InsertEvents(ctx context.Context, events []outbox.Event) error {
	docs := make([]any, len(events))
	for i := range events {
		d, err := toEventDoc(&events[i])
		if err != nil {
			return err
		}
		docs[i] = d
	}
	if _, err := t.s.events.InsertMany(t.ctx(ctx), docs); err != nil {
		if classify(err) == classDuplicateKey {
			return &Error{Op: fmt.Sprintf("inserting %d originals", len(events)), Kind: outbox.ErrDuplicateKey, Err: err}
		}
		return wrap(err, "inserting %d originals", len(events))
	}
	return nil
}

func (t *tx) InsertEntries(ctx context.Context, entries []outbox.Entry) error {
	docs := make([]any, len(entries))
	for i, e := range entries {
		eid, err := primitive.ObjectIDFromHex(e.EventID)
		if err != nil {
			return fmt.Errorf("entry of event %q: not an ObjectID: %w", e.EventID, err)
		}
		docs[i] = entryDoc{ID: primitive.NewObjectID(), EventID: eid, Stream: e.Stream, Partition: e.Partition, Message: e.Message, CreatedAt: e.CreatedAt.UTC(),
			TraceParent: e.TraceParent}
	}
	if _, err := t.s.outbox.InsertMany(t.ctx(ctx), docs); err != nil {
		return wrap(err, "inserting %d outbox entries", len(entries))
	}
	return nil
}

// ctx returns the session context: the writer passes the context it got
// from WriteTx (the session context itself), or a context derived from it.
func (t *tx) ctx(ctx context.Context) context.Context {
	if sc, ok := ctx.(lungo.ISessionContext); ok {
		return sc
	}
	return t.sc
}
