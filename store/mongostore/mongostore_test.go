package mongostore_test

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"os"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
	"go.mongodb.org/mongo-driver/bson"
	"go.mongodb.org/mongo-driver/mongo"
	"go.mongodb.org/mongo-driver/mongo/options"

	"github.com/outboxd/outboxd/internal/clock"
	"github.com/outboxd/outboxd/internal/httpapi"
	"github.com/outboxd/outboxd/internal/mongoseam"
	"github.com/outboxd/outboxd/internal/testkit"
	"github.com/outboxd/outboxd/outbox"
	"github.com/outboxd/outboxd/store"
	"github.com/outboxd/outboxd/store/mongostore"
	"github.com/outboxd/outboxd/store/storetest"
)

func TestMain(m *testing.M) { testkit.Main(m) }

func open(t testing.TB, o storetest.Options) store.Store {
	opts := &mongostore.Options{}
	if o.ShortHistory {
		opts.OplogSize = 50
	}
	return testkit.NewMongo(t, opts)
}

// TestConformance runs the storage port's suite on lungo, and on the
// replica set of OUTBOXD_TEST_MONGO_URI when it is set.
func TestConformance(t *testing.T) {
	t.Parallel()
	storetest.Run(t, storetest.Harness{Open: open, NoShortHistory: testkit.RealMongo()})
}

func TestMigrate(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	s := testkit.NewMongo(t, nil)
	names := func(coll string) map[string]bson.M {
		cur, err := mongoseam.Database(s).Collection(coll).Indexes().List(ctx)
		require.NoError(t, err)
		var specs []bson.M
		require.NoError(t, cur.All(ctx, &specs))
		out := map[string]bson.M{}
		for _, s := range specs {
			out[s["name"].(string)] = s
		}
		return out
	}
	before := names(mongostore.EventsCollection)
	require.NoError(t, s.Migrate(ctx, nil))
	require.Equal(t, before, names(mongostore.EventsCollection), "a second run changes nothing")
	require.Contains(t, before, mongostore.IndexIdempotencyKey)
	require.Contains(t, before, mongostore.IndexReconciler)
	require.Equal(t, bson.M{"syncedAt": int32(1), "syncFailure.category": int32(1), "createdAt": int32(1), "lastRequeuedAt": int32(1)},
		toM(before[mongostore.IndexReconciler]["key"]), "the reconciler index holds the category, not the free-text syncFailure")

	require.NoError(t, s.Migrate(ctx, &store.MigrateConfig{OutboxRetention: time.Hour}))
	ttl := names(mongostore.OutboxCollection)[mongostore.IndexOutboxTTL]
	require.EqualValues(t, 3600, ttl["expireAfterSeconds"], "a changed retention is applied")
	require.NotContains(t, names(mongostore.EventsCollection), mongostore.IndexEventsTTL, "no event retention: no TTL on originals")

	// --event-retention: a partial TTL index on synced originals, by
	// createdAt; a changed retention is applied; none removes it.
	for _, days := range []int{30, 90} {
		require.NoError(t, s.Migrate(ctx, &store.MigrateConfig{EventRetention: time.Duration(days) * 24 * time.Hour}))
		ix := names(mongostore.EventsCollection)[mongostore.IndexEventsTTL]
		require.NotNil(t, ix, "the TTL index of synced originals")
		require.EqualValues(t, days*86400, ix["expireAfterSeconds"])
		require.Equal(t, bson.M{"createdAt": int32(1)}, toM(ix["key"]))
		require.Equal(t, bson.M{"syncedAt": bson.M{"$type": "date"}}, toMDeep(ix["partialFilterExpression"]), "synced originals only")
	}
	require.NoError(t, s.CheckSchema(ctx))
	require.NoError(t, s.Migrate(ctx, nil))
	require.NotContains(t, names(mongostore.EventsCollection), mongostore.IndexEventsTTL, "retention off again: the index is dropped")
	require.NoError(t, s.CheckSchema(ctx))
}

// toMDeep is toM, applied to nested documents too.
func toMDeep(v any) bson.M {
	out := toM(v)
	for k, e := range out {
		switch e.(type) {
		case bson.M, bson.D:
			out[k] = toMDeep(e)
		}
	}
	return out
}

// TestQueriesUseIndexes proves on a real replica set that the reconciler's
// query and every query of a status scrape are served by an index (no
// collection scan), explaining exactly what the code sends: the
// candidates (the reconciler index), each count of Counts with its hint
// (CountQueries), the oldest pending original (OldestPendingQuery), and an
// original's outbox entries (the event journey's index).
func TestQueriesUseIndexes(t *testing.T) {
	testkit.SkipUnlessRealMongo(t)
	t.Parallel()
	ctx := context.Background()
	s := testkit.NewMongo(t, nil)
	t0 := time.Date(2026, 11, 1, 12, 0, 0, 0, time.UTC)
	w := outbox.NewWriter(s, &outbox.WriterConfig{Now: func() time.Time { return t0 }})
	inputs := make([]outbox.Input, 50)
	for i := range inputs {
		inputs[i] = outbox.Input{SourceKey: "s", DeviceKey: "d", OccurredAt: t0.Add(-time.Duration(i) * time.Minute).Format(time.RFC3339)}
	}
	res, err := w.Write(ctx, inputs)
	require.NoError(t, err)
	for _, r := range res[:20] {
		_, err := s.MarkSynced(ctx, []string{r.ID}, t0)
		require.NoError(t, err)
	}
	now := t0.Add(time.Hour)
	explainIn := func(t *testing.T, cmd bson.D, index string) {
		t.Helper()
		var out bson.M
		require.NoError(t, mongoseam.Database(s).RunCommand(ctx, bson.D{{Key: "explain", Value: cmd}, {Key: "verbosity", Value: "queryPlanner"}}).Decode(&out))
		stages := map[string][]string{}
		collectStages(out, stages)
		require.NotContains(t, stages, "COLLSCAN", "explain: %v", out)
		require.Contains(t, append(stages["IXSCAN"], stages["COUNT_SCAN"]...), index, "explain: %v", out)
	}
	for _, q := range mongostore.CountQueries() {
		t.Run("Count/"+q.Name, func(t *testing.T) {
			explainIn(t, bson.D{{Key: "count", Value: q.Collection}, {Key: "query", Value: q.Filter}, {Key: "hint", Value: q.Index}}, q.Index)
		})
	}
	t.Run("OldestPending", func(t *testing.T) {
		filter, sort, index := mongostore.OldestPendingQuery()
		explainIn(t, bson.D{{Key: "find", Value: mongostore.EventsCollection}, {Key: "filter", Value: filter},
			{Key: "sort", Value: sort}, {Key: "hint", Value: index}, {Key: "limit", Value: int64(1)}}, index)
	})
	entriesFilter, entriesSort := mongostore.OutboxEntriesFilter(res[7].ID)
	for _, tc := range []struct {
		name, coll, index string
		filter            bson.D
		sort              bson.D
	}{
		{"Candidates", mongostore.EventsCollection, mongostore.IndexReconciler,
			mongostore.CandidateFilter(now.Add(-5*time.Minute), now.Add(-30*time.Minute)), mongostore.CandidateSort},
		{"Undispatched", mongostore.OutboxCollection, mongostore.IndexUndispatched,
			bson.D{{Key: "stream", Value: outbox.StreamDefault}, {Key: "dispatchedAt", Value: nil}}, bson.D{{Key: "_id", Value: 1}}},
		{"OutboxEntries", mongostore.OutboxCollection, mongostore.IndexOutboxEvent,
			entriesFilter, entriesSort},
	} {
		t.Run(tc.name, func(t *testing.T) {
			find := bson.D{{Key: "find", Value: tc.coll}, {Key: "filter", Value: tc.filter}, {Key: "limit", Value: int64(1000)}}
			if tc.sort != nil {
				find = append(find, bson.E{Key: "sort", Value: tc.sort})
			}
			explainIn(t, find, tc.index)
		})
	}
}

// collectStages walks an explain plan and records the index names of each
// stage ("" for stages without one).
func collectStages(v any, into map[string][]string) {
	switch x := v.(type) {
	case bson.M:
		if stage, ok := x["stage"].(string); ok {
			name, _ := x["indexName"].(string)
			into[stage] = append(into[stage], name)
		}
		for _, child := range x {
			collectStages(child, into)
		}
	case bson.A:
		for _, child := range x {
			collectStages(child, into)
		}
	case bson.D:
		m := make(bson.M, len(x))
		for _, e := range x {
			m[e.Key] = e.Value
		}
		collectStages(m, into)
	}
}

func toM(v any) bson.M {
	out := bson.M{}
	switch x := v.(type) {
	case bson.M:
		for k, e := range x {
			out[k] = e
		}
	case bson.D:
		for _, e := range x {
			out[e.Key] = e.Value
		}
	}
	return out
}

// TestCountsAreCachedAndBounded: a burst of scrapes reads MongoDB once per
// CountsTTL, and the figures say when they were read.
func TestCountsAreCachedAndBounded(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	s := testkit.NewMongo(t, &mongostore.Options{CountsTTL: time.Hour})
	first, err := s.Counts(ctx)
	require.NoError(t, err)
	_, err = outbox.NewWriter(s, nil).Write(ctx, []outbox.Input{{SourceKey: "s", DeviceKey: "d", OccurredAt: "2026-11-01T10:00:00Z"}})
	require.NoError(t, err)
	again, err := s.Counts(ctx)
	require.NoError(t, err)
	require.Equal(t, first, again, "served from the cache within CountsTTL")

	fresh := testkit.NewMongo(t, nil) // testkit disables the cache
	c, err := fresh.Counts(ctx)
	require.NoError(t, err)
	require.Zero(t, c.Total)
}

// TestCheckSchemaRefusesMissingIndexes: a role other than migrate refuses to
// start when an index it relies on is missing; without the unique
// idempotency index two concurrent writers of one key would both insert.
func TestCheckSchemaRefusesMissingIndexes(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	s := testkit.NewMongo(t, nil)
	require.NoError(t, s.CheckSchema(ctx))
	_, err := mongoseam.Database(s).Collection(mongostore.EventsCollection).Indexes().DropOne(ctx, mongostore.IndexIdempotencyKey)
	require.NoError(t, err)
	err = s.CheckSchema(ctx)
	require.ErrorIs(t, err, store.ErrSchema)
	require.ErrorContains(t, err, "events."+mongostore.IndexIdempotencyKey)
	require.ErrorContains(t, err, "Store.Migrate")
	require.NoError(t, s.Migrate(ctx, nil))
	require.NoError(t, s.CheckSchema(ctx))
}

// TestMigrateRefusesAForeignIndexOnTheTTLKeys: an operator's own
// {dispatchedAt: 1} index without a TTL would leave the outbox growing
// forever; migrate names it instead of swallowing the conflict.
func TestMigrateRefusesAForeignIndexOnTheTTLKeys(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	s := testkit.NewMongo(t, nil)
	view := mongoseam.Database(s).Collection(mongostore.OutboxCollection).Indexes()
	_, err := view.DropOne(ctx, mongostore.IndexOutboxTTL)
	require.NoError(t, err)
	_, err = view.CreateOne(ctx, mongo.IndexModel{Keys: bson.D{{Key: "dispatchedAt", Value: 1}}, Options: options.Index().SetName("mine")})
	require.NoError(t, err)
	err = s.Migrate(ctx, nil)
	require.ErrorContains(t, err, `"mine"`)
	require.ErrorContains(t, err, "dropIndex")
}

// TestPingWritesAHeartbeat: readiness writes, so a store whose writes are
// stuck is not ready. The write is the clock document's, in a collection of
// its own: the leases collection holds only leases, named after streams,
// so --stream _heartbeat (or any name) cannot meet it.
func TestPingWritesAHeartbeat(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	s := testkit.NewMongo(t, nil)
	before := time.Now().Add(-time.Second)
	require.NoError(t, s.Ping(ctx))
	var clock struct {
		At time.Time `bson:"at"`
	}
	require.NoError(t, mongoseam.Database(s).Collection(mongostore.ClockCollection).FindOne(ctx, bson.M{}).Decode(&clock))
	require.WithinRange(t, clock.At, before, time.Now().Add(time.Minute), "the server's time, written by the server")
	n, err := mongoseam.Database(s).Collection(mongostore.LeasesCollection).CountDocuments(ctx, bson.M{})
	require.NoError(t, err)
	require.Zero(t, n, "no heartbeat among the leases")

	// A stream named like the old heartbeat document takes its lease as any other.
	l, err := s.AcquireLease(ctx, "_heartbeat", "me", time.Now(), time.Minute)
	require.NoError(t, err)
	require.True(t, l.Held())
	require.NoError(t, s.Ping(ctx))
	_, err = s.RenewLease(ctx, l, time.Now(), time.Minute)
	require.NoError(t, err, "readiness does not touch the lease")
}

// TestIntegersBeyond64BitsAreRefusedAtIngest: an integer that does not fit
// a signed 64-bit integer would be stored as a double and read back
// rounded; ingest refuses it, naming the field, and writes nothing. The
// largest ones that fit read back exactly.
func TestIntegersBeyond64BitsAreRefusedAtIngest(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	s := testkit.NewMongo(t, nil)
	w := outbox.NewWriter(s, nil)
	in := outbox.Input{SourceKey: "s", DeviceKey: "d", OccurredAt: "2026-11-01T10:00:00Z",
		Payload: json.RawMessage(`{"ok":1,"a":[{"n":9223372036854775808}]}`)}
	_, err := w.Write(ctx, []outbox.Input{in})
	var ve *outbox.ValidationError
	require.ErrorAs(t, err, &ve)
	require.Equal(t, "payload.a[0].n", ve.Fields[0].Field)
	c, err := s.Counts(ctx)
	require.NoError(t, err)
	require.Zero(t, c.Total, "nothing written")

	in.Payload = json.RawMessage(`{"max":9223372036854775807,"min":-9223372036854775808}`)
	res, err := w.Write(ctx, []outbox.Input{in})
	require.NoError(t, err)
	ev, err := s.EventByKey(ctx, res[0].IdempotencyKey)
	require.NoError(t, err)
	require.Equal(t, `{"max":9223372036854775807,"min":-9223372036854775808}`, string(ev.Payload), "exactly, not rounded")
}

// TestOversizedEventIsRefusedAloneByItsBSON: the group commit measures
// events as MongoDB holds them (BSON, up to eight times their JSON): an
// event whose JSON is well within --ingest-group-max-bytes but whose BSON
// is not is refused alone, before the transaction, and the group it would
// have joined commits without it.
func TestOversizedEventIsRefusedAloneByItsBSON(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	s := testkit.NewMongo(t, nil)
	const limit = 64 << 10
	big := `{"a":[0` + strings.Repeat(",0", 6000) + `]}` // 12 KB of JSON, 83 KB of BSON
	n, err := s.PayloadSize(json.RawMessage(big))
	require.NoError(t, err)
	require.Less(t, len(big), limit/4)
	require.Greater(t, n, limit)

	w := outbox.NewWriter(s, nil)
	cm, err := outbox.NewCommitter(w, &outbox.CommitterConfig{GroupMaxBytes: limit, GroupMax: 2, GroupWait: outbox.GroupWaitMax})
	require.NoError(t, err)
	require.NoError(t, cm.Start(ctx))
	defer func() { require.NoError(t, cm.Stop(ctx)) }()
	input := func(device, payload string) *outbox.Batch {
		b, err := w.Prepare([]outbox.Input{{SourceKey: "s", DeviceKey: device, OccurredAt: "2026-11-01T10:00:00Z", Payload: json.RawMessage(payload)}})
		require.NoError(t, err)
		return b
	}
	var wg sync.WaitGroup
	errs := make([]error, 2)
	for i, d := range []string{"small1", "small2"} {
		wg.Go(func() { _, errs[i] = cm.Write(ctx, input(d, `{"t":1}`)) })
	}
	_, err = cm.Write(ctx, input("big", big))
	var ve *outbox.ValidationError
	require.ErrorAs(t, err, &ve)
	require.Equal(t, "payload", ve.Fields[0].Field)
	wg.Wait()
	require.NoError(t, errors.Join(errs...), "the group committed without it")
	c, err := s.Counts(ctx)
	require.NoError(t, err)
	require.EqualValues(t, 2, c.Total)
}

// TestMaxBodyKeepsDocumentsUnder16MiB is the bound of --max-body: the JSON
// that grows most as BSON, an array of one-digit integers (2 bytes of
// JSON, 10 bytes plus the index's digits of BSON per element), filling a
// whole body of httpapi.MaxBodyMax, stays well under MongoDB's 16 MiB
// document limit with the event's other fields; twice that body would not.
// The other shapes grow less.
func TestMaxBodyKeepsDocumentsUnder16MiB(t *testing.T) {
	t.Parallel()
	s := testkit.NewMongo(t, nil)
	worst := func(body int) (int, float64) {
		elems := (body - len(`{"a":[]}`) + 1) / 2
		p := []byte(`{"a":[0` + strings.Repeat(",0", elems-1) + `]}`)
		n, err := s.PayloadSize(p)
		require.NoError(t, err)
		return n, float64(n) / float64(len(p))
	}
	n, ratio := worst(int(httpapi.MaxBodyMax))
	t.Logf("a %d-byte payload of one-digit integers: %d bytes of BSON (%.2f times)", httpapi.MaxBodyMax, n, ratio)
	require.LessOrEqual(t, ratio, 8.0)
	require.Less(t, n+(64<<10), 16<<20, "under 16 MiB with room for the other fields")
	require.Greater(t, ratio*float64(2*httpapi.MaxBodyMax), float64(16<<20), "the bound is needed: twice the body would not fit")
	for _, p := range []string{`{"a":[[],[],[]]}`, `{"a":["","",""]}`, `{"a":[null,true,false]}`, `{"a":[0.5,1e3]}`, `{"k1":0,"k2":0}`} {
		n, err := s.PayloadSize(json.RawMessage(p))
		require.NoError(t, err)
		require.LessOrEqual(t, float64(n), 8*float64(len(p)), p)
	}
}

// TestCommandsPerPath counts the commands of each of outboxd's paths
// through the store (mongostore.MeasureCommands: the driver's command
// monitor on a replica set, the engine's boundary on lungo) at two sizes,
// and prints the table of the larger: a path whose commands do not grow
// with its events sends a constant number per batch (a cursor's getMores
// aside, one per 16 MiB of documents on a server); the reconciler's sweep
// too (one claim for all its candidates). OUTBOXD_TEST_MEASURE=full measures the sizes of docs/mongodb.md.
func TestCommandsPerPath(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	measure := func(cfg mongostore.MeasureConfig) mongostore.CommandTable {
		t.Helper()
		opts := &mongostore.Options{}
		if testkit.RealMongo() {
			opts.Database = testkit.Name("outboxd_measure")
			t.Cleanup(func() { dropDatabase(t, opts.Database) })
		}
		table, err := mongostore.MeasureCommands(ctx, testkit.MongoURI(), opts, cfg)
		require.NoError(t, err)
		return table
	}
	small := measure(mongostore.MeasureConfig{IngestGroup: 20, WorkerBatch: 40, DispatcherBatch: 40, ReconcilerSweep: 20})
	large := mongostore.MeasureConfig{IngestGroup: 100, WorkerBatch: 200, DispatcherBatch: 200, ReconcilerSweep: 100}
	if os.Getenv("OUTBOXD_TEST_MEASURE") == "full" {
		large = mongostore.MeasureConfig{}
	}
	big := measure(large)
	t.Logf("commands per path:\n%s", big)
	require.Len(t, big.Rows, len(small.Rows))
	for i, r := range big.Rows {
		require.Greater(t, r.Total, 1, "%s: counted at all (lungo counts at the engine's boundary): %v", r.Path, r.Commands)
		// A server's cursors send a getMore per 16 MiB batch beyond the
		// first (of 101 documents): one or two more at these sizes.
		require.LessOrEqual(t, r.Total, small.Rows[i].Total+2, "%s: %v vs %v", r.Path, r.Commands, small.Rows[i].Commands)
		require.Less(t, r.Total, 15, "%s: a constant few commands per batch, never one per event: %v", r.Path, r.Commands)
	}
}

// dropDatabase drops a database of the replica set of
// OUTBOXD_TEST_MONGO_URI.
func dropDatabase(t testing.TB, name string) {
	t.Helper()
	ctx := context.Background()
	s, err := mongostore.Open(ctx, testkit.MongoURI(), &mongostore.Options{Database: name})
	if err != nil {
		t.Logf("dropping %s: %v", name, err)
		return
	}
	defer s.Close(ctx)
	_ = mongoseam.Database(s).Drop(ctx)
}

// TestStepDownUnderLoad is the row "MongoDB primary steps down (failover)"
// on a real replica set of three members: while clients write through the
// Committer (ingest's group commit), the primary steps down. Requests in
// flight get unavailable (503 at ingest) and the clients send them again
// with the same idempotency key, as a client does after a 503; the feed
// (the dispatcher's change stream) is reopened from its position after an
// error, as the dispatcher does. At the end every accepted key names one
// original with one outbox entry, and the feed delivered every entry. It
// steps the set's primary down, which disturbs every other test on the
// set, so it runs only with OUTBOXD_TEST_MONGO_STEPDOWN=1: the mongo
// workflow runs it alone after the suite.
func TestStepDownUnderLoad(t *testing.T) {
	skipUnlessOptedIn(t, "OUTBOXD_TEST_MONGO_STEPDOWN", "steps the primary down")
	ctx := context.Background()
	s := testkit.NewMongo(t, nil)
	w := outbox.NewWriter(s, nil)
	cm, err := outbox.NewCommitter(w, nil)
	require.NoError(t, err)
	require.NoError(t, cm.Start(ctx))
	defer func() { require.NoError(t, cm.Stop(ctx)) }()

	delivered := make(chan outbox.Entry, 100_000)
	followCtx, stopFollowing := context.WithCancel(ctx)
	defer stopFollowing()
	follow := followFeed(followCtx, t, s, delivered)

	primary := func() string {
		var hello bson.M
		require.NoError(t, mongoseam.Database(s).Client().Database("admin").RunCommand(ctx, bson.D{{Key: "hello", Value: 1}}).Decode(&hello))
		p, _ := hello["primary"].(string)
		return p
	}
	before := primary()
	const clients = 16
	var accepted sync.Map // key → id
	var acceptedN, unavailable atomic.Int64
	stop := make(chan struct{})
	var wg sync.WaitGroup
	for c := range clients {
		wg.Go(func() {
			for i := 0; ; i++ {
				select {
				case <-stop:
					return
				default:
				}
				key := fmt.Sprintf("stepdown-%d-%d", c, i)
				b, err := w.Prepare([]outbox.Input{{IdempotencyKey: key, SourceKey: "s", DeviceKey: fmt.Sprint("d", c), OccurredAt: "2026-11-01T10:00:00Z"}})
				if !assert.NoError(t, err) {
					return
				}
				for {
					rctx, cancel := context.WithTimeout(ctx, 10*time.Second)
					res, err := cm.Write(rctx, b)
					cancel()
					if err == nil {
						accepted.Store(key, res[0].ID)
						acceptedN.Add(1)
						break
					}
					if !store.IsUnavailable(err) && !errors.Is(err, context.DeadlineExceeded) {
						t.Errorf("key %s: %v", key, err)
						return
					}
					unavailable.Add(1)
					_ = clock.Sleep(ctx, 100*time.Millisecond) // a client's pause before it sends a 503'd request again
				}
			}
		})
	}
	require.Eventually(t, func() bool { return acceptedN.Load() >= 500 }, time.Minute, 10*time.Millisecond, "the load runs before the step-down")
	err = mongoseam.Database(s).Client().Database("admin").RunCommand(ctx, bson.D{
		{Key: "replSetStepDown", Value: 30}, {Key: "secondaryCatchUpPeriodSecs", Value: 10}}).Err()
	t.Logf("replSetStepDown: %v", err) // the primary closes its connections: an error is expected
	var after string
	require.Eventually(t, func() bool { after = primary(); return after != "" && after != before }, time.Minute, 100*time.Millisecond, "a new primary")
	resumed := acceptedN.Load()
	require.Eventually(t, func() bool { return acceptedN.Load() >= resumed+500 }, time.Minute, 10*time.Millisecond, "writes go on on the new primary")
	close(stop)
	wg.Wait()
	require.False(t, t.Failed())

	want := map[string]string{} // event id → key
	accepted.Range(func(k, v any) bool { want[v.(string)] = k.(string); return true })
	t.Logf("%d events accepted across a step-down from %s to %s; %d requests answered unavailable and sent again",
		len(want), before, after, unavailable.Load())
	n, err := mongoseam.Database(s).Collection(mongostore.EventsCollection).CountDocuments(ctx, bson.M{})
	require.NoError(t, err)
	require.EqualValues(t, len(want), n, "one original per accepted key, none else")
	for id, key := range want {
		ev, err := s.EventByKey(ctx, key)
		require.NoError(t, err)
		require.Equal(t, id, ev.ID)
	}
	entries, err := mongoseam.Database(s).Collection(mongostore.OutboxCollection).CountDocuments(ctx, bson.M{})
	require.NoError(t, err)
	require.EqualValues(t, len(want), entries, "one outbox entry per original")

	seen := map[string]bool{}
	deadline := time.After(time.Minute)
	for len(seen) < len(want) {
		select {
		case e := <-delivered:
			require.Contains(t, want, e.EventID)
			seen[e.EventID] = true
		case <-deadline:
			t.Fatalf("the feed delivered %d of %d entries", len(seen), len(want))
		}
	}
	stopFollowing()
	require.NoError(t, <-follow)
}

// followFeed follows the store's feed of the default stream as the
// dispatcher does: it reopens from its position after an error, and from
// the outbox (Undispatched) when the position is lost. It sends what it
// reads on out until ctx ends, then returns nil on the channel.
func followFeed(ctx context.Context, t *testing.T, s *mongostore.Store, out chan<- outbox.Entry) <-chan error {
	t.Helper()
	done := make(chan error, 1)
	f, err := s.OpenFeed(ctx, outbox.StreamDefault, nil, store.FeedOptions{})
	require.NoError(t, err)
	go func() {
		defer func() { _ = f.Close(context.Background()) }()
		for ctx.Err() == nil {
			entries, err := f.Next(ctx, 1000, time.Second)
			for _, e := range entries {
				out <- e
			}
			if err == nil || ctx.Err() != nil {
				continue
			}
			pos := f.Position()
			for ctx.Err() == nil {
				reopened, err := s.OpenFeed(ctx, outbox.StreamDefault, pos, store.FeedOptions{})
				if err == nil {
					_ = f.Close(context.Background())
					f = reopened
					break
				}
				if errors.Is(err, store.ErrPositionLost) {
					done <- fmt.Errorf("the feed lost its position across the step-down: %w", err)
					return
				}
				_ = clock.Sleep(ctx, 200*time.Millisecond) // the dispatcher's back-off, shortened
			}
		}
		done <- nil
	}()
	return done
}

// TestConformanceCustomNames runs the storage port's suite on collections
// of other names (Options.EventsCollection, Options.OutboxCollection)
// beside a service's own "events" and "outbox" collections, which the
// store never reads or changes.
func TestConformanceCustomNames(t *testing.T) {
	t.Parallel()
	storetest.Run(t, storetest.Harness{NoShortHistory: testkit.RealMongo(), Open: func(t testing.TB, o storetest.Options) store.Store {
		opts := &mongostore.Options{EventsCollection: "outboxd_events", OutboxCollection: "outboxd_outbox"}
		if o.ShortHistory {
			opts.OplogSize = 50
		}
		s := testkit.NewMongo(t, opts)
		ctx := context.Background()
		db := mongoseam.Database(s)
		for _, coll := range []string{"events", "outbox"} {
			_, err := db.Collection(coll).InsertOne(ctx, bson.M{"service": "own"})
			require.NoError(t, err)
		}
		t.Cleanup(func() {
			for _, coll := range []string{"events", "outbox"} {
				n, err := db.Collection(coll).CountDocuments(context.Background(), bson.M{"service": "own"})
				if err == nil && n != 1 {
					t.Errorf("the service's own %s collection holds %d documents, want 1", coll, n)
				}
			}
		})
		return s
	}})
}

// TestMigrateOverForeignDocuments: an events collection of the service's
// own (documents without outboxd's fields) fails Migrate's unique
// idempotencyKey index with a duplicate key; the error says that outboxd
// needs a collection of its own and names the option that chooses one,
// and Migrate with that option then succeeds beside it.
func TestMigrateOverForeignDocuments(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	o := &mongostore.Options{Database: mongostore.DatabaseDefault, CountsTTL: -1}
	if testkit.RealMongo() {
		o.Database = testkit.Name("outboxd_test")
	}
	s, err := mongostore.Open(ctx, testkit.MongoURI(), o)
	require.NoError(t, err)
	t.Cleanup(func() {
		if testkit.RealMongo() {
			_ = mongoseam.Database(s).Drop(context.Background())
		}
		_ = s.Close(context.Background())
	})
	_, err = mongoseam.Database(s).Collection("events").InsertMany(ctx, []any{bson.M{"sku": "a"}, bson.M{"sku": "b"}})
	require.NoError(t, err)
	err = s.Migrate(ctx, nil)
	require.ErrorIs(t, err, mongostore.ErrForeignCollection)
	require.ErrorIs(t, err, store.ErrForeign, "the sentinel both stores share")
	require.ErrorContains(t, err, "Options.EventsCollection")
	require.ErrorContains(t, err, "Store.Migrate")
	require.NotContains(t, err.Error(), "outboxd migrate")

	o2 := *o
	o2.EventsCollection = "outboxd_events"
	s2, err := mongostore.Open(ctx, testkit.MongoURI(), &o2)
	require.NoError(t, err)
	if !testkit.RealMongo() { // lungo's engine is per Open: seed it again
		_, err = mongoseam.Database(s2).Collection("events").InsertMany(ctx, []any{bson.M{"sku": "a"}, bson.M{"sku": "b"}})
		require.NoError(t, err)
	}
	t.Cleanup(func() { _ = s2.Close(context.Background()) })
	require.NoError(t, s2.Migrate(ctx, nil))
	require.NoError(t, s2.CheckSchema(ctx))
}
