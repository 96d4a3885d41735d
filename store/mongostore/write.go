package mongostore

import (
	"context"
	"errors"
	"fmt"

	"github.com/256dpi/lungo"
	"go.mongodb.org/mongo-driver/bson"
	"go.mongodb.org/mongo-driver/bson/primitive"
	"go.mongodb.org/mongo-driver/mongo"

	"github.com/outboxd/outboxd/outbox"
)

// WriteTx runs fn in one MongoDB transaction (majority write concern),
// bounded by ctx's deadline (or Options.OpTimeout), the commit included:
// see runTx for what runs again. The writer above adds no retry loop of
// its own for transient errors (only one run again after a lost key race).
func (s *Store) WriteTx(ctx context.Context, fn func(ctx context.Context, tx outbox.Tx) error) error {
	return s.runTx(ctx, "writing events", func(sc lungo.ISessionContext) error { return fn(sc, s.newTx(sc)) })
}

// RunTx runs fn in one MongoDB transaction of the store's loop, the one
// its own writes run in (see runTx): majority write concern, run again
// after a TransientTransactionError (a write conflict, an election), the
// commit sent again after an unknown result, all within ctx's deadline
// (Options.OpTimeout when ctx has none), the commit included; then the
// error is the store's (store.IsUnavailable tells an outage). fn gets the
// driver's session context, for the caller's own writes on its own
// collections (any of the client's databases), and the writer's view of the
// transaction, for outbox.Writer.WriteInTx: the caller's writes and the
// events commit together or not at all. fn's own error aborts the
// transaction and comes back as it is.
//
// fn may run more than once: make it repeatable. When a commit's result
// stayed unknown the caller cannot tell whether it committed; the retry
// that follows (the caller's, with the same idempotency key) must not
// apply its own writes twice. Write the event first and skip your own
// writes when it is a Duplicate:
//
//	err := st.RunTx(ctx, func(sc mongo.SessionContext, tx outbox.Tx) error {
//		res, err := w.WriteInTx(sc, tx, []outbox.Input{{IdempotencyKey: "order-42", …}})
//		if err != nil {
//			return err
//		}
//		if res[0].Duplicate {
//			return nil // committed by an earlier run: the order is in too
//		}
//		_, err = orders.InsertOne(sc, order)
//		return err
//	})
//
// RunTx needs a server: on lungo's engine (LungoMemory) it fails.
func (s *Store) RunTx(ctx context.Context, fn func(sc mongo.SessionContext, tx outbox.Tx) error) error {
	if s.lungo {
		return errors.New("error running a transaction: Store.RunTx hands the driver's session context, which lungo's engine (" + LungoMemory + ") has none of; use a replica set")
	}
	return s.runOwnTx(ctx, func(sc lungo.ISessionContext, t outbox.Tx) error {
		msc, ok := sc.(*lungo.MongoSessionContext)
		if !ok {
			return fmt.Errorf("error running a transaction: unexpected session context %T", sc)
		}
		dsc, ok := msc.Context.(mongo.SessionContext)
		if !ok {
			return fmt.Errorf("error running a transaction: unexpected session context %T", msc.Context)
		}
		return fn(dsc, t)
	})
}

// runOwnTx is RunTx with lungo's session context, on a server and on
// lungo (the tests' seam, internal/mongoseam).
func (s *Store) runOwnTx(ctx context.Context, fn func(sc lungo.ISessionContext, tx outbox.Tx) error) error {
	return s.runTx(ctx, "running the caller's transaction", func(sc lungo.ISessionContext) error { return fn(sc, s.newTx(sc)) })
}

// newTx returns the writer's view of the transaction of sc.
func (s *Store) newTx(sc lungo.ISessionContext) outbox.Tx { return &tx{s: s, sc: sc} }

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
// from WriteTx (the session context itself), the driver's session context
// RunTx handed its caller, or a context derived from either.
func (t *tx) ctx(ctx context.Context) context.Context {
	if sc, ok := ctx.(lungo.ISessionContext); ok {
		return sc
	}
	if !t.s.lungo && mongo.SessionFromContext(ctx) != nil {
		return ctx
	}
	return t.sc
}
