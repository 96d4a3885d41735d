package mongostore_test

import (
	"context"
	"fmt"
	"testing"
	"time"

	"github.com/stretchr/testify/require"
	"go.mongodb.org/mongo-driver/bson"

	"github.com/outboxd/outboxd/internal/mongoseam"
	"github.com/outboxd/outboxd/internal/testkit"
	"github.com/outboxd/outboxd/outbox"
	"github.com/outboxd/outboxd/store"
	"github.com/outboxd/outboxd/store/mongostore"
)

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
	require.NoError(t, mongoseam.Database(s).RunCommand(context.Background(), bson.D{
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
