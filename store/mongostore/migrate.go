package mongostore

import (
	"context"
	"errors"
	"fmt"
	"slices"
	"strings"
	"time"

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
	events, outbox := s.opts.EventsCollection, s.opts.OutboxCollection
	return []indexSpec{
		{events, mongo.IndexModel{Keys: bson.D{{Key: "idempotencyKey", Value: 1}},
			Options: options.Index().SetName(IndexIdempotencyKey).SetUnique(true)}},
		// The reconciler's candidates, Counts' pending and failed counts and
		// the oldest pending original: equality on syncedAt and
		// syncFailure.category (null for pending), range and sort on
		// createdAt, then lastRequeuedAt. syncFailure.category, not the
		// syncFailure document: its message is free text.
		{events, mongo.IndexModel{Keys: bson.D{{Key: "syncedAt", Value: 1}, {Key: "syncFailure.category", Value: 1},
			{Key: "createdAt", Value: 1}, {Key: "lastRequeuedAt", Value: 1}}, Options: options.Index().SetName(IndexReconciler)}},
		// The operator commands (replay by boundary, verify): a window of
		// occurredAt or createdAt in (time, _id) order, or one device's
		// window of occurredAt.
		{events, mongo.IndexModel{Keys: bson.D{{Key: "occurredAt", Value: 1}, {Key: "_id", Value: 1}},
			Options: options.Index().SetName(IndexOccurred)}},
		{events, mongo.IndexModel{Keys: bson.D{{Key: "createdAt", Value: 1}, {Key: "_id", Value: 1}},
			Options: options.Index().SetName(IndexCreated)}},
		{events, mongo.IndexModel{Keys: bson.D{{Key: "sourceKey", Value: 1}, {Key: "deviceKey", Value: 1},
			{Key: "occurredAt", Value: 1}, {Key: "_id", Value: 1}}, Options: options.Index().SetName(IndexDevice)}},
		// The catch-up: a stream's undispatched entries in id order.
		{outbox, mongo.IndexModel{Keys: bson.D{{Key: "stream", Value: 1}, {Key: "dispatchedAt", Value: 1}, {Key: "_id", Value: 1}},
			Options: options.Index().SetName(IndexUndispatched)}},
		// The catch-up of one partition of a partitioned stream.
		{outbox, mongo.IndexModel{Keys: bson.D{{Key: "stream", Value: 1}, {Key: "partition", Value: 1},
			{Key: "dispatchedAt", Value: 1}, {Key: "_id", Value: 1}}, Options: options.Index().SetName(IndexUndispatchedPartition)}},
		// The event journey: an original's entries in _id order.
		{outbox, mongo.IndexModel{Keys: bson.D{{Key: "eventId", Value: 1}, {Key: "_id", Value: 1}},
			Options: options.Index().SetName(IndexOutboxEvent)}},
		// Retention: TTL ignores documents whose dispatchedAt is null.
		{outbox, mongo.IndexModel{Keys: bson.D{{Key: "dispatchedAt", Value: 1}},
			Options: options.Index().SetName(IndexOutboxTTL).SetExpireAfterSeconds(int32(retention / time.Second))}},
	}
}

// eventsTTLSpec is the partial TTL index of --event-retention.
func (s *Store) eventsTTLSpec(retention time.Duration) indexSpec {
	return indexSpec{s.opts.EventsCollection, mongo.IndexModel{Keys: bson.D{{Key: "createdAt", Value: 1}},
		Options: options.Index().SetName(IndexEventsTTL).SetExpireAfterSeconds(int32(retention / time.Second)).
			SetPartialFilterExpression(syncedPartial)}}
}

// Migrate creates the indexes. An index of outboxd's name whose keys
// changed is rebuilt: the new index is built under the index's other name
// (rebuiltName) before the old one is dropped, so the queries it serves
// never go without one. A changed retention is applied with collMod (no
// rebuild) and read back.
//
// An index build has no client deadline of OpTimeout: the server aborts a
// build whose createIndexes is interrupted by its time limit, so each
// createIndexes gets what is left of ctx's deadline, or
// Options.MigrateTimeout when ctx has none (waiting, on a populated
// collection, for every voting member to build it). A build of the same
// index already running (another Migrate's, one interrupted on the client)
// is joined, not started again: the server waits for it; one still running
// at the deadline is reported (ErrIndexBuildRunning) and a later Migrate
// waits for it again.
//
// An events collection holding documents outboxd did not write (one of
// the service's own) fails the unique idempotencyKey index with a duplicate
// key: Migrate reports ErrForeignCollection, naming the options that put
// outboxd elsewhere. An index of someone else that takes the keys of
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
	if _, ok := ctx.Deadline(); !ok {
		var cancel context.CancelFunc
		ctx, cancel = context.WithTimeout(ctx, s.opts.MigrateTimeout)
		defer cancel()
	}
	if err := s.checkSharding(ctx); err != nil {
		return err
	}
	specs := s.indexSpecs(retention)
	if events > 0 {
		specs = append(specs, s.eventsTTLSpec(events))
	}
	for _, spec := range specs {
		if err := s.ensureIndex(ctx, spec); err != nil {
			return fmt.Errorf("error creating index %s.%s in Store.Migrate: %w", spec.coll, *spec.model.Options.Name, err)
		}
	}
	if events == 0 {
		for _, name := range []string{IndexEventsTTL, rebuiltName(IndexEventsTTL)} {
			if err := s.dropIndex(ctx, s.opts.EventsCollection, name); err != nil {
				return err
			}
		}
	}
	return nil
}

// ErrForeignCollection is returned by Migrate when the events collection
// holds documents outboxd did not write. It is store.ErrForeign, which the
// SQLite store returns for a table of someone else's.
var ErrForeignCollection = store.ErrForeign

// ErrIndexBuildRunning is returned by Migrate when an index build was still
// running at its deadline: the build goes on on the server, and Migrate run
// again waits for it.
var ErrIndexBuildRunning = errors.New("the index build is still running on the server")

// rebuiltName is the other name of an outboxd index: a rebuild with new
// keys builds under it while the old index still serves, then drops the
// old; the next rebuild goes back to the first name.
func rebuiltName(name string) string {
	if n, ok := strings.CutSuffix(name, rebuiltSuffix); ok {
		return n
	}
	return name + rebuiltSuffix
}

const rebuiltSuffix = "_rebuilt"

// opTime bounds one of Migrate's short commands (lists, drops, collMod) by
// OpTimeout within Migrate's deadline.
func (s *Store) opTime(ctx context.Context) (context.Context, context.CancelFunc) {
	return context.WithTimeout(ctx, s.opts.OpTimeout)
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
	octx, cancel := s.opTime(ctx)
	defer cancel()
	_, err = s.db.Collection(coll).Indexes().DropOne(octx, name)
	return wrap(err, "dropping the index %s.%s", coll, name)
}

// existingIndex is what listIndexes reports of one index.
type existingIndex struct {
	Name               string `bson:"name"`
	Key                bson.D `bson:"key"`
	Unique             bool   `bson:"unique"`
	ExpireAfterSeconds *int64 `bson:"expireAfterSeconds"`
}

func (s *Store) listIndexes(ctx context.Context, coll string) ([]existingIndex, error) {
	ctx, cancel := s.opTime(ctx)
	defer cancel()
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
	// outdated are outboxd's indexes of this spec (either name) with other
	// keys: dropped once the new one is built.
	var outdated []string
	build := name
	for _, ix := range existing {
		ours := ix.Name == name || ix.Name == rebuiltName(name)
		switch {
		case ours && !sameKeys(ix.Key, keys):
			outdated = append(outdated, ix.Name)
			if ix.Name == name {
				build = rebuiltName(name)
			}
		case ours && ttl != nil && (ix.ExpireAfterSeconds == nil || *ix.ExpireAfterSeconds != *ttl):
			spec.model.Options.SetName(ix.Name)
			return s.setTTL(ctx, spec, *ttl)
		case ours:
			return s.dropOutdated(ctx, spec.coll, existing, name, keys)
		case sameKeys(ix.Key, keys):
			return fmt.Errorf("index %q on %s has the keys outboxd needs for %q with other options; drop it (db.%s.dropIndex(%q)) and run Store.Migrate again",
				ix.Name, spec.coll, name, spec.coll, ix.Name)
		}
	}
	model := spec.model
	model.Options = cloneIndexOptions(spec.model.Options).SetName(build)
	if err := s.createIndex(ctx, spec.coll, model); err != nil {
		return err
	}
	for _, old := range outdated {
		octx, cancel := s.opTime(ctx)
		_, err := s.db.Collection(spec.coll).Indexes().DropOne(octx, old)
		cancel()
		if err != nil {
			return wrap(err, "dropping the outdated index %s after building %s", old, build)
		}
	}
	return nil
}

// dropOutdated drops, once the index of keys exists under one of its two
// names, an outdated one under the other left by an interrupted rebuild.
func (s *Store) dropOutdated(ctx context.Context, coll string, existing []existingIndex, name string, keys bson.D) error {
	for _, ix := range existing {
		if (ix.Name == name || ix.Name == rebuiltName(name)) && !sameKeys(ix.Key, keys) {
			return s.dropIndex(ctx, coll, ix.Name)
		}
	}
	return nil
}

// cloneIndexOptions copies o, so a build under another name leaves the
// spec as it is.
func cloneIndexOptions(o *options.IndexOptions) *options.IndexOptions {
	c := *o
	return &c
}

// createIndex builds model on coll, waiting for the build (a running build
// of the same index included) within ctx: the createIndexes command's
// maxTimeMS is what ctx has left, never OpTimeout.
func (s *Store) createIndex(ctx context.Context, coll string, model mongo.IndexModel) error {
	name := *model.Options.Name
	keys := model.Keys.(bson.D)
	running := s.runningBuild(ctx, coll, name)
	_, err := s.db.Collection(coll).Indexes().CreateOne(ctx, model)
	var ce mongo.CommandError
	switch {
	case err == nil:
		return nil
	case classify(err) == classDuplicateKey && model.Options.Unique != nil && *model.Options.Unique:
		return fmt.Errorf("%w: the documents of %s.%s break the unique index %q (%s values repeat or are missing): they were not written by outboxd; "+
			"choose a collection of outboxd's own with Options.EventsCollection (or a database with Options.Database): %w",
			ErrForeignCollection, s.opts.Database, coll, name, keys[0].Key, err)
	case ctx.Err() != nil || hasCode(err, codeMaxTimeMSExpired):
		what := "started by this Migrate"
		if running != "" {
			what = "joined: " + running
		}
		return fmt.Errorf("%w: %s.%s (%s); run Store.Migrate again to wait for it: %w", ErrIndexBuildRunning, coll, name, what, err)
	case errors.As(err, &ce) && ce.Code == codeIndexOptionsConflict:
		// Created concurrently by another migrate with the same options, or
		// by someone with others: check which.
		existing, lerr := s.listIndexes(ctx, coll)
		if lerr == nil && slices.ContainsFunc(existing, func(ix existingIndex) bool { return ix.Name == name && sameKeys(ix.Key, keys) }) {
			return nil
		}
		return fmt.Errorf("an index on %s with the keys of %q exists with other options (code 85); drop it and run Store.Migrate again: %w", coll, name, err)
	case errors.As(err, &ce) && ce.Code == codeIndexKeySpecsConflict:
		return fmt.Errorf("an index named %q on %s exists with other keys (code 86); drop it and run Store.Migrate again: %w", name, coll, err)
	default:
		return wrap(err, "creating the index")
	}
}

// runningBuild describes a build of index name on coll already running on
// the server ("" when none, on lungo, or when currentOp may not be read):
// createIndexes joins it rather than starting another.
func (s *Store) runningBuild(ctx context.Context, coll, name string) string {
	if s.lungo {
		return ""
	}
	octx, cancel := s.opTime(ctx)
	defer cancel()
	var out struct {
		InProg []struct {
			OpID       any       `bson:"opid"`
			CurrentOpT time.Time `bson:"currentOpTime"`
			Secs       int64     `bson:"secs_running"`
			Msg        string    `bson:"msg"`
		} `bson:"inprog"`
	}
	err := s.client.Database("admin").RunCommand(octx, bson.D{{Key: "currentOp", Value: 1},
		{Key: "command.createIndexes", Value: coll}, {Key: "command.indexes.name", Value: name},
		{Key: "command.$db", Value: s.opts.Database}}).Decode(&out)
	if err != nil || len(out.InProg) == 0 {
		return ""
	}
	op := out.InProg[0]
	return fmt.Sprintf("a build running for %ds as operation %v %s", op.Secs, op.OpID, op.Msg)
}

// setTTL changes a TTL index's expireAfterSeconds in place (collMod: no
// index build, unlike drop and create, which waits for every voting member
// to rebuild it) and reads it back. lungo has no collMod: it rebuilds.
func (s *Store) setTTL(ctx context.Context, spec indexSpec, seconds int64) error {
	coll, name := spec.coll, *spec.model.Options.Name
	ctx, cancel := s.opTime(ctx)
	defer cancel()
	if s.lungo {
		view := s.db.Collection(coll).Indexes()
		if _, err := view.DropOne(ctx, name); err != nil {
			return wrap(err, "dropping the TTL index")
		}
		_, err := view.CreateOne(ctx, spec.model)
		return wrap(err, "creating the TTL index")
	}
	err := s.db.RunCommand(ctx, collModTTL(coll, name, seconds)).Err()
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

// collModTTL is the command that changes a TTL index's retention.
func collModTTL(coll, name string, seconds int64) bson.D {
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
			return (ix.Name == name || ix.Name == rebuiltName(name)) && sameKeys(ix.Key, keys) && (!unique || ix.Unique)
		})
		if !ok {
			missing = append(missing, spec.coll+"."+name)
		}
	}
	if len(missing) > 0 {
		return fmt.Errorf("%w: missing MongoDB indexes %v; run Store.Migrate with the same database and collection names", store.ErrSchema, missing)
	}
	return nil
}

// ErrShardKey is returned by Migrate on a sharded cluster whose events
// collection is sharded on a key that cannot hold the unique
// idempotencyKey index.
var ErrShardKey = errors.New("the events collection is sharded on a key that cannot hold outboxd's unique idempotencyKey index: shard it on {idempotencyKey: 1} (a ranged key; hashed shard keys hold no unique index) or leave it unsharded")

// ErrUpsertShardKey is returned by Migrate on a sharded cluster whose
// leases, clock or settings collection is sharded on a key other than _id.
var ErrUpsertShardKey = errors.New("outboxd writes its leases, clock and settings documents with upserts that name _id alone, and before MongoDB 7.1 an upsert on a sharded collection needs the whole shard key: leave them unsharded (they hold a few documents) or shard them on {_id: 1} or {_id: \"hashed\"}")

// checkSharding refuses, on a sharded cluster, a layout that cannot hold
// outboxd's guarantees: a unique index is enforced across shards only when
// the collection is unsharded or sharded on a ranged key that prefixes the
// index, so events must be unsharded or sharded on {idempotencyKey: 1};
// the leases, clock and settings documents are upserted by _id alone, so
// those collections must be unsharded or sharded on _id. The outbox may be
// sharded as the operator likes (its change stream runs through mongos).
// It reads config.collections (the clusterMonitor role reads it); a
// replica set or lungo has nothing to check.
func (s *Store) checkSharding(ctx context.Context) error {
	if !s.mongos {
		return nil
	}
	checks := []struct {
		coll  string
		check func(ns string, key bson.D) error
	}{
		{s.opts.EventsCollection, checkShardKey},
		{LeasesCollection, checkUpsertShardKey},
		{ClockCollection, checkUpsertShardKey},
		{SettingsCollection, checkUpsertShardKey},
	}
	for _, c := range checks {
		ns := s.opts.Database + "." + c.coll
		key, err := s.shardKey(ctx, ns)
		if err != nil {
			return err
		}
		if key == nil {
			continue
		}
		if err := c.check(ns, key); err != nil {
			return err
		}
	}
	return nil
}

// shardKey reads the shard key of the namespace ns from
// config.collections: nil when it is not sharded.
func (s *Store) shardKey(ctx context.Context, ns string) (bson.D, error) {
	var coll struct {
		Key     bson.D `bson:"key"`
		Dropped bool   `bson:"dropped"` // before 5.0 a dropped collection stayed listed
	}
	err := s.client.Database("config").Collection("collections").FindOne(ctx, bson.D{{Key: "_id", Value: ns}}).Decode(&coll)
	switch {
	case isNoDocuments(err):
		return nil, nil
	case err != nil:
		return nil, wrap(err, "reading the shard key of %s from config.collections (the clusterMonitor role may read it)", ns)
	case coll.Dropped:
		return nil, nil
	}
	return coll.Key, nil
}

// checkUpsertShardKey accepts the shard keys that an upsert naming _id
// alone satisfies on every release: {_id: 1} and {_id: "hashed"}.
func checkUpsertShardKey(ns string, key bson.D) error {
	if len(key) == 1 && key[0].Key == "_id" {
		return nil
	}
	b, _ := bson.MarshalExtJSON(key, false, false)
	return fmt.Errorf("%w (%s is sharded on %s)", ErrUpsertShardKey, ns, b)
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
