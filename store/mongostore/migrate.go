package mongostore

import (
	"context"
	"errors"
	"fmt"
	"slices"
	"time"

	"github.com/256dpi/lungo"
	"go.mongodb.org/mongo-driver/bson"
	"go.mongodb.org/mongo-driver/mongo"
	"go.mongodb.org/mongo-driver/mongo/options"

	"github.com/outboxd/outboxd/store"
)

// Index names.
const (
	IndexIdempotencyKey = "idempotencyKey_unique"
	IndexReconciler     = "reconciler"
	IndexUndispatched   = "undispatched"
	// IndexUndispatchedPartition serves the catch-up of one partition.
	IndexUndispatchedPartition = "undispatched_partition"
	IndexOutboxTTL             = "dispatched_ttl"
	// IndexEventsTTL expires synced originals --event-retention after
	// their createdAt (a partial TTL index: pending and parked originals
	// never match). It exists only while a retention is set.
	IndexEventsTTL = "synced_ttl"
	// IndexOutboxEvent serves an original's outbox entries
	// (store.Store.OutboxEntries, the event journey).
	IndexOutboxEvent = "outbox_event"
	// The operator commands' windows (store.Store.ListEvents).
	IndexOccurred = "occurred"
	IndexCreated  = "created"
	IndexDevice   = "device_occurred"
)

// Server codes of index creation.
const (
	codeIndexOptionsConflict  = 85 // same keys, other name or options
	codeIndexKeySpecsConflict = 86 // same name, other keys
)

// indexSpec is one index outboxd relies on.
type indexSpec struct {
	coll  string
	model mongo.IndexModel
}

func (s *Store) indexSpecs(retention time.Duration) []indexSpec {
	return []indexSpec{
		{EventsCollection, mongo.IndexModel{Keys: bson.D{{Key: "idempotencyKey", Value: 1}},
			Options: options.Index().SetName(IndexIdempotencyKey).SetUnique(true)}},
		// The reconciler's candidates, Counts' pending and failed counts and
		// the oldest pending original: equality on syncedAt and
		// syncFailure.category (null for pending), range and sort on
		// createdAt, then lastRequeuedAt. syncFailure.category, not the
		// syncFailure document: its message is free text.
		{EventsCollection, mongo.IndexModel{Keys: bson.D{{Key: "syncedAt", Value: 1}, {Key: "syncFailure.category", Value: 1},
			{Key: "createdAt", Value: 1}, {Key: "lastRequeuedAt", Value: 1}}, Options: options.Index().SetName(IndexReconciler)}},
		// The operator commands (replay by boundary, verify): a window of
		// occurredAt or createdAt in (time, _id) order, or one device's
		// window of occurredAt.
		{EventsCollection, mongo.IndexModel{Keys: bson.D{{Key: "occurredAt", Value: 1}, {Key: "_id", Value: 1}},
			Options: options.Index().SetName(IndexOccurred)}},
		{EventsCollection, mongo.IndexModel{Keys: bson.D{{Key: "createdAt", Value: 1}, {Key: "_id", Value: 1}},
			Options: options.Index().SetName(IndexCreated)}},
		{EventsCollection, mongo.IndexModel{Keys: bson.D{{Key: "sourceKey", Value: 1}, {Key: "deviceKey", Value: 1},
			{Key: "occurredAt", Value: 1}, {Key: "_id", Value: 1}}, Options: options.Index().SetName(IndexDevice)}},
		// The catch-up: a stream's undispatched entries in id order.
		{OutboxCollection, mongo.IndexModel{Keys: bson.D{{Key: "stream", Value: 1}, {Key: "dispatchedAt", Value: 1}, {Key: "_id", Value: 1}},
			Options: options.Index().SetName(IndexUndispatched)}},
		// The catch-up of one partition of a partitioned stream.
		{OutboxCollection, mongo.IndexModel{Keys: bson.D{{Key: "stream", Value: 1}, {Key: "partition", Value: 1},
			{Key: "dispatchedAt", Value: 1}, {Key: "_id", Value: 1}}, Options: options.Index().SetName(IndexUndispatchedPartition)}},
		// The event journey: an original's entries in _id order.
		{OutboxCollection, mongo.IndexModel{Keys: bson.D{{Key: "eventId", Value: 1}, {Key: "_id", Value: 1}},
			Options: options.Index().SetName(IndexOutboxEvent)}},
		// Retention: TTL ignores documents whose dispatchedAt is null.
		{OutboxCollection, mongo.IndexModel{Keys: bson.D{{Key: "dispatchedAt", Value: 1}},
			Options: options.Index().SetName(IndexOutboxTTL).SetExpireAfterSeconds(int32(retention / time.Second))}},
	}
}

// eventsTTLSpec is the partial TTL index of --event-retention.
func eventsTTLSpec(retention time.Duration) indexSpec {
	return indexSpec{EventsCollection, mongo.IndexModel{Keys: bson.D{{Key: "createdAt", Value: 1}},
		Options: options.Index().SetName(IndexEventsTTL).SetExpireAfterSeconds(int32(retention / time.Second)).
			SetPartialFilterExpression(syncedPartial)}}
}

// Migrate creates the indexes. An index of outboxd's name whose keys
// changed is rebuilt; a changed retention is applied with collMod (no
// rebuild) and read back. An index of someone else that takes the keys of
// one of outboxd's with other options is an error naming it. With
// cfg.EventRetention the partial TTL index of synced originals is created
// (or its retention changed with collMod); without, it is dropped.
func (s *Store) Migrate(ctx context.Context, cfg *store.MigrateConfig) error {
	retention := store.OutboxRetentionDefault
	var events time.Duration
	if cfg != nil && cfg.OutboxRetention > 0 {
		retention = cfg.OutboxRetention
	}
	if cfg != nil {
		events = cfg.EventRetention
	}
	ctx, cancel := context.WithTimeout(ctx, 10*s.opts.OpTimeout)
	defer cancel()
	if err := s.checkSharding(ctx); err != nil {
		return err
	}
	specs := s.indexSpecs(retention)
	if events > 0 {
		specs = append(specs, eventsTTLSpec(events))
	}
	for _, spec := range specs {
		if err := s.ensureIndex(ctx, spec); err != nil {
			return fmt.Errorf("error creating index %s.%s: %w", spec.coll, *spec.model.Options.Name, err)
		}
	}
	if events == 0 {
		return s.dropIndex(ctx, EventsCollection, IndexEventsTTL)
	}
	return nil
}

// dropIndex drops the index name of coll when it exists.
func (s *Store) dropIndex(ctx context.Context, coll, name string) error {
	existing, err := s.listIndexes(ctx, coll)
	if err != nil {
		return err
	}
	if !slices.ContainsFunc(existing, func(ix existingIndex) bool { return ix.Name == name }) {
		return nil
	}
	_, err = s.db.Collection(coll).Indexes().DropOne(ctx, name)
	return wrap(err, "dropping the index %s.%s (no retention set)", coll, name)
}

// existingIndex is what listIndexes reports of one index.
type existingIndex struct {
	Name               string `bson:"name"`
	Key                bson.D `bson:"key"`
	Unique             bool   `bson:"unique"`
	ExpireAfterSeconds *int64 `bson:"expireAfterSeconds"`
}

func (s *Store) listIndexes(ctx context.Context, coll string) ([]existingIndex, error) {
	cur, err := s.db.Collection(coll).Indexes().List(ctx)
	if err != nil {
		var ce mongo.CommandError
		if errors.As(err, &ce) && ce.Code == codeNamespaceNotFound { // no collection yet
			return nil, nil
		}
		return nil, wrap(err, "listing the indexes of %s", coll)
	}
	var raw []bson.Raw
	if err := cur.All(ctx, &raw); err != nil {
		return nil, wrap(err, "listing the indexes of %s", coll)
	}
	out := make([]existingIndex, 0, len(raw))
	for _, r := range raw {
		var ix existingIndex
		if err := bson.Unmarshal(r, &ix); err != nil {
			return nil, fmt.Errorf("error reading an index of %s: %w", coll, err)
		}
		if v, err := r.LookupErr("expireAfterSeconds"); err == nil {
			if n, ok := v.AsInt64OK(); ok {
				ix.ExpireAfterSeconds = &n
			} else if f, ok := v.DoubleOK(); ok {
				n := int64(f)
				ix.ExpireAfterSeconds = &n
			}
		}
		out = append(out, ix)
	}
	return out, nil
}

func sameKeys(a, b bson.D) bool {
	return slices.EqualFunc(a, b, func(x, y bson.E) bool { return x.Key == y.Key && toInt64(x.Value) == toInt64(y.Value) })
}

func (s *Store) ensureIndex(ctx context.Context, spec indexSpec) error {
	name := *spec.model.Options.Name
	keys := spec.model.Keys.(bson.D)
	var ttl *int64
	if spec.model.Options.ExpireAfterSeconds != nil {
		v := int64(*spec.model.Options.ExpireAfterSeconds)
		ttl = &v
	}
	existing, err := s.listIndexes(ctx, spec.coll)
	if err != nil {
		return err
	}
	view := s.db.Collection(spec.coll).Indexes()
	for _, ix := range existing {
		switch {
		case ix.Name == name && !sameKeys(ix.Key, keys):
			// An older outboxd's index of this name: rebuild it.
			if _, err := view.DropOne(ctx, name); err != nil {
				return wrap(err, "dropping the outdated index %s", name)
			}
		case ix.Name == name && ttl != nil && (ix.ExpireAfterSeconds == nil || *ix.ExpireAfterSeconds != *ttl):
			return s.setTTL(ctx, spec, *ttl)
		case ix.Name == name:
			return nil
		case sameKeys(ix.Key, keys):
			return fmt.Errorf("index %q on %s has the keys outboxd needs for %q with other options; drop it (db.%s.dropIndex(%q)) and run outboxd migrate again",
				ix.Name, spec.coll, name, spec.coll, ix.Name)
		}
	}
	_, err = view.CreateOne(ctx, spec.model)
	var ce mongo.CommandError
	switch {
	case err == nil:
		return nil
	case errors.As(err, &ce) && ce.Code == codeIndexOptionsConflict:
		// Created concurrently by another migrate with the same options, or
		// by someone with others: check which.
		existing, lerr := s.listIndexes(ctx, spec.coll)
		if lerr == nil && slices.ContainsFunc(existing, func(ix existingIndex) bool { return ix.Name == name && sameKeys(ix.Key, keys) }) {
			return nil
		}
		return fmt.Errorf("an index on %s with the keys of %q exists with other options (code 85); drop it and run outboxd migrate again: %w", spec.coll, name, err)
	case errors.As(err, &ce) && ce.Code == codeIndexKeySpecsConflict:
		return fmt.Errorf("an index named %q on %s exists with other keys (code 86); drop it and run outboxd migrate again: %w", name, spec.coll, err)
	default:
		return wrap(err, "creating the index")
	}
}

// setTTL changes a TTL index's expireAfterSeconds in place (collMod: no
// index build, unlike drop and create, which waits for every voting member
// to rebuild it) and reads it back. lungo has no collMod: it rebuilds.
func (s *Store) setTTL(ctx context.Context, spec indexSpec, seconds int64) error {
	coll, name := spec.coll, *spec.model.Options.Name
	if s.lungo {
		view := s.db.Collection(coll).Indexes()
		if _, err := view.DropOne(ctx, name); err != nil {
			return wrap(err, "dropping the TTL index")
		}
		_, err := view.CreateOne(ctx, spec.model)
		return wrap(err, "creating the TTL index")
	}
	err := s.db.RunCommand(ctx, CollModTTL(coll, name, seconds)).Err()
	if err != nil {
		return wrap(err, "changing the retention of %s.%s with collMod", coll, name)
	}
	existing, err := s.listIndexes(ctx, coll)
	if err != nil {
		return err
	}
	for _, ix := range existing {
		if ix.Name == name && ix.ExpireAfterSeconds != nil && *ix.ExpireAfterSeconds == seconds {
			return nil
		}
	}
	return fmt.Errorf("collMod did not set expireAfterSeconds=%d on %s.%s", seconds, coll, name)
}

// CollModTTL is the command that changes a TTL index's retention.
func CollModTTL(coll, name string, seconds int64) bson.D {
	return bson.D{{Key: "collMod", Value: coll}, {Key: "index", Value: bson.D{{Key: "name", Value: name}, {Key: "expireAfterSeconds", Value: seconds}}}}
}

// CheckSchema verifies that every index outboxd relies on exists with its
// keys (the unique idempotency index above all: without it two concurrent
// writers of one key would both insert).
func (s *Store) CheckSchema(ctx context.Context) error {
	ctx, cancel := s.opctx(ctx)
	defer cancel()
	var missing []string
	for _, spec := range s.indexSpecs(store.OutboxRetentionDefault) {
		existing, err := s.listIndexes(ctx, spec.coll)
		if err != nil {
			return err
		}
		name := *spec.model.Options.Name
		keys := spec.model.Keys.(bson.D)
		unique := spec.model.Options.Unique != nil && *spec.model.Options.Unique
		ok := slices.ContainsFunc(existing, func(ix existingIndex) bool {
			return ix.Name == name && sameKeys(ix.Key, keys) && (!unique || ix.Unique)
		})
		if !ok {
			missing = append(missing, spec.coll+"."+name)
		}
	}
	if len(missing) > 0 {
		return fmt.Errorf("%w: missing MongoDB indexes %v; run `outboxd migrate` (with the same --store and --mongo-db)", store.ErrSchema, missing)
	}
	return nil
}

// Engine returns lungo's engine, or nil on a server (tests).
func (s *Store) Engine() *lungo.Engine { return s.engine }

// ErrShardKey is returned by Migrate on a sharded cluster whose events
// collection is sharded on a key that cannot hold the unique
// idempotencyKey index.
var ErrShardKey = errors.New("the events collection is sharded on a key that cannot hold outboxd's unique idempotencyKey index: shard it on {idempotencyKey: 1} (a ranged key; hashed shard keys hold no unique index) or leave it unsharded")

// checkSharding refuses, on a sharded cluster, a layout that cannot hold
// outboxd's guarantees: a unique index is enforced across shards only when
// the collection is unsharded or sharded on a ranged key that prefixes the
// index, so events must be unsharded or sharded on {idempotencyKey: 1}.
// The other collections may be sharded as the operator likes (the outbox's
// change stream runs through mongos). It reads config.collections (the
// clusterMonitor role reads it); a replica set or lungo has nothing to
// check.
func (s *Store) checkSharding(ctx context.Context) error {
	if !s.mongos {
		return nil
	}
	var coll struct {
		Key     bson.D `bson:"key"`
		Dropped bool   `bson:"dropped"` // before 5.0 a dropped collection stayed listed
	}
	ns := s.opts.Database + "." + EventsCollection
	err := s.client.Database("config").Collection("collections").FindOne(ctx, bson.D{{Key: "_id", Value: ns}}).Decode(&coll)
	switch {
	case isNoDocuments(err):
		return nil
	case err != nil:
		return wrap(err, "reading the shard key of %s from config.collections (the clusterMonitor role may read it)", ns)
	case coll.Dropped:
		return nil
	}
	return checkShardKey(ns, coll.Key)
}

// checkShardKey accepts the one shard key of events that keeps the unique
// idempotencyKey index enforced across shards.
func checkShardKey(ns string, key bson.D) error {
	if len(key) == 1 && key[0].Key == "idempotencyKey" && toInt64(key[0].Value) == 1 {
		return nil
	}
	b, _ := bson.MarshalExtJSON(key, false, false)
	return fmt.Errorf("%w (%s is sharded on %s)", ErrShardKey, ns, b)
}
