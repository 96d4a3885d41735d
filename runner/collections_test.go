package runner

import (
	"context"
	"testing"

	"github.com/stretchr/testify/require"
	"go.mongodb.org/mongo-driver/bson"

	"github.com/outboxd/outboxd/internal/config"
	"github.com/outboxd/outboxd/internal/mongoseam"
	"github.com/outboxd/outboxd/internal/testkit"
	"github.com/outboxd/outboxd/outbox"
	"github.com/outboxd/outboxd/store/mongostore"
)

// TestCollectionFlags: --events-collection and --outbox-collection (or
// their OUTBOXD_* variables) name the MongoDB store's collections: the
// originals and entries written go there, and no events or outbox
// collection is created.
func TestCollectionFlags(t *testing.T) {
	t.Parallel()
	r, _, ok := lookupRole([]string{"migrate"})
	require.True(t, ok)
	fs, o := newFlagSet(r)
	env := map[string]string{"OUTBOXD_OUTBOX_COLLECTION": "svc_outbox"}
	require.NoError(t, config.Parse(fs, []string{"--store", "mongodb://h", "--events-collection", "svc_events"},
		func(k string) (string, bool) { v, ok := env[k]; return v, ok }))
	require.NoError(t, o.validate())
	o.store = mongostore.LungoMemory // what migrate refuses from the command line, opened here as a test
	a := &app{o: o, role: r, log: testkit.Logger(t), set: &settings{}}
	t.Cleanup(a.close)
	a.o.postgresURL = testkit.NewPostgres(t).URL
	require.NoError(t, a.open(context.Background()))
	ctx := context.Background()
	require.NoError(t, a.st.Migrate(ctx, nil))
	res, err := outbox.NewWriter(a.st, nil).Write(ctx, []outbox.Input{{SourceKey: "s", DeviceKey: "d", OccurredAt: "2026-11-01T10:00:00Z"}})
	require.NoError(t, err)
	db := mongoseam.Database(a.st)
	names, err := db.ListCollectionNames(ctx, bson.D{})
	require.NoError(t, err)
	require.Subset(t, names, []string{"svc_events", "svc_outbox"})
	require.NotContains(t, names, mongostore.EventsCollection)
	require.NotContains(t, names, mongostore.OutboxCollection)
	n, err := db.Collection("svc_outbox").CountDocuments(ctx, bson.D{})
	require.NoError(t, err)
	require.Equal(t, int64(1), n, "the entry of %s", res[0].ID)
}
