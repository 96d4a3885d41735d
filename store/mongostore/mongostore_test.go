package mongostore_test

import (
	"context"
	"fmt"
	"testing"
	"time"

	"github.com/stretchr/testify/require"
	"go.mongodb.org/mongo-driver/bson"

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
		cur, err := s.Database().Collection(coll).Indexes().List(ctx)
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
}

// TestCandidateQueryUsesReconcilerIndex proves on a real replica set that
// the reconciler's query is served by the reconciler index (no collection
// scan).
func TestCandidateQueryUsesReconcilerIndex(t *testing.T) {
	testkit.SkipUnlessRealMongo(t)
	t.Parallel()
	ctx := context.Background()
	s := testkit.NewMongo(t, nil)
	res := seed(t, s, func(int) string { return "d" })
	for _, r := range res[:20] {
		_, err := s.MarkSynced(ctx, []string{r.ID}, seedAt)
		require.NoError(t, err)
	}
	now := seedAt.Add(time.Hour)
	stages, plan := explain(t, s, mongostore.CandidateFilter(now.Add(-5*time.Minute), now.Add(-30*time.Minute)),
		mongostore.CandidateSort, 1000)
	require.NotContains(t, stages, "COLLSCAN", "winning plan: %v", plan)
	require.Contains(t, stages["IXSCAN"], mongostore.IndexReconciler, "winning plan: %v", plan)
}

// TestOperatorQueriesUseTheirIndexes proves on a real replica set that the
// operator commands' listings are served by their indexes (no collection
// scan, no in-memory sort).
func TestOperatorQueriesUseTheirIndexes(t *testing.T) {
	testkit.SkipUnlessRealMongo(t)
	t.Parallel()
	s := testkit.NewMongo(t, nil)
	seed(t, s, func(i int) string { return fmt.Sprintf("d%d", i%5) })
	window := store.EventQuery{From: seedAt.Add(-time.Hour), To: seedAt, Limit: 100,
		After: &store.EventCursor{At: seedAt.Add(-30 * time.Minute), ID: outbox.NewEventID()}}
	for _, tc := range []struct {
		name  string
		mod   func(q *store.EventQuery)
		index string
	}{
		{"Occurred", func(*store.EventQuery) {}, mongostore.IndexOccurred},
		{"Created", func(q *store.EventQuery) { q.By = store.ByCreated }, mongostore.IndexCreated},
		{"Device", func(q *store.EventQuery) { q.SourceKey, q.DeviceKey = "s", "d1" }, mongostore.IndexDevice},
	} {
		t.Run(tc.name, func(t *testing.T) {
			q := window
			tc.mod(&q)
			filter, sort := mongostore.EventQueryFilter(q, true)
			stages, plan := explain(t, s, filter, sort, int64(q.Limit))
			require.NotContains(t, stages, "COLLSCAN", "winning plan: %v", plan)
			require.NotContains(t, stages, "SORT", "winning plan: %v", plan)
			require.Contains(t, stages["IXSCAN"], tc.index, "winning plan: %v", plan)
		})
	}
}

// seedAt is the createdAt of seed's originals.
var seedAt = time.Date(2026, 11, 1, 12, 0, 0, 0, time.UTC)

// seed writes 50 originals of source s, created at seedAt, that occurred a
// minute apart before it, the i-th of device(i).
func seed(t *testing.T, s *mongostore.Store, device func(i int) string) []outbox.Result {
	t.Helper()
	w := outbox.NewWriter(s, &outbox.WriterConfig{Now: func() time.Time { return seedAt }})
	inputs := make([]outbox.Input, 50)
	for i := range inputs {
		inputs[i] = outbox.Input{SourceKey: "s", DeviceKey: device(i), OccurredAt: seedAt.Add(-time.Duration(i) * time.Minute).Format(time.RFC3339)}
	}
	res, err := w.Write(context.Background(), inputs)
	require.NoError(t, err)
	return res
}

// explain returns the stages (with their index names) of the winning plan
// of a find on the events, and the plan.
func explain(t *testing.T, s *mongostore.Store, filter, sort bson.D, limit int64) (map[string][]string, any) {
	t.Helper()
	var out bson.M
	require.NoError(t, s.Database().RunCommand(context.Background(), bson.D{
		{Key: "explain", Value: bson.D{{Key: "find", Value: mongostore.EventsCollection},
			{Key: "filter", Value: filter}, {Key: "sort", Value: sort}, {Key: "limit", Value: limit}}},
		{Key: "verbosity", Value: "queryPlanner"},
	}).Decode(&out))
	planner, ok := out["queryPlanner"].(bson.M)
	require.True(t, ok, "explain output: %v", out)
	stages := map[string][]string{}
	collectStages(planner["winningPlan"], stages)
	return stages, planner["winningPlan"]
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
