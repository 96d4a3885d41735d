package runner

import (
	"context"
	"path/filepath"
	"testing"

	"github.com/stretchr/testify/require"
	"go.mongodb.org/mongo-driver/bson"

	"github.com/outboxd/outboxd/internal/config"
	"github.com/outboxd/outboxd/internal/mongoseam"
	"github.com/outboxd/outboxd/internal/testkit"
	"github.com/outboxd/outboxd/outbox"
	"github.com/outboxd/outboxd/store/mongostore"
	"github.com/outboxd/outboxd/store/sqlitestore"
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

// TestTableFlags: on an SQLite store, --events-collection and
// --outbox-collection (or their OUTBOXD_* variables) name its tables: the
// originals and entries written go there, beside a service's own events
// table in the same file, which stays as it was.
func TestTableFlags(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	path := filepath.Join(t.TempDir(), "app.db")
	own, err := sqlitestore.Open(ctx, path, nil)
	require.NoError(t, err)
	_, err = own.DB().ExecContext(ctx, `CREATE TABLE events (id INTEGER PRIMARY KEY, sku TEXT); INSERT INTO events (sku) VALUES ('a')`)
	require.NoError(t, err)
	require.NoError(t, own.Close(ctx))

	r, _, ok := lookupRole([]string{"migrate"})
	require.True(t, ok)
	fs, o := newFlagSet(r)
	env := map[string]string{"OUTBOXD_OUTBOX_COLLECTION": "svc_outbox"}
	require.NoError(t, config.Parse(fs, []string{"--store", "sqlite:" + path, "--events-collection", "svc_events"},
		func(k string) (string, bool) { v, ok := env[k]; return v, ok }))
	require.NoError(t, o.validate())
	a := &app{o: o, role: r, log: testkit.Logger(t), set: &settings{}}
	t.Cleanup(a.close)
	a.o.postgresURL = testkit.NewPostgres(t).URL
	require.NoError(t, a.open(ctx))
	require.NoError(t, a.st.Migrate(ctx, nil))
	res, err := outbox.NewWriter(a.st, nil).Write(ctx, []outbox.Input{{SourceKey: "s", DeviceKey: "d", OccurredAt: "2026-11-01T10:00:00Z"}})
	require.NoError(t, err)
	db := a.st.(*sqlitestore.Store).DB()
	var id, sku string
	require.NoError(t, db.QueryRowContext(ctx, `SELECT e.id, o.event_id FROM svc_events e JOIN svc_outbox o ON o.event_id = e.id`).Scan(&id, &sku))
	require.Equal(t, res[0].ID, id)
	require.NoError(t, db.QueryRowContext(ctx, `SELECT group_concat(sku) FROM events`).Scan(&sku))
	require.Equal(t, "a", sku, "the service's own events table")
	var outboxes int
	require.NoError(t, db.QueryRowContext(ctx, `SELECT count(*) FROM sqlite_master WHERE name = 'outbox'`).Scan(&outboxes))
	require.Zero(t, outboxes, "no outbox table of the default name")
}
