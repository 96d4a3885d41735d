package mongostore

import (
	"cmp"
	"context"
	"fmt"
	"time"

	"github.com/256dpi/lungo"
	"go.mongodb.org/mongo-driver/bson"
	"go.mongodb.org/mongo-driver/bson/primitive"
	"go.mongodb.org/mongo-driver/mongo"
	"go.mongodb.org/mongo-driver/mongo/options"

	"github.com/outboxd/outboxd/outbox"
	"github.com/outboxd/outboxd/store"
)

// pollDefault is the feed's default pause after an empty look, and its
// MaxAwaitTime on a server.
const pollDefault = 100 * time.Millisecond

// endOfFeed are the change events after which a change stream delivers
// nothing more: the collection or database is gone or renamed. The server
// closes the cursor after invalidate; TryNext then returns false with no
// error forever.
var endOfFeed = []string{"invalidate", "drop", "rename", "dropDatabase"}

// feedPipeline is the change-stream pipeline on a server: inserts into
// stream (into its partition part, when it is one of several) and the
// end-of-feed events, so the dispatcher's own dispatchedAt updates and the
// TTL deletes never travel back. lungo panics on any pipeline, so on lungo
// the same filter runs in Go (accept).
func feedPipeline(stream string, part store.Partition) mongo.Pipeline {
	insert := bson.D{{Key: "operationType", Value: "insert"}, {Key: "fullDocument.stream", Value: stream}}
	if !part.Whole() {
		insert = append(insert, bson.E{Key: "fullDocument.partition", Value: partitionValue(part)})
	}
	return mongo.Pipeline{{{Key: "$match", Value: bson.D{{Key: "$or", Value: bson.A{
		insert,
		bson.D{{Key: "operationType", Value: bson.D{{Key: "$in", Value: endOfFeed}}}},
	}}}}}}
}

// partitionValue matches the partition field of part's entries: partition
// 0 is stored absent (entryDoc), so it matches a missing field too.
func partitionValue(part store.Partition) any {
	if part.Index == 0 {
		return bson.D{{Key: "$in", Value: bson.A{nil, 0}}}
	}
	return part.Index
}

// OpenFeed opens a change stream on the outbox after from (resumeAfter),
// or from now, within ctx's deadline (or Options.OpTimeout). A token the
// server says is gone for good (ChangeStreamHistoryLost and its relatives,
// see codeClasses) or that is no document is reported as a lost position;
// any other failure to resume is reported as what it is (an outage is
// unavailable), and the dispatcher tries the same token again later.
func (s *Store) OpenFeed(ctx context.Context, stream string, from store.Position, opts store.FeedOptions) (store.Feed, error) {
	poll := cmp.Or(opts.PollInterval, pollDefault)
	csOpts := options.ChangeStream().SetMaxAwaitTime(poll).SetBatchSize(1000)
	pipeline := feedPipeline(stream, opts.Partition)
	if s.lungo {
		pipeline = mongo.Pipeline{}
	}
	if from != nil {
		if err := bson.Raw(from).Validate(); err != nil {
			return nil, fmt.Errorf("%w: the saved resume token is not a document: %w", store.ErrPositionLost, err)
		}
		csOpts.SetResumeAfter(bson.Raw(from))
	}
	wctx, cancel := s.opctx(ctx)
	defer cancel()
	cs, err := s.outbox.Watch(wctx, pipeline, csOpts)
	if err != nil {
		if from != nil {
			return nil, wrapFeed(err, "opening the change stream on %s", s.opts.OutboxCollection)
		}
		return nil, wrap(err, "opening the change stream on %s", s.opts.OutboxCollection)
	}
	return &feed{cs: cs, coll: s.opts.OutboxCollection, stream: stream, part: opts.Partition, poll: poll, opTimeout: s.opts.OpTimeout, pos: from,
		pause: s.lungo}, nil
}

// feed is a change stream read as batches of entries.
type feed struct {
	cs     lungo.IChangeStream
	coll   string // the outbox collection's name
	stream string
	part   store.Partition
	poll   time.Duration
	// opTimeout is how long a getMore may take beyond the await time.
	opTimeout time.Duration
	pos       store.Position
	// pause tells Next to wait poll after an empty look: lungo's TryNext
	// returns at once. A server's getMore waits up to its await time (the
	// poll interval) itself, so a pause after it would only delay the
	// next entry by as much.
	pause bool
	// ended is set once an end-of-feed event arrived; later Nexts fail.
	ended error
}

// changeEvent is the part of a change event the feed reads.
type changeEvent struct {
	OperationType string   `bson:"operationType"`
	FullDocument  bson.Raw `bson:"fullDocument"`
	// ClusterTime is the time of the commit that inserted the entry: its
	// entry's ReadAfter (ClusterTimePosition), for the worker's read.
	ClusterTime primitive.Timestamp `bson:"clusterTime"`
}

// Next reads change events until max entries of the stream arrived, the
// stream is quiet, or wait has passed. The position moves with every event
// read except the end-of-feed ones, whose token must never be saved: a
// stream resumed after an invalidate starts after the drop and would miss
// the entries of a new outbox collection. Every getMore it sends has a
// bound: the server answers one after the await time (the poll interval),
// and one not answered within OpTimeout more fails the call as unavailable
// (the dispatcher reopens the feed from its position).
func (f *feed) Next(ctx context.Context, max int, wait time.Duration) ([]outbox.Entry, error) {
	if f.ended != nil {
		return nil, f.ended
	}
	deadline := time.Now().Add(wait)
	// A getMore starts only before deadline, so each has at least
	// opTimeout beyond its await time.
	gctx, cancel := context.WithDeadline(ctx, deadline.Add(f.poll+f.opTimeout))
	defer cancel()
	var out []outbox.Entry
	for {
		if f.cs.TryNext(gctx) {
			var ev changeEvent
			if err := f.cs.Decode(&ev); err != nil {
				// The entry is still undispatched: the next catch-up relays it.
				f.pos = store.Position(f.cs.ResumeToken())
				continue
			}
			if isEndOfFeed(ev.OperationType) {
				f.ended = fmt.Errorf("%w: change event %q on %s", store.ErrFeedInvalidated, ev.OperationType, f.coll)
				if len(out) > 0 {
					return out, nil
				}
				return nil, f.ended
			}
			f.pos = store.Position(f.cs.ResumeToken())
			if e, ok := f.accept(ev); ok {
				out = append(out, e)
				if len(out) >= max {
					return out, nil
				}
			}
			continue
		}
		if err := f.cs.Err(); err != nil {
			if ctx.Err() != nil {
				return out, ctx.Err()
			}
			if len(out) > 0 {
				return out, nil // the error comes back on the next call
			}
			return nil, wrapFeed(err, "reading the change stream on %s", f.coll)
		}
		// Empty batch: the post-batch resume token (none on lungo) is the
		// position, so quiet periods move the checkpoint too.
		if tok := f.cs.ResumeToken(); tok != nil {
			f.pos = store.Position(tok)
		}
		if len(out) > 0 || !time.Now().Before(deadline) {
			return out, nil
		}
		if !f.pause {
			continue // the next getMore awaits new entries
		}
		t := time.NewTimer(min(f.poll, time.Until(deadline)))
		select {
		case <-ctx.Done():
			t.Stop()
			return nil, ctx.Err()
		case <-t.C:
		}
	}
}

// accept returns the entry of an insert of an undispatched entry of the
// feed's stream (on lungo every change event arrives; on a server the
// pipeline already filtered), with the event's cluster time as its
// ReadAfter.
func (f *feed) accept(ev changeEvent) (outbox.Entry, bool) {
	if ev.OperationType != "insert" || ev.FullDocument == nil {
		return outbox.Entry{}, false
	}
	var d entryDoc
	if err := bson.Unmarshal(ev.FullDocument, &d); err != nil {
		return outbox.Entry{}, false // relayed by the next catch-up
	}
	inPart := f.part.Whole() || d.Partition == f.part.Index
	if d.Stream != f.stream || !inPart || d.DispatchedAt != nil {
		return outbox.Entry{}, false
	}
	e := d.entry()
	e.ReadAfter = ClusterTimePosition(ev.ClusterTime)
	return e, true
}

func isEndOfFeed(op string) bool {
	for _, e := range endOfFeed {
		if op == e {
			return true
		}
	}
	return false
}

// Position returns the resume token after the last event read.
func (f *feed) Position() store.Position { return f.pos }

// Close closes the change stream.
func (f *feed) Close(ctx context.Context) error { return f.cs.Close(ctx) }

// Undispatched reads the undispatched entries of stream (of part) after the
// given id, served by the undispatched index (IndexUndispatchedPartition
// for one partition of several).
func (s *Store) Undispatched(ctx context.Context, stream string, part store.Partition, after string, limit int) ([]outbox.Entry, error) {
	filter := bson.D{{Key: "stream", Value: stream}, {Key: "dispatchedAt", Value: nil}}
	if !part.Whole() {
		filter = bson.D{{Key: "stream", Value: stream}, {Key: "partition", Value: partitionValue(part)}, {Key: "dispatchedAt", Value: nil}}
	}
	if after != "" {
		oid, err := primitive.ObjectIDFromHex(after)
		if err != nil {
			return nil, fmt.Errorf("entry id %q is not an ObjectID: %w", after, err)
		}
		filter = append(filter, bson.E{Key: "_id", Value: bson.M{"$gt": oid}})
	}
	ctx, cancel := s.opctx(ctx)
	defer cancel()
	cur, err := s.outbox.Find(ctx, filter, findOptions(ctx).SetSort(bson.D{{Key: "_id", Value: 1}}).SetLimit(int64(limit)))
	if err != nil {
		return nil, wrap(err, "reading undispatched outbox entries")
	}
	var docs []entryDoc
	if err := cur.All(ctx, &docs); err != nil {
		return nil, wrap(err, "reading undispatched outbox entries")
	}
	out := make([]outbox.Entry, len(docs))
	for i := range docs {
		out[i] = docs[i].entry()
	}
	return out, nil
}

// outboxEntriesFilter returns the filter and sort of OutboxEntries (nil
// when eventID is not an ObjectID: it names no entry), served by
// IndexOutboxEvent.
func outboxEntriesFilter(eventID string) (bson.D, bson.D) {
	oid, err := primitive.ObjectIDFromHex(eventID)
	if err != nil {
		return nil, nil
	}
	return bson.D{{Key: "eventId", Value: oid}}, bson.D{{Key: "_id", Value: 1}}
}

// OutboxEntries reads the entries of one original in _id order, served by
// IndexOutboxEvent.
func (s *Store) OutboxEntries(ctx context.Context, eventID string) ([]outbox.Entry, error) {
	filter, sort := outboxEntriesFilter(eventID)
	if filter == nil {
		return nil, nil
	}
	ctx, cancel := s.opctx(ctx)
	defer cancel()
	cur, err := s.outbox.Find(ctx, filter, findOptions(ctx).SetSort(sort))
	if err != nil {
		return nil, wrap(err, "reading the outbox entries of original %s", eventID)
	}
	var docs []entryDoc
	if err := cur.All(ctx, &docs); err != nil {
		return nil, wrap(err, "reading the outbox entries of original %s", eventID)
	}
	out := make([]outbox.Entry, len(docs))
	for i := range docs {
		out[i] = docs[i].entry()
	}
	return out, nil
}

// MarkDispatched runs one transaction that writes the lease document under
// its owner and term (so a concurrent take-over conflicts with it) and
// sets dispatchedAt on the entries.
func (s *Store) MarkDispatched(ctx context.Context, lease store.Lease, ids []string, at time.Time) error {
	oids := objectIDs(ids)
	return s.fencedTx(ctx, lease, bson.M{"$set": bson.M{"fencedAt": at.UTC()}}, func(sc lungo.ISessionContext) error {
		return s.markDispatched(sc, oids, at)
	})
}

// markDispatched sets dispatchedAt = at on those of oids not dispatched
// yet, in the transaction of sc.
func (s *Store) markDispatched(sc lungo.ISessionContext, oids []primitive.ObjectID, at time.Time) error {
	if len(oids) == 0 {
		return nil
	}
	_, err := s.outbox.UpdateMany(sc, bson.D{{Key: "_id", Value: idsIn(oids)}, {Key: "dispatchedAt", Value: nil}},
		bson.M{"$set": bson.M{"dispatchedAt": at.UTC()}})
	return wrap(err, "marking %d outbox entries dispatched", len(oids))
}

// Bounds of DeleteDispatched: each round deletes at most
// deleteDispatchedChunk entries (a find of their ids through the
// dispatchedAt index, one deleteMany of those ids), each round with its
// own deadline, and one call runs at most deleteDispatchedRounds rounds;
// the rest waits for the next call (and the TTL index removes the same
// entries on its own schedule).
const (
	deleteDispatchedChunk  = 5000
	deleteDispatchedRounds = 20
)

// DeleteDispatched removes entries dispatched before before (the TTL index
// does the same on its own schedule), in rounds of at most
// deleteDispatchedChunk entries, at most deleteDispatchedRounds a call, and
// returns how many it removed, also when a round failed.
func (s *Store) DeleteDispatched(ctx context.Context, before time.Time) (int64, error) {
	return s.deleteDispatched(ctx, before, deleteDispatchedChunk, deleteDispatchedRounds)
}

// deleteDispatched is DeleteDispatched in rounds of chunk, at most rounds.
func (s *Store) deleteDispatched(ctx context.Context, before time.Time, chunk, rounds int) (int64, error) {
	var total int64
	for range rounds {
		n, full, err := s.deleteDispatchedRound(ctx, before, chunk)
		total += n
		if err != nil || !full {
			return total, err
		}
	}
	return total, nil
}

// deleteDispatchedRound deletes at most chunk of the entries dispatched
// before before, oldest first, within ctx's deadline or OpTimeout; full
// tells that it found chunk of them (more may be left).
func (s *Store) deleteDispatchedRound(ctx context.Context, before time.Time, chunk int) (deleted int64, full bool, err error) {
	ctx, cancel := s.opctx(ctx)
	defer cancel()
	old := bson.D{{Key: "dispatchedAt", Value: bson.D{{Key: "$lt", Value: before.UTC()}}}}
	cur, err := s.outbox.Find(ctx, old, findOptions(ctx).SetSort(bson.D{{Key: "dispatchedAt", Value: 1}}).
		SetLimit(int64(chunk)).SetProjection(bson.D{{Key: "_id", Value: 1}}))
	if err != nil {
		return 0, false, wrap(err, "reading dispatched outbox entries past the retention")
	}
	var docs []struct {
		ID primitive.ObjectID `bson:"_id"`
	}
	if err := cur.All(ctx, &docs); err != nil {
		return 0, false, wrap(err, "reading dispatched outbox entries past the retention")
	}
	if len(docs) == 0 {
		return 0, false, nil
	}
	oids := make([]primitive.ObjectID, len(docs))
	for i, d := range docs {
		oids[i] = d.ID
	}
	res, err := s.outbox.DeleteMany(ctx, append(bson.D{{Key: "_id", Value: idsIn(oids)}}, old...))
	if err != nil {
		return 0, false, wrap(err, "deleting %d dispatched outbox entries", len(oids))
	}
	// The TTL monitor may have deleted some of them first: full counts
	// what the round found.
	return res.DeletedCount, len(docs) == chunk, nil
}
