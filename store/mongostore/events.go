package mongostore

import (
	"context"
	"errors"
	"fmt"
	"math"
	"slices"
	"time"

	"github.com/256dpi/lungo"

	"go.mongodb.org/mongo-driver/bson"
	"go.mongodb.org/mongo-driver/bson/primitive"
	"go.mongodb.org/mongo-driver/mongo"
	"go.mongodb.org/mongo-driver/mongo/options"

	"github.com/outboxd/outboxd/outbox"
	"github.com/outboxd/outboxd/store"
)

// LoadEvents reads the originals with one Find on _id. On a sharded
// cluster, when ctx carries the originals' idempotency keys
// (store.WithEventKeys, as the worker passes them from its messages), the
// Find names them too, so mongos asks only the shards holding those keys
// (events is sharded on {idempotencyKey: 1}) instead of every shard;
// originals not found that way are read again by _id alone. When ctx
// carries the cluster times of the commits that wrote them
// (store.WithReadAfter: the positions the feed put into outbox.Entry.ReadAfter),
// every Find reads at or after the latest of them (readAfter), so a read
// right after a transaction that spanned shards finds its originals on
// every shard.
func (s *Store) LoadEvents(ctx context.Context, ids []string) (map[string]store.Loaded, error) {
	out := make(map[string]store.Loaded, len(ids))
	oids := objectIDs(ids)
	if len(oids) == 0 {
		return out, nil
	}
	keys := s.shardTargets(ctx, ids, oids)
	ctx, cancel := s.opctx(ctx)
	defer cancel()
	err := s.readAfter(ctx, store.ReadAfterOf(ctx), func(ctx context.Context) error {
		if err := s.loadEvents(ctx, loadEventsFilter(oids, keys), out); err != nil {
			return err
		}
		if keys == nil || len(out) == len(oids) {
			return nil
		}
		// A key of a message that does not name its original: read by id.
		var missing []primitive.ObjectID
		for _, oid := range oids {
			if _, ok := out[oid.Hex()]; !ok {
				missing = append(missing, oid)
			}
		}
		return s.loadEvents(ctx, loadEventsFilter(missing, nil), out)
	})
	if err != nil {
		return nil, err
	}
	return out, nil
}

// shardTargets returns the idempotency keys of the originals ids (oids)
// that ctx carries (store.WithEventKeys), on a sharded cluster only, where
// they target the shards holding them; nil elsewhere, or when ctx does not
// carry every key (a key of an id that is no ObjectID counts for nothing).
func (s *Store) shardTargets(ctx context.Context, ids []string, oids []primitive.ObjectID) []string {
	if !s.mongos || len(oids) != len(ids) {
		return nil
	}
	return store.EventKeysOf(ctx, ids)
}

// loadEventsFilter returns the filter of LoadEvents for the originals
// oids: by _id, and with their idempotency keys (keys, nil when unknown)
// too, which puts the find on the shards that hold them when events is
// sharded on {idempotencyKey: 1}.
func loadEventsFilter(oids []primitive.ObjectID, keys []string) bson.D {
	filter := bson.D{{Key: "_id", Value: idsIn(oids)}}
	if keys != nil {
		filter = append(filter, bson.E{Key: "idempotencyKey", Value: bson.D{{Key: "$in", Value: keys}}})
	}
	return filter
}

// loadEvents reads the originals filter names into out.
func (s *Store) loadEvents(ctx context.Context, filter bson.D, out map[string]store.Loaded) error {
	cur, err := s.events.Find(ctx, filter, findOptions(ctx))
	if err != nil {
		return wrap(err, "reading originals by %s", filter[len(filter)-1].Key)
	}
	defer cur.Close(context.WithoutCancel(ctx))
	return wrap(readEvents(ctx, cur, out), "reading originals by %s", filter[len(filter)-1].Key)
}

// readEvents decodes each document of cur on its own into out, by id: one
// that does not decode is an out[id].Err wrapping store.ErrCorrupt, not a
// failure of the read.
func readEvents(ctx context.Context, cur lungo.ICursor, out map[string]store.Loaded) error {
	for cur.Next(ctx) {
		var raw bson.Raw
		if err := cur.Decode(&raw); err != nil {
			return err
		}
		id, _ := raw.Lookup("_id").ObjectIDOK()
		var d eventDoc
		if err := bson.Unmarshal(raw, &d); err != nil {
			out[id.Hex()] = store.Loaded{Err: fmt.Errorf("%w: event %s: %w", store.ErrCorrupt, id.Hex(), err)}
			continue
		}
		ev, err := d.event()
		if err != nil {
			out[id.Hex()] = store.Loaded{Err: err}
			continue
		}
		out[ev.ID] = store.Loaded{Event: ev}
	}
	return cur.Err()
}

// EventByKey reads the original stored under key.
func (s *Store) EventByKey(ctx context.Context, key string) (*outbox.Event, error) {
	ctx, cancel := s.opctx(ctx)
	defer cancel()
	var d eventDoc
	err := s.events.FindOne(ctx, bson.M{"idempotencyKey": key}).Decode(&d)
	if isNoDocuments(err) {
		return nil, fmt.Errorf("event with idempotency key %q: %w", key, store.ErrNotFound)
	}
	if err != nil {
		return nil, wrap(err, "reading the event with idempotency key %q", key)
	}
	return d.event()
}

// MarkSynced sets syncedAt with one UpdateMany.
func (s *Store) MarkSynced(ctx context.Context, ids []string, at time.Time) (int64, error) {
	oids := objectIDs(ids)
	if len(oids) == 0 {
		return 0, nil
	}
	ctx, cancel := s.opctx(ctx)
	defer cancel()
	res, err := s.events.UpdateMany(ctx,
		bson.M{"_id": idsIn(oids), "syncedAt": nil},
		bson.M{"$set": bson.M{"syncedAt": at.UTC(), "syncFailure": nil}})
	if err != nil {
		return 0, wrap(err, "setting syncedAt on %d originals", len(oids))
	}
	return res.ModifiedCount, nil
}

// Park sets syncFailure unless the original is synced.
func (s *Store) Park(ctx context.Context, id string, f outbox.SyncFailure) (bool, error) {
	oid, err := primitive.ObjectIDFromHex(id)
	if err != nil {
		return false, nil
	}
	ctx, cancel := s.opctx(ctx)
	defer cancel()
	doc := failureDoc{Category: f.Category, Code: f.Code, Message: f.Message, At: f.At.UTC(), Deliveries: f.Deliveries}
	res, err := s.events.UpdateOne(ctx, bson.M{"_id": oid, "syncedAt": nil}, bson.M{"$set": bson.M{"syncFailure": doc}})
	if err != nil {
		return false, wrap(err, "setting syncFailure on %s", id)
	}
	return res.MatchedCount == 1, nil
}

// requeueEligible matches originals never claimed, or claimed before
// threshold. {lastRequeuedAt: null} matches a missing field too.
func requeueEligible(threshold time.Time) bson.E {
	return bson.E{Key: "$or", Value: bson.A{
		bson.D{{Key: "lastRequeuedAt", Value: nil}},
		bson.D{{Key: "lastRequeuedAt", Value: bson.D{{Key: "$lt", Value: threshold.UTC()}}}},
	}}
}

// candidateFilter is the reconciler's query: pending, created before
// createdBefore, never claimed or claimed before claimedBefore; sorted by
// candidateSort.
func candidateFilter(createdBefore, claimedBefore time.Time) bson.D {
	return append(pendingFilter(),
		bson.E{Key: "createdAt", Value: bson.D{{Key: "$lt", Value: createdBefore.UTC()}}},
		requeueEligible(claimedBefore),
	)
}

// candidateSort is the order of candidates: oldest first.
var candidateSort = bson.D{{Key: "createdAt", Value: 1}}

// Candidates runs candidateFilter, served by the reconciler index.
func (s *Store) Candidates(ctx context.Context, q store.CandidateQuery) ([]string, error) {
	ctx, cancel := s.opctx(ctx)
	defer cancel()
	cur, err := s.events.Find(ctx, candidateFilter(q.CreatedBefore, q.ClaimedBefore), findOptions(ctx).
		SetSort(candidateSort).SetLimit(int64(q.Limit)).SetProjection(bson.D{{Key: "_id", Value: 1}}))
	if err != nil {
		return nil, wrap(err, "querying reconciler candidates")
	}
	var docs []struct {
		ID primitive.ObjectID `bson:"_id"`
	}
	if err := cur.All(ctx, &docs); err != nil {
		return nil, wrap(err, "reading reconciler candidates")
	}
	ids := make([]string, len(docs))
	for i, d := range docs {
		ids[i] = d.ID.Hex()
	}
	return ids, nil
}

// Claim is one transaction of three commands whatever the number of ids:
// a find of the candidates among ids (their before-images, without
// payloads), an updateMany of those found, conditional on the same
// candidate filter, and the commit. Both read the transaction's snapshot,
// so the update claims exactly what the find returned; a reconciler that
// claims one of them meanwhile makes one of the two transactions fail
// with a WriteConflict, which runTx runs again (and the loser then no
// longer finds it).
func (s *Store) Claim(ctx context.Context, ids []string, at, claimedBefore time.Time) (store.Claimed, error) {
	var out store.Claimed
	oids := objectIDs(ids) // not an ObjectID: no such original
	if len(oids) == 0 {
		return out, nil
	}
	err := s.runTx(ctx, "claiming reconciler candidates", func(sc lungo.ISessionContext) error {
		read, err := s.claimRead(sc, oids, claimedBefore)
		if err != nil {
			return err
		}
		out = store.ClaimedOf(ids, read)
		found := make([]primitive.ObjectID, len(out.Events))
		for i, ev := range out.Events {
			found[i], _ = primitive.ObjectIDFromHex(ev.ID)
		}
		if len(found) == 0 {
			return nil
		}
		filter := append(bson.D{{Key: "_id", Value: idsIn(found)}}, pendingFilter()...)
		filter = append(filter, requeueEligible(claimedBefore))
		res, err := s.events.UpdateMany(sc, filter, bson.D{
			{Key: "$set", Value: bson.D{{Key: "lastRequeuedAt", Value: at.UTC()}}},
			{Key: "$inc", Value: bson.D{{Key: "requeueCount", Value: int64(1)}}},
		})
		if err != nil {
			return wrap(err, "claiming reconciler candidates")
		}
		if res.ModifiedCount != int64(len(found)) { // the snapshot holds them: cannot happen
			return fmt.Errorf("claiming reconciler candidates: claimed %d of the %d found", res.ModifiedCount, len(found))
		}
		return nil
	})
	if err != nil {
		return store.Claimed{}, err
	}
	return out, nil
}

// claimRead reads the before-images of the candidates among oids in sc's
// transaction, in one batch.
func (s *Store) claimRead(sc lungo.ISessionContext, oids []primitive.ObjectID, claimedBefore time.Time) (map[string]store.Loaded, error) {
	filter := append(bson.D{{Key: "_id", Value: idsIn(oids)}}, pendingFilter()...)
	filter = append(filter, requeueEligible(claimedBefore))
	cur, err := s.events.Find(sc, filter, findOptions(sc).
		SetProjection(bson.D{{Key: "payload", Value: 0}}).SetBatchSize(int32(min(len(oids), math.MaxInt32))))
	if err != nil {
		return nil, wrap(err, "reading reconciler candidates to claim")
	}
	defer func() { _ = cur.Close(context.WithoutCancel(sc)) }()
	read := make(map[string]store.Loaded, len(oids))
	if err := readEvents(sc, cur, read); err != nil {
		return nil, wrap(err, "reading reconciler candidates to claim")
	}
	return read, nil
}

// RollbackClaims is one unordered bulk write of an updateOne per claim,
// each conditional on the claim's own stamp.
func (s *Store) RollbackClaims(ctx context.Context, at time.Time, claimed []*outbox.Event) (int, error) {
	models := make([]mongo.WriteModel, 0, len(claimed))
	for _, ev := range claimed {
		oid, err := primitive.ObjectIDFromHex(ev.ID)
		if err != nil {
			continue // never claimed
		}
		var prev any
		if ev.LastRequeuedAt != nil {
			prev = ev.LastRequeuedAt.UTC()
		}
		models = append(models, mongo.NewUpdateOneModel().
			SetFilter(bson.D{{Key: "_id", Value: oid}, {Key: "lastRequeuedAt", Value: at.UTC()}}).
			SetUpdate(bson.D{
				{Key: "$set", Value: bson.D{{Key: "lastRequeuedAt", Value: prev}}},
				{Key: "$inc", Value: bson.D{{Key: "requeueCount", Value: int64(-1)}}},
			}))
	}
	if len(models) == 0 {
		return 0, nil
	}
	ctx, cancel := s.opctx(ctx)
	defer cancel()
	res, err := s.events.BulkWrite(ctx, models, options.BulkWrite().SetOrdered(false))
	if err != nil {
		return 0, wrap(err, "rolling back %d claims", len(models))
	}
	return int(res.MatchedCount), nil
}

// knownCategories are the syncFailure categories outboxd writes; Counts
// counts each through the reconciler index.
var knownCategories = []string{outbox.CategoryNonRetryable, outbox.CategoryPoison, store.CategoryRequeueExhausted}

// countQuery is one count that Counts runs: its collection, its filter and
// the index it names as hint, so the count is served by that index on
// every server whatever the planner would pick. Exported for the explain
// test, which explains exactly these.
type countQuery struct {
	// Name says what it counts: "pending", "failed", "failed:<category>",
	// "undispatched".
	Name       string
	Collection string
	Filter     bson.D
	Index      string
}

// countQueries returns the counts of Counts, in the order it runs them.
// The undispatched count spans every stream: stream >= "" (every string,
// type-bracketed) puts it on the undispatched index's first key.
func countQueries() []countQuery {
	q := []countQuery{{Name: "pending", Collection: EventsCollection, Filter: pendingFilter(), Index: IndexReconciler}}
	for _, cat := range knownCategories {
		q = append(q, countQuery{Name: "failed:" + cat, Collection: EventsCollection, Index: IndexReconciler,
			Filter: bson.D{{Key: "syncedAt", Value: nil}, {Key: "syncFailure.category", Value: cat}}})
	}
	return append(q,
		// Every parked original, whatever its category.
		countQuery{Name: "failed", Collection: EventsCollection, Filter: parkedFilter(), Index: IndexReconciler},
		countQuery{Name: "undispatched", Collection: OutboxCollection, Index: IndexUndispatched,
			Filter: bson.D{{Key: "stream", Value: bson.D{{Key: "$gte", Value: ""}}}, {Key: "dispatchedAt", Value: nil}}},
	)
}

// oldestPendingQuery is the filter, sort and index of the oldest pending
// original's read in Counts.
func oldestPendingQuery() (filter, sort bson.D, index string) {
	return pendingFilter(), candidateSort, IndexReconciler
}

// Counts reads the status figures, index-served (countQueries,
// oldestPendingQuery), and keeps them for Options.CountsTTL, so a burst
// of scrapes reads MongoDB once: Total is the collection's estimated count
// (metadata, no scan). A count that cannot finish within ctx fails the
// whole read, and that failure is kept for CountsTTL too, so scrapes
// during an outage do not run the counts again (a caller that went away,
// context.Canceled, is not kept). They are read on a secondary no more
// than Options.CountsMaxStaleness (90 s) behind the primary
// (secondaryPreferred), so the scrapes of every pod stay off the primary;
// a caller that asks for current figures (store.WithCurrentCounts) skips
// the cache and reads the primary.
func (s *Store) Counts(ctx context.Context) (store.Counts, error) {
	s.countsMu.Lock()
	defer s.countsMu.Unlock()
	current := store.CurrentCountsOf(ctx)
	if s.opts.CountsTTL > 0 && !current {
		if c := s.counts; c != nil && time.Since(c.ReadAt) < s.opts.CountsTTL {
			return *c, nil
		}
		if s.countsErr != nil && time.Since(s.countsErrAt) < s.opts.CountsTTL {
			return store.Counts{}, s.countsErr
		}
	}
	began := time.Now()
	c, err := s.readCounts(ctx, current)
	s.countsErr = nil
	switch {
	case err == nil:
		s.counts = &c
	case !errors.Is(err, context.Canceled):
		s.countsErr, s.countsErrAt = err, began
	}
	return c, err
}

// readCounts reads the figures of Counts: on a secondary of bounded
// staleness (countsEvents, countsOutbox), or on the primary when current.
func (s *Store) readCounts(ctx context.Context, current bool) (store.Counts, error) {
	events, outbox := s.countsEvents, s.countsOutbox
	if current {
		events, outbox = s.events, s.outbox
	}
	ctx, cancel := s.opctx(ctx)
	defer cancel()
	c := store.Counts{FailedByCategory: map[string]int64{}, ReadAt: time.Now()}
	var err error
	if c.Total, err = events.EstimatedDocumentCount(ctx); err != nil {
		return c, wrap(err, "estimating the number of originals")
	}
	c.Estimated = !s.lungo
	n := map[string]int64{}
	for _, q := range countQueries() {
		coll := outbox
		if q.Collection == EventsCollection { // the default name; the store's may be another (Options.EventsCollection)
			coll = events
		}
		v, err := coll.CountDocuments(ctx, q.Filter, options.Count().SetHint(s.hint(q.Index)))
		if err != nil {
			return c, wrap(err, "counting %s", q.Name)
		}
		n[q.Name] = v
	}
	c.Pending, c.Failed, c.Undispatched = n["pending"], n["failed"], n["undispatched"]
	var known int64
	for _, cat := range knownCategories {
		if v := n["failed:"+cat]; v > 0 {
			c.FailedByCategory[cat] = v
			known += v
		}
	}
	if other := c.Failed - known; other > 0 {
		c.FailedByCategory[store.CategoryOther] = other
	}
	c.Synced = max(0, c.Total-c.Pending-c.Failed)
	var oldest struct {
		CreatedAt time.Time `bson:"createdAt"`
	}
	filter, sort, index := oldestPendingQuery()
	err = events.FindOne(ctx, filter, options.FindOne().SetSort(sort).SetHint(s.hint(index)).
		SetProjection(bson.D{{Key: "createdAt", Value: 1}})).Decode(&oldest)
	switch {
	case isNoDocuments(err):
	case err != nil:
		return c, wrap(err, "finding the oldest pending original")
	default:
		t := oldest.CreatedAt.UTC()
		c.OldestPending = &t
	}
	return c, nil
}

// hint names the index of outboxd's name by its keys: a rebuild may have
// left it under its other name (rebuiltName).
func (s *Store) hint(name string) any {
	for _, spec := range s.indexSpecs(store.OutboxRetentionDefault) {
		if *spec.model.Options.Name == name {
			return spec.model.Keys
		}
	}
	return name
}

// syncedBeforeFilter selects the synced originals created before before:
// the filter of DeleteSynced and, with syncedAt of type date, the partial
// filter of the TTL index IndexEventsTTL, whose keys serve the query when
// the index exists.
func syncedBeforeFilter(before time.Time) bson.D {
	return bson.D{{Key: "createdAt", Value: bson.D{{Key: "$lt", Value: before.UTC()}}}, syncedPartial[0]}
}

// syncedPartial is the partial filter of IndexEventsTTL: synced originals
// only (a pending original's syncedAt is null, which is not a date).
var syncedPartial = bson.D{{Key: "syncedAt", Value: bson.D{{Key: "$type", Value: "date"}}}}

// scopedFilter narrows filter (syncedBeforeFilter) to the originals scope
// selects. The index that serves the query (the TTL index's keys, or
// createdAt's) has neither type nor sourceKey: the documents it reads are
// filtered, so a scope that leaves out many old originals makes each call
// read past them (within its maxTimeMS).
func scopedFilter(filter bson.D, scope store.SyncedScope) bson.D {
	if scope.Type != "" {
		filter = append(filter, bson.E{Key: "type", Value: scope.Type})
	}
	if scope.Source != "" {
		filter = append(filter, bson.E{Key: "sourceKey", Value: scope.Source})
	}
	if len(scope.ExceptTypes) > 0 {
		filter = append(filter, bson.E{Key: "type", Value: bson.D{{Key: "$nin", Value: scope.ExceptTypes}}})
	}
	if len(scope.ExceptSources) > 0 {
		filter = append(filter, bson.E{Key: "sourceKey", Value: bson.D{{Key: "$nin", Value: scope.ExceptSources}}})
	}
	return filter
}

// DeleteSynced reads the ids of at most limit synced originals created
// before before that scope selects, oldest first, leaves out those with an
// undispatched outbox entry, and deletes the rest while they are still
// synced. The TTL index of --event-retention (IndexEventsTTL) removes
// synced originals on its own schedule, without that outbox check and
// without a scope (docs/mongodb.md: retentions per type or source).
func (s *Store) DeleteSynced(ctx context.Context, before time.Time, scope store.SyncedScope, limit int) (int64, error) {
	if limit < 1 {
		return 0, fmt.Errorf("error deleting synced originals: limit must be positive (got %d)", limit)
	}
	ctx, cancel := s.opctx(ctx)
	defer cancel()
	cur, err := s.events.Find(ctx, scopedFilter(syncedBeforeFilter(before), scope), findOptions(ctx).
		SetSort(bson.D{{Key: "createdAt", Value: 1}}).SetLimit(int64(limit)).SetProjection(bson.D{{Key: "_id", Value: 1}}))
	if err != nil {
		return 0, wrap(err, "querying synced originals past the retention")
	}
	var docs []struct {
		ID primitive.ObjectID `bson:"_id"`
	}
	if err := cur.All(ctx, &docs); err != nil {
		return 0, wrap(err, "reading synced originals past the retention")
	}
	if len(docs) == 0 {
		return 0, nil
	}
	oids := make([]primitive.ObjectID, len(docs))
	for i, d := range docs {
		oids[i] = d.ID
	}
	cur, err = s.outbox.Find(ctx, bson.D{{Key: "eventId", Value: idsIn(oids)}, {Key: "dispatchedAt", Value: nil}},
		findOptions(ctx).SetProjection(bson.D{{Key: "eventId", Value: 1}}))
	if err != nil {
		return 0, wrap(err, "reading the undispatched entries of synced originals")
	}
	var entries []struct {
		EventID primitive.ObjectID `bson:"eventId"`
	}
	if err := cur.All(ctx, &entries); err != nil {
		return 0, wrap(err, "reading the undispatched entries of synced originals")
	}
	undispatched := map[primitive.ObjectID]bool{}
	for _, e := range entries {
		undispatched[e.EventID] = true
	}
	oids = slices.DeleteFunc(oids, func(id primitive.ObjectID) bool { return undispatched[id] })
	if len(oids) == 0 {
		return 0, nil
	}
	res, err := s.events.DeleteMany(ctx, append(bson.D{{Key: "_id", Value: idsIn(oids)}}, syncedPartial...))
	if err != nil {
		return 0, wrap(err, "deleting synced originals past the retention")
	}
	return res.DeletedCount, nil
}
