package sqlitestore_test

import (
	"context"
	"database/sql"
	"encoding/json"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"testing"
	"time"

	"github.com/stretchr/testify/require"
	"go.uber.org/goleak"

	"github.com/outboxd/outboxd/outbox"
	"github.com/outboxd/outboxd/store"
	"github.com/outboxd/outboxd/store/sqlitestore"
	"github.com/outboxd/outboxd/store/storetest"
)

var _ store.Store = (*sqlitestore.Store)(nil)

// childEnv, when set, makes TestDurabilityAfterSIGKILL the child: it names
// the store file the child writes to.
const childEnv = "OUTBOXD_SQLITESTORE_CHILD"

func TestMain(m *testing.M) {
	if os.Getenv(childEnv) != "" {
		// A child of TestDurabilityAfterSIGKILL: no leak check, it is killed.
		os.Exit(m.Run())
	}
	goleak.VerifyTestMain(m)
}

// testBundle is one test's store on its own file.
type testBundle struct {
	path  string
	store *sqlitestore.Store
}

// setup opens a migrated store on a new file under t.TempDir().
func setup(t testing.TB) *testBundle {
	t.Helper()
	path := filepath.Join(t.TempDir(), "data", "outboxd.db")
	return &testBundle{path: path, store: open(t, path, nil)}
}

// open opens and migrates the store at path and closes it at cleanup.
func open(t testing.TB, path string, opts *sqlitestore.Options) *sqlitestore.Store {
	t.Helper()
	s, err := sqlitestore.Open(context.Background(), path, opts)
	require.NoError(t, err)
	t.Cleanup(func() { _ = s.Close(context.Background()) })
	require.NoError(t, s.Migrate(context.Background(), nil))
	return s
}

// records returns n originals and their entries of stream, created at.
func records(n int, stream string, at time.Time) ([]outbox.Event, []outbox.Entry) {
	events := make([]outbox.Event, n)
	entries := make([]outbox.Entry, n)
	for i := range n {
		id := outbox.NewEventID()
		events[i] = outbox.Event{
			ID: id, IdempotencyKey: "key-" + id, SourceKey: "src", DeviceKey: fmt.Sprintf("d%d", i),
			Type: outbox.TypeDefault, OccurredAt: at.Add(-time.Minute), Payload: json.RawMessage(`{"n":1}`),
			ContentHash: "hash-" + id, CreatedAt: at,
		}
		entries[i] = outbox.Entry{EventID: id, Stream: stream, Message: events[i].Message(outbox.OriginOutbox).Encode(), CreatedAt: at}
	}
	return events, entries
}

// insert writes events and entries in one WriteTx.
func insert(ctx context.Context, s *sqlitestore.Store, events []outbox.Event, entries []outbox.Entry) error {
	return s.WriteTx(ctx, func(ctx context.Context, tx outbox.Tx) error {
		if err := tx.InsertEvents(ctx, events); err != nil {
			return err
		}
		return tx.InsertEntries(ctx, entries)
	})
}

// write stores n new originals of stream and returns their ids.
func write(t testing.TB, s *sqlitestore.Store, stream string, n int) []string {
	t.Helper()
	events, entries := records(n, stream, time.Now())
	require.NoError(t, insert(context.Background(), s, events, entries))
	ids := make([]string, n)
	for i, e := range events {
		ids[i] = e.ID
	}
	return ids
}

// drain reads f until it has want entries, failing after the deadline.
func drain(t testing.TB, f store.Feed, want int, deadline time.Duration) []outbox.Entry {
	t.Helper()
	var got []outbox.Entry
	end := time.Now().Add(deadline)
	for len(got) < want {
		require.True(t, time.Now().Before(end), "the feed delivered %d of %d entries in %s", len(got), want, deadline)
		batch, err := f.Next(context.Background(), 1000, 100*time.Millisecond)
		require.NoError(t, err)
		got = append(got, batch...)
	}
	return got
}

func eventIDs(entries []outbox.Entry) []string {
	out := make([]string, len(entries))
	for i, e := range entries {
		out[i] = e.EventID
	}
	return out
}

// TestConformance runs the storage port's conformance suite.
func TestConformance(t *testing.T) {
	t.Parallel()
	storetest.Run(t, storetest.Harness{Open: func(t testing.TB, _ storetest.Options) store.Store {
		// History is bounded by DeleteDispatched alone: ShortHistory needs
		// nothing.
		return open(t, filepath.Join(t.TempDir(), "outboxd.db"), nil)
	}})
}

// TestConformanceCustomNames runs the storage port's suite on tables of
// other names (Options.EventsTable, Options.OutboxTable) beside a
// service's own events and outbox tables in the same file, which the store
// never reads or changes.
func TestConformanceCustomNames(t *testing.T) {
	t.Parallel()
	storetest.Run(t, storetest.Harness{Open: func(t testing.TB, _ storetest.Options) store.Store {
		path := filepath.Join(t.TempDir(), "outboxd.db")
		serviceTables(t, path)
		// Registered before open's: runs after the store is closed (some
		// checks close it themselves).
		t.Cleanup(func() { checkServiceTables(t, path) })
		return open(t, path, &sqlitestore.Options{EventsTable: "outboxd_events", OutboxTable: "outboxd_outbox"})
	}})
}

// ownTables are the tables of a service's own that serviceTables
// creates.
var ownTables = []string{"events", "outbox"}

// eachServiceTable calls fn with each of ownTables and a connection of its
// own to the SQLite file at path (the store's may be closed).
func eachServiceTable(t testing.TB, path string, fn func(db *sql.DB, table string)) {
	t.Helper()
	db, err := sql.Open("sqlite", path)
	require.NoError(t, err)
	defer db.Close()
	for _, table := range ownTables {
		fn(db, table)
	}
}

// serviceTables creates, in the SQLite file at path, a service's own events
// and outbox tables (ownTables) of one row each.
func serviceTables(t testing.TB, path string) {
	eachServiceTable(t, path, func(db *sql.DB, table string) {
		_, err := db.Exec(`CREATE TABLE ` + table + ` (id INTEGER PRIMARY KEY, service TEXT NOT NULL);
			INSERT INTO ` + table + ` (service) VALUES ('own')`)
		require.NoError(t, err)
	})
}

// checkServiceTables fails t unless the service's own tables of
// serviceTables hold their one row each, as they were.
func checkServiceTables(t testing.TB, path string) {
	eachServiceTable(t, path, func(db *sql.DB, table string) {
		var rows []string
		r, err := db.Query(`SELECT service FROM ` + table)
		require.NoError(t, err)
		for r.Next() {
			var v string
			require.NoError(t, r.Scan(&v))
			rows = append(rows, v)
		}
		require.NoError(t, errors.Join(r.Err(), r.Close()))
		require.Equal(t, []string{"own"}, rows, "the service's own %s table", table)
	})
}
