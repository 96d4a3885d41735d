package mongostore

import (
	"cmp"
	"context"
	"errors"
	"fmt"
	"net/url"
	"slices"
	"strings"
	"sync"
	"time"

	"github.com/256dpi/lungo"
	"go.mongodb.org/mongo-driver/bson"
	"go.mongodb.org/mongo-driver/mongo"
	"go.mongodb.org/mongo-driver/mongo/options"
	"go.mongodb.org/mongo-driver/mongo/readconcern"
	"go.mongodb.org/mongo-driver/mongo/readpref"
	"go.mongodb.org/mongo-driver/mongo/writeconcern"

	"github.com/outboxd/outboxd/internal/bounds"
	"github.com/outboxd/outboxd/internal/redact"
	"github.com/outboxd/outboxd/outbox"
	"github.com/outboxd/outboxd/store"
)

// LungoMemory selects lungo's in-process engine with an in-memory store: a
// fresh, empty MongoDB for one process (tests, demos of the MongoDB path in
// dev). Its data dies with the process.
const LungoMemory = "lungo:memory"

// Collection names in the database. EventsCollection and
// OutboxCollection are the defaults of Options.EventsCollection and
// Options.OutboxCollection.
const (
	EventsCollection = "events"
	OutboxCollection = "outbox"
	LeasesCollection = "leases"
	// ClockCollection holds the document whose writes read the server's
	// clock (leases, readiness).
	ClockCollection = "clock"
	// SettingsCollection holds what the store records of each stream: its
	// number of partitions (store.Store.Partitions).
	SettingsCollection = "settings"
)

// Defaults of Options.
const (
	// DatabaseDefault is the default Options.Database (--mongo-db).
	DatabaseDefault = "outboxd"
	// MigrateTimeoutDefault is the default Options.MigrateTimeout.
	MigrateTimeoutDefault = time.Hour
	// OpTimeoutDefault is the default Options.OpTimeout.
	OpTimeoutDefault = 10 * time.Second
	// CountsTTLDefault is the default Options.CountsTTL.
	CountsTTLDefault = 2 * time.Second
	// CountsMaxStalenessDefault is the default Options.CountsMaxStaleness:
	// 90 s, the least maxStalenessSeconds the server accepts.
	CountsMaxStalenessDefault = 90 * time.Second
	// AppNameDefault is the default Options.AppName.
	AppNameDefault = "outboxd"
	// MaxPoolSizeDefault is the default Options.MaxPoolSize, the driver's
	// own default.
	MaxPoolSizeDefault = 100
	// MaxPoolSizeMax is the largest accepted Options.MaxPoolSize: the
	// connections a mongod accepts at most (net.maxIncomingConnections'
	// ceiling).
	MaxPoolSizeMax = 65536
)

// MinWireVersion is the oldest server outboxd runs on: wire version 9,
// MongoDB 4.4 (the hello command needs 4.4.2; change streams with
// startAfter and the $match on the feed need 4.2+).
const MinWireVersion = 9

// Options configure Open. The zero value means all defaults.
type Options struct {
	// Database is the database holding the collections. Defaults to
	// DatabaseDefault.
	Database string
	// EventsCollection names the originals' collection, so outboxd can sit
	// beside a service's own collections in its database. It must be a
	// collection of outboxd's own (Migrate refuses one holding other
	// documents). Defaults to EventsCollection ("events").
	EventsCollection string
	// OutboxCollection names the outbox entries' collection (the
	// change stream's). Defaults to OutboxCollection ("outbox").
	OutboxCollection string
	// MigrateTimeout bounds Migrate when its context has no deadline. An
	// index build is never given a client deadline (the server would
	// abort a build interrupted by maxTimeMS): it runs until it ends, and
	// Migrate waits for it up to MigrateTimeout, then reports it as still
	// running (a later Migrate waits for the same build). Defaults to
	// MigrateTimeoutDefault (1h).
	MigrateTimeout time.Duration
	// OpTimeout bounds every operation whose context has no deadline, and
	// is the write concern's wtimeout and the client's timeoutMS: every
	// command carries the time its context has left as maxTimeMS, so the
	// server stops what its caller gave up on. Defaults to
	// OpTimeoutDefault (10s).
	OpTimeout time.Duration
	// AppName names the client in the server's logs, currentOp and
	// profiler (outboxd names each role's: "outboxd/ingest"); an appName in
	// the URI wins. Defaults to AppNameDefault.
	AppName string
	// MaxPoolSize is the most connections the driver opens to each server
	// (--mongo-max-pool); it replaces the URI's maxPoolSize. Defaults to
	// MaxPoolSizeDefault (100); at most MaxPoolSizeMax. Ignored on lungo.
	MaxPoolSize uint64
	// CountsTTL is how long Counts serves its last figures, or its last
	// failure, before reading again. Defaults to CountsTTLDefault (2s);
	// negative disables the cache.
	CountsTTL time.Duration
	// CountsMaxStaleness is how far behind the primary a secondary may be
	// to serve Counts (the status figures, the reconciler's gauges): they
	// are read with readPreference secondaryPreferred and this
	// maxStalenessSeconds, so every pod's scrapes stay off the primary, and
	// the figures may be as old as this (plus CountsTTL) while a secondary
	// lags; the primary serves them when no secondary is fresh enough.
	// Every other read stays on the primary, and a caller that needs
	// current figures (store.WithCurrentCounts: SwitchPartitions' drain
	// check) gets them from the primary. Defaults to
	// CountsMaxStalenessDefault (90s, the server's least); below 90s is
	// refused, and so is, by the driver at the first count, less than the
	// URI's heartbeatFrequencyMS plus 10s; negative reads the counts on the
	// primary. Ignored on lungo.
	CountsMaxStaleness time.Duration
	// OplogSize bounds lungo's oplog (entries); 0 means lungo's default
	// (1000). Ignored on a server.
	OplogSize int
	// ExpireInterval drives lungo's TTL indexes. Defaults to 60s. Ignored
	// on a server.
	ExpireInterval time.Duration
	// Commands, when set, counts the commands the store sends (see
	// CommandCounter). Defaults to nil.
	Commands *CommandCounter
}

// Store is the MongoDB store. Create it with Open, or NewFromClient for a
// client the caller already has.
type Store struct {
	// client is the driver's client behind lungo's interfaces (on a server)
	// or lungo's engine: every collection is reached through lungo's
	// interfaces, the test engine's seam; none of them is exported.
	client lungo.IClient
	// owned tells that Close disconnects client (Open's own, not
	// NewFromClient's).
	owned  bool
	engine *lungo.Engine // lungo only
	db     lungo.IDatabase
	events lungo.ICollection
	outbox lungo.ICollection
	leases lungo.ICollection
	clock  lungo.ICollection
	// settings is SettingsCollection.
	settings lungo.ICollection
	// countsEvents and countsOutbox are events and outbox as Counts
	// reads them: on a secondary of bounded staleness
	// (Options.CountsMaxStaleness).
	countsEvents lungo.ICollection
	countsOutbox lungo.ICollection
	opts         Options
	lungo        bool
	mongos       bool // a sharded cluster's router
	// warnings are what Open found in the deployment that works but
	// weakens outboxd (Warnings).
	warnings []string

	countsMu    sync.Mutex
	counts      *store.Counts
	countsErr   error // the last read's failure, kept for CountsTTL
	countsErrAt time.Time

	// background holds the aborts of transactions whose callers ran out of
	// time (discard); Close waits for them.
	background sync.WaitGroup
}

var (
	_ store.Store         = (*Store)(nil)
	_ outbox.PayloadSizer = (*Store)(nil)
)

// ValidateURI checks the form of a MongoDB --store value: mongodb://…,
// mongodb+srv://… or LungoMemory. Its error hides the URI's secrets
// (redact.Error).
func ValidateURI(uri string) error {
	switch {
	case uri == LungoMemory:
		return nil
	case strings.HasPrefix(uri, "lungo:"):
		return fmt.Errorf("lungo's engine is offered in memory only (%s); its file store is no longer supported: use sqlite:PATH for a file", LungoMemory)
	case strings.HasPrefix(uri, "mongodb://"), strings.HasPrefix(uri, "mongodb+srv://"):
		if _, err := url.Parse(uri); err != nil {
			// url.Parse's error quotes the URI whole, password included:
			// the URI is told redacted, then the cause alone.
			var ue *url.Error
			if errors.As(err, &ue) {
				err = ue.Err
			}
			return fmt.Errorf("invalid MongoDB URI %q: %w", redact.DSN(uri), redact.Error(err, uri))
		}
		return nil
	}
	return errors.New("a MongoDB store must be mongodb://…, mongodb+srv://… or " + LungoMemory)
}

// Open connects to uri: a replica set (or sharded cluster) through the
// official driver, or lungo's in-memory engine for LungoMemory. On a server
// it checks that it answers, is a replica set member or mongos, and is
// recent enough. It does not create indexes: Migrate does.
func Open(ctx context.Context, uri string, opts *Options) (*Store, error) {
	if err := ValidateURI(uri); err != nil {
		return nil, err
	}
	o, err := opts.withDefaults()
	if err != nil {
		return nil, err
	}
	if uri == LungoMemory {
		lopts := lungo.Options{Store: lungo.NewMemoryStore(), ExpireInterval: o.ExpireInterval, MaxOplogSize: o.OplogSize}
		if o.OplogSize > 0 {
			lopts.MinOplogSize = min(10, o.OplogSize)
			lopts.MinOplogAge = time.Nanosecond // lungo reads 0 as its 5-minute default
		}
		client, engine, err := lungo.Open(ctx, lopts)
		if err != nil {
			return nil, fmt.Errorf("error opening lungo's engine: %w", err)
		}
		s := newStore(client, o, true, true)
		s.engine = engine
		return s, nil
	}
	client, err := lungo.Connect(ctx, ClientOptions(uri, o))
	if err != nil {
		return nil, wrap(redact.Error(err, uri), "connecting to MongoDB at %s", redact.DSN(uri))
	}
	topo, err := checkServer(ctx, client, redact.DSN(uri), o.OpTimeout)
	if err != nil {
		_ = client.Disconnect(context.WithoutCancel(ctx))
		return nil, err
	}
	s := newStore(client, o, true, false)
	s.mongos, s.warnings = topo.mongos, topo.warnings
	return s, nil
}

// NewFromClient returns the store on a client the caller already has and
// keeps using, in database (Options.Database when empty): a service puts
// outboxd's collections beside its own (name them with
// Options.EventsCollection and Options.OutboxCollection) and writes its
// documents and events in one transaction (RunTx). It checks, as Open does,
// that the deployment is a replica set or a sharded cluster of MongoDB 4.4
// or later. The store's collections use majority writes (wtimeout
// Options.OpTimeout), majority reads and the primary whatever the client's
// defaults (Counts: a secondary of bounded staleness,
// Options.CountsMaxStaleness); the client's own settings (timeoutMS, pool, monitor) stay the
// caller's, so Options.MaxPoolSize, Options.AppName and Options.Commands do
// not apply. Close leaves the client connected.
func NewFromClient(ctx context.Context, client *mongo.Client, database string, opts *Options) (*Store, error) {
	if client == nil {
		return nil, errors.New("error creating the MongoDB store: the client is nil")
	}
	o, err := opts.withDefaults()
	if err != nil {
		return nil, err
	}
	o.Database = cmp.Or(database, o.Database)
	topo, err := checkServer(ctx, &lungo.MongoClient{Client: client}, "the client's deployment", o.OpTimeout)
	if err != nil {
		return nil, err
	}
	s := newStore(&lungo.MongoClient{Client: client}, o, false, false)
	s.mongos, s.warnings = topo.mongos, topo.warnings
	return s, nil
}

// withDefaults returns the options with their defaults, validated.
func (o *Options) withDefaults() (Options, error) {
	out := Options{}
	if o != nil {
		out = *o
	}
	out.Database = cmp.Or(out.Database, DatabaseDefault)
	out.EventsCollection = cmp.Or(out.EventsCollection, EventsCollection)
	out.OutboxCollection = cmp.Or(out.OutboxCollection, OutboxCollection)
	out.OpTimeout = cmp.Or(out.OpTimeout, OpTimeoutDefault)
	out.MigrateTimeout = cmp.Or(out.MigrateTimeout, MigrateTimeoutDefault)
	out.CountsTTL = cmp.Or(out.CountsTTL, CountsTTLDefault)
	out.CountsMaxStaleness = cmp.Or(out.CountsMaxStaleness, CountsMaxStalenessDefault)
	out.AppName = cmp.Or(out.AppName, AppNameDefault)
	out.MaxPoolSize = cmp.Or(out.MaxPoolSize, MaxPoolSizeDefault)
	return out, out.validate()
}

// Validate reports the first field of the options that cannot work,
// naming it, with the defaults of the fields left zero: a caller (the CLI)
// checks its settings before it opens anything.
func (o *Options) Validate() error {
	_, err := o.withDefaults()
	return err
}

// validate names the first field that cannot work.
func (o Options) validate() error {
	reserved := []string{LeasesCollection, ClockCollection, SettingsCollection}
	for _, c := range []struct{ field, name string }{{"EventsCollection", o.EventsCollection}, {"OutboxCollection", o.OutboxCollection}} {
		switch {
		case strings.ContainsAny(c.name, "$\x00") || strings.HasPrefix(c.name, "system."):
			return fmt.Errorf("invalid Options.%s %q: not a collection name MongoDB accepts", c.field, c.name)
		case slices.Contains(reserved, c.name):
			return fmt.Errorf("invalid Options.%s %q: outboxd keeps its own %s collection under that name", c.field, c.name, c.name)
		}
	}
	if o.EventsCollection == o.OutboxCollection {
		return fmt.Errorf("invalid Options.OutboxCollection %q: the same collection as Options.EventsCollection", o.OutboxCollection)
	}
	if o.CountsMaxStaleness > 0 && o.CountsMaxStaleness < CountsMaxStalenessDefault {
		return fmt.Errorf("invalid Options.CountsMaxStaleness %s: the server accepts no less than %s (negative reads the counts on the primary)",
			o.CountsMaxStaleness, CountsMaxStalenessDefault)
	}
	if o.MigrateTimeout < 0 {
		return fmt.Errorf("invalid Options.MigrateTimeout %s: must not be negative", o.MigrateTimeout)
	}
	if o.MaxPoolSize > MaxPoolSizeMax {
		return bounds.Errorf("MaxPoolSize", o.MaxPoolSize, "must be between 1 and %d", MaxPoolSizeMax)
	}
	return nil
}

// newStore returns the store on client with the options o (defaults set);
// onLungo tells that client is lungo's engine (set before the collections,
// which count commands at the engine's boundary there).
func newStore(client lungo.IClient, o Options, owned, onLungo bool) *Store {
	s := &Store{client: client, opts: o, owned: owned, lungo: onLungo}
	// On a server the collections use the store's concerns whatever the
	// client's defaults (NewFromClient's client is the caller's).
	wc := writeconcern.Majority()
	wc.WTimeout = o.OpTimeout //nolint:staticcheck // wtimeout bounds the server's wait for a majority even without a deadline of the caller
	s.db = client.Database(o.Database, options.Database().SetWriteConcern(wc).
		SetReadConcern(readconcern.Majority()).SetReadPreference(readpref.Primary()))
	s.events = s.collection(o.EventsCollection)
	s.outbox = s.collection(o.OutboxCollection)
	s.leases = s.collection(LeasesCollection)
	s.clock = s.collection(ClockCollection)
	s.settings = s.collection(SettingsCollection)
	s.countsEvents, s.countsOutbox = s.events, s.outbox
	if rp := countsReadPref(o.CountsMaxStaleness); rp != nil {
		s.countsEvents = s.collection(o.EventsCollection, options.Collection().SetReadPreference(rp))
		s.countsOutbox = s.collection(o.OutboxCollection, options.Collection().SetReadPreference(rp))
	}
	return s
}

// countsReadPref is the read preference of Counts: secondaryPreferred with
// maxStaleness, or nil (the primary) when maxStaleness is negative.
func countsReadPref(maxStaleness time.Duration) *readpref.ReadPref {
	if maxStaleness < 0 {
		return nil
	}
	return readpref.SecondaryPreferred(readpref.WithMaxStaleness(maxStaleness))
}

// collection returns the collection name of the store's database (with
// opts over the database's), counted at the engine's boundary on lungo
// when Options.Commands is set (on a server the driver's monitor counts).
func (s *Store) collection(name string, opts ...*options.CollectionOptions) lungo.ICollection {
	c := s.db.Collection(name, opts...)
	if s.lungo && s.opts.Commands != nil {
		return countedCollection{ICollection: c, c: s.opts.Commands}
	}
	return c
}

// ClientOptions returns the driver options outboxd uses for uri: the URI's
// own settings, then majority writes with a wtimeout of o.OpTimeout,
// majority reads, the primary for every read whatever the URI's
// readPreference says (transactions must run on the primary, and the
// worker must never read an original from a lagging secondary and take it
// for missing; only Counts sets its own, Options.CountsMaxStaleness), o.OpTimeout as the client's timeout (timeoutMS: the driver
// sends every command's time left as maxTimeMS), o.AppName unless the URI
// names one, and o.MaxPoolSize. Zero fields of o take their defaults.
func ClientOptions(uri string, o Options) *options.ClientOptions {
	o.OpTimeout = cmp.Or(o.OpTimeout, OpTimeoutDefault)
	o.AppName = cmp.Or(o.AppName, AppNameDefault)
	o.MaxPoolSize = cmp.Or(o.MaxPoolSize, MaxPoolSizeDefault)
	wc := writeconcern.Majority()
	wc.WTimeout = o.OpTimeout //nolint:staticcheck // wtimeout bounds the server's wait for a majority even without a deadline of the caller
	co := options.Client().ApplyURI(uri)
	if co.AppName == nil {
		co.SetAppName(o.AppName)
	}
	if o.Commands != nil {
		co.SetMonitor(o.Commands.monitor())
	}
	return co.SetWriteConcern(wc).
		SetReadConcern(readconcern.Majority()).
		SetReadPreference(readpref.Primary()).
		SetServerSelectionTimeout(o.OpTimeout).
		SetTimeout(o.OpTimeout).
		SetMaxPoolSize(o.MaxPoolSize)
}

// deployment is what checkServer learnt of a deployment.
type deployment struct {
	mongos   bool // a sharded cluster's router
	warnings []string
}

// checkServer checks the hello of client's deployment (named where for
// errors and warnings).
func checkServer(ctx context.Context, client lungo.IClient, where string, opTimeout time.Duration) (deployment, error) {
	pingCtx, cancel := context.WithTimeout(ctx, opTimeout)
	defer cancel()
	if err := client.Ping(pingCtx, readpref.Primary()); err != nil {
		return deployment{}, wrap(err, "reaching MongoDB at %s (transactions and change streams need a replica set)", where)
	}
	var hello bson.M
	if err := client.Database("admin").RunCommand(pingCtx, bson.D{{Key: "hello", Value: 1}}).Decode(&hello); err != nil {
		return deployment{}, wrap(err, "asking MongoDB at %s for its topology (the hello command needs MongoDB 4.4.2 or later)", where)
	}
	if err := checkHello(hello); err != nil {
		return deployment{}, fmt.Errorf("MongoDB at %s: %w", where, err)
	}
	msg, _ := hello["msg"].(string)
	var warnings []string
	if w := arbiterWarning(hello); w != "" {
		warnings = append(warnings, fmt.Sprintf("MongoDB at %s: %s", where, w))
	}
	return deployment{mongos: msg == "isdbgrid", warnings: warnings}, nil
}

// arbiterWarning returns the warning for a replica set with an arbiter
// (hello's arbiters lists them), or "". An arbiter votes but holds no
// data, so a primary-secondary-arbiter set acknowledges a majority write
// only while both data-bearing members are up: every write outboxd sends
// is majority (ingest, the marks, readiness, the lease clock), so losing
// either one stops outboxd, and a 4.4 member started with
// enableMajorityReadConcern=false refuses majority reads in transactions.
// A mongos lists no arbiters: the shards' sets are not visible here.
func arbiterWarning(hello bson.M) string {
	arbiters, _ := hello["arbiters"].(bson.A)
	if len(arbiters) == 0 {
		return ""
	}
	names := make([]string, 0, len(arbiters))
	for _, a := range arbiters {
		names = append(names, fmt.Sprint(a))
	}
	return fmt.Sprintf("the replica set has an arbiter (%s): every write outboxd sends waits for a majority of the data-bearing members, so "+
		"losing one of them stops ingest, the dispatcher and readiness; use three data-bearing members", strings.Join(names, ", "))
}

// Warnings returns what Open (or NewFromClient) found in the deployment
// that works but weakens outboxd, one sentence each, for the caller to log
// at start: a replica set with an arbiter has no fault tolerance for
// outboxd's majority writes. Empty on lungo and on a sound deployment.
func (s *Store) Warnings() []string { return slices.Clone(s.warnings) }

// ErrStandalone is returned for a MongoDB server that is not part of a
// replica set or sharded cluster.
var ErrStandalone = errors.New("a standalone server has no transactions and no change streams; outboxd needs a replica set (a single node is enough: start mongod with --replSet rs0 and run rs.initiate()) or a sharded cluster")

// ErrTooOld is returned for a server older than MinWireVersion.
var ErrTooOld = errors.New("outboxd needs MongoDB 4.4 or later")

// checkHello reads a hello reply: a replica set member names its set, a
// mongos says "isdbgrid"; anything else is a standalone server. The wire
// version tells the server's release.
func checkHello(hello bson.M) error {
	if v := toInt64(hello["maxWireVersion"]); v < MinWireVersion {
		return fmt.Errorf("%w (maxWireVersion %d, need %d)", ErrTooOld, v, MinWireVersion)
	}
	if name, _ := hello["setName"].(string); name != "" {
		return nil
	}
	if msg, _ := hello["msg"].(string); msg == "isdbgrid" {
		return nil
	}
	return ErrStandalone
}

func toInt64(v any) int64 {
	switch x := v.(type) {
	case int:
		return int64(x)
	case int32:
		return int64(x)
	case int64:
		return x
	case float64:
		return int64(x)
	}
	return -1
}

// Kind returns "mongodb".
func (s *Store) Kind() string { return "mongodb" }

// opctx bounds an operation by Options.OpTimeout unless ctx already has a
// deadline.
func (s *Store) opctx(ctx context.Context) (context.Context, context.CancelFunc) {
	if _, ok := ctx.Deadline(); ok {
		return ctx, func() {}
	}
	return context.WithTimeout(ctx, s.opts.OpTimeout)
}

// findOptions are the options of a Find whose cursor the caller reads to
// its end within ctx: maxTimeMS is the time ctx has left. The driver sends
// every other command's time left itself (the client's timeout), but
// leaves it off the commands that return a cursor when the context has a
// deadline (DRIVERS-2722: maxTimeMS bounds a cursor's whole life).
func findOptions(ctx context.Context) *options.FindOptions {
	o := options.Find()
	if deadline, ok := ctx.Deadline(); ok {
		if left := time.Until(deadline); left > 0 {
			o.SetMaxTime(left)
		}
	}
	return o
}

// The clock document: one document in ClockCollection whose field
// clockField every writer sets to the server's time ($currentDate).
const (
	clockID    = "now"
	clockField = "at"
)

// serverNow returns the server's clock, read by a majority write
// ($currentDate on the clock document, read back): one code path on a
// server and on lungo, which has no aggregation ($$NOW). Leases (leaseTime)
// and readiness (Ping) use it.
func (s *Store) serverNow(ctx context.Context) (time.Time, error) {
	var d struct {
		At time.Time `bson:"at"`
	}
	err := s.clock.FindOneAndUpdate(ctx, bson.D{{Key: "_id", Value: clockID}},
		bson.D{{Key: "$currentDate", Value: bson.D{{Key: clockField, Value: true}}}},
		options.FindOneAndUpdate().SetUpsert(true).SetReturnDocument(options.After).
			SetProjection(bson.D{{Key: clockField, Value: 1}})).Decode(&d)
	if err != nil {
		return time.Time{}, err
	}
	return d.At, nil
}

// Ping proves that MongoDB serves reads and takes writes now: a read of the
// events collection (lungo's own Ping always succeeds) and a
// majority-acknowledged write, the clock document's (serverNow; not in the
// leases collection, whose names are streams'). When a majority cannot
// acknowledge (a lost majority, a lagging set), the write runs into its
// deadline, so /readyz fails while ingest's writes would be stuck.
func (s *Store) Ping(ctx context.Context) error {
	ctx, cancel := s.opctx(ctx)
	defer cancel()
	err := s.events.FindOne(ctx, bson.M{}, options.FindOne().SetProjection(bson.M{"_id": 1})).Err()
	if err != nil && !isNoDocuments(err) {
		return wrap(err, "reading from MongoDB")
	}
	_, err = s.serverNow(ctx)
	return wrap(err, "writing the clock document to MongoDB")
}

// Close disconnects (or closes lungo's engine). Closing twice is harmless.
func (s *Store) Close(ctx context.Context) error {
	// The background aborts end within endTimeout; ctx bounds the wait.
	aborted := make(chan struct{})
	go func() { s.background.Wait(); close(aborted) }()
	select {
	case <-aborted:
	case <-ctx.Done():
	}
	if s.engine != nil {
		s.engine.Close()
		return nil
	}
	if !s.owned {
		return nil
	}
	err := s.client.Disconnect(ctx)
	if errors.Is(err, mongo.ErrClientDisconnected) {
		return nil
	}
	return err
}
