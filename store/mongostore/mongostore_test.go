package mongostore_test

import (
	"context"
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
	var out bson.M
	require.NoError(t, s.Database().RunCommand(ctx, bson.D{
		{Key: "explain", Value: bson.D{
			{Key: "find", Value: mongostore.EventsCollection},
			{Key: "filter", Value: mongostore.CandidateFilter(now.Add(-5*time.Minute), now.Add(-30*time.Minute))},
			{Key: "sort", Value: mongostore.CandidateSort},
			{Key: "limit", Value: int64(1000)},
		}},
		{Key: "verbosity", Value: "queryPlanner"},
	}).Decode(&out))
	planner, ok := out["queryPlanner"].(bson.M)
	require.True(t, ok, "explain output: %v", out)
	stages := map[string][]string{}
	collectStages(planner["winningPlan"], stages)
	require.NotContains(t, stages, "COLLSCAN", "winning plan: %v", planner["winningPlan"])
	require.Contains(t, stages["IXSCAN"], mongostore.IndexReconciler, "winning plan: %v", planner["winningPlan"])
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
