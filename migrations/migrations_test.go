package migrations_test

import (
	"context"
	"testing"
	"time"

	"github.com/stretchr/testify/require"
	"go.mongodb.org/mongo-driver/bson"

	"github.com/outboxd/outboxd/internal/testkit"
	"github.com/outboxd/outboxd/migrations"
	"github.com/outboxd/outboxd/outbox"
)

func TestPostgresTwice(t *testing.T) {
	t.Parallel()
	pg := testkit.NewPostgres(t) // already migrated from the template
	ctx := context.Background()
	n, err := migrations.Postgres(ctx, pg.URL)
	require.NoError(t, err)
	require.Equal(t, 0, n, "a second run applies nothing")
	var tables int
	require.NoError(t, pg.Pool.QueryRow(ctx, `SELECT count(*) FROM information_schema.tables
		WHERE table_schema='public' AND table_name IN ('events','device_daily_stats')`).Scan(&tables))
	require.Equal(t, 2, tables)
}

func TestMongoTwice(t *testing.T) {
	t.Parallel()
	m := testkit.NewMongo(t, nil) // indexes created once
	ctx := context.Background()
	names := func(coll string) map[string]bson.M {
		cur, err := m.DB.Collection(coll).Indexes().List(ctx)
		require.NoError(t, err)
		var specs []bson.M
		require.NoError(t, cur.All(ctx, &specs))
		out := map[string]bson.M{}
		for _, s := range specs {
			out[s["name"].(string)] = s
		}
		return out
	}
	before := names(outbox.EventsCollection)
	require.NoError(t, migrations.Mongo(ctx, m.DB, nil))
	require.Equal(t, before, names(outbox.EventsCollection))
	require.Contains(t, before, migrations.IndexIdempotencyKey)
	require.Contains(t, before, migrations.IndexReconciler)

	// A changed retention replaces the TTL index.
	require.NoError(t, migrations.Mongo(ctx, m.DB, &migrations.MongoConfig{OutboxRetention: time.Hour}))
	ttl := names(outbox.OutboxCollection)[migrations.IndexOutboxTTL]
	require.EqualValues(t, 3600, ttl["expireAfterSeconds"])
}
