package sqlitestore

import (
	"context"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/outboxd/outboxd/outbox"
	"github.com/outboxd/outboxd/store"
)

// TestQueryPlans checks, with EXPLAIN QUERY PLAN, that every query of the
// store is served by an index (or the primary key), never by a scan of
// events or outbox (counts scan a partial index: the backlog only), and that
// each uses the index its comment names: with the default table names and
// with others (Options.EventsTable, Options.OutboxTable), whose indexes are
// named after them.
func TestQueryPlans(t *testing.T) {
	t.Parallel()
	for _, o := range []*Options{nil, {EventsTable: "Svc_Events", OutboxTable: "svc_outbox"}} {
		name := "Default"
		if o != nil {
			name = o.EventsTable
		}
		t.Run(name, func(t *testing.T) {
			t.Parallel()
			queryPlans(t, o)
		})
	}
}

func queryPlans(t *testing.T, o *Options) {
	ctx := context.Background()
	s, err := Open(ctx, filepath.Join(t.TempDir(), "outboxd.db"), o)
	require.NoError(t, err)
	defer s.Close(ctx)
	require.NoError(t, s.Migrate(ctx, nil))
	q := s.q

	window := store.EventQuery{From: time.Unix(0, 0), To: time.Unix(10, 0), Limit: 10,
		After: &store.EventCursor{At: time.Unix(1, 0), ID: "x"}}
	list := func(mod func(q *store.EventQuery)) string {
		eq := window
		mod(&eq)
		sql, _ := q.listEventsSQL(eq)
		return sql
	}
	count := func(mod func(q *store.EventQuery)) string {
		eq := window
		mod(&eq)
		sql, _ := q.countEventsSQL(eq)
		return sql
	}
	scoped := func(scope store.SyncedScope) string {
		sql, _ := scopedDeleteSynced(q.deleteSynced, time.Unix(1, 0), scope, 10)
		return sql
	}
	// index is the name of the index that serves the query, with {events}
	// and {outbox} for the tables' names.
	cases := []struct {
		name, query, index string
	}{
		{"ListOccurred", list(func(*store.EventQuery) {}), "{events}_occurred"},
		{"ListOccurredOpen", list(func(q *store.EventQuery) { q.From, q.To, q.After = time.Time{}, time.Time{}, nil }), "{events}_occurred"},
		{"ListOccurredSourceFailed", list(func(q *store.EventQuery) { q.SourceKey, q.State = "s", outbox.StateFailed }), "{events}_occurred"},
		{"ListDevice", list(func(q *store.EventQuery) { q.SourceKey, q.DeviceKey, q.State = "s", "d", outbox.StateSynced }), "{events}_device"},
		{"ListCreated", list(func(q *store.EventQuery) { q.By, q.State = store.ByCreated, outbox.StatePending }), "{events}_created"},
		{"ListCreatedDevice", list(func(q *store.EventQuery) { q.By, q.SourceKey, q.DeviceKey = store.ByCreated, "s", "d" }), "{events}_created"},
		{"CountOccurred", count(func(*store.EventQuery) {}), "{events}_occurred"},
		{"CountDevice", count(func(q *store.EventQuery) { q.SourceKey, q.DeviceKey = "s", "d" }), "{events}_device"},
		{"CountCreated", count(func(q *store.EventQuery) { q.By = store.ByCreated }), "{events}_created"},
		{"Redrive", q.redrive, "{events}_id"},
		{"LookupKeys", q.tx[stmtLookupKeys], "{events}_idempotency_key"},
		{"KeyExists", q.tx[stmtKeyExists], "{events}_idempotency_key"},
		{"LoadEvents", q.loadEvents, "{events}_id"},
		{"EventByKey", q.eventByKey, "{events}_idempotency_key"},
		{"MarkSynced", q.markSynced, "{events}_id"},
		{"Park", q.park, "{events}_id"},
		{"Candidates", q.candidates, "{events}_pending"},
		{"ClaimRead", q.claimRead, "{events}_id"},
		{"Claim", q.claim, "{events}_id"},
		{"RollbackClaim", q.rollbackClaim, "{events}_id"},
		{"CountTotal", q.countTotal, ""},
		{"CountPending", q.countPending, "{events}_pending"},
		{"CountFailed", q.countFailed, "{events}_failed"},
		{"CountUndispatched", q.countUndispatched, "_undispatched"},
		{"LastSeq", q.lastSeq, ""},
		{"Floor", qFloor, ""},
		{"FloorAndLastSeq", q.floorAndLastSeq, ""},
		{"Feed", q.feed, "{outbox}_stream_seq"},
		{"Undispatched", q.undispatched, "{outbox}_undispatched"},
		{"FeedPartition", q.feedPartition, "{outbox}_partition_seq"},
		{"UndispatchedPartition", q.undispatchedPartition, "{outbox}_partition_undispatched"},
		{"Partitions", qPartitions, ""},
		{"RecordPartitions", qRecordPartitions, ""},
		{"OutboxEntries", q.outboxEntries, "{outbox}_event"},
		{"MarkDispatched", q.markDispatched, "INTEGER PRIMARY KEY"},
		{"DeleteDispatched", q.deleteDispatched, "{outbox}_dispatched_at"},
		{"DeleteSynced", q.deleteSynced, "{events}_created"},
		{"DeleteSyncedOutbox", q.deleteSynced, "{outbox}_event"},
		{"DeleteSyncedScoped", scoped(store.SyncedScope{Type: "t", Source: "s", ExceptTypes: []string{"a", "b"}, ExceptSources: []string{"c"}}), "{events}_created"},
		{"CountRemoved", qCountRemoved, ""},
		{"RaiseFloor", qRaiseFloor, ""},
		{"LeaseRead", qLeaseRead, ""},
		{"LeaseRenew", qLeaseRenew, ""},
		{"CheckpointSet", qCheckpointSet, ""},
		{"LeaseCheck", qLeaseCheck, ""},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			require.NotContains(t, c.query, "{", "a name left out")
			args := make([]any, strings.Count(c.query, "?"))
			for i := range args {
				args[i] = "x"
			}
			rows, err := s.read.QueryContext(ctx, "EXPLAIN QUERY PLAN "+c.query, args...)
			require.NoError(t, err)
			defer rows.Close()
			var plan []string
			for rows.Next() {
				var id, parent, notused int
				var detail string
				require.NoError(t, rows.Scan(&id, &parent, &notused, &detail))
				plan = append(plan, detail)
			}
			require.NoError(t, rows.Err())
			all := strings.Join(plan, "\n")
			lower := strings.ToLower(all)
			for _, line := range strings.Split(lower, "\n") {
				if !strings.HasPrefix(line, "scan "+q.events) && !strings.HasPrefix(line, "scan "+q.outbox) {
					continue
				}
				// A scan of a partial index reads the backlog (pending,
				// parked or undispatched rows) only; the table rows are never
				// read (the plan's DeferredSeek is not followed by a column
				// of the table).
				partial := false
				for _, ix := range []string{"{events}_pending", "{events}_failed", "{outbox}_undispatched", "{outbox}_partition_undispatched"} {
					partial = partial || strings.HasSuffix(line, " "+q.sql(ix))
				}
				require.True(t, partial, "a scan of a table or of a full index:\n%s", all)
			}
			if c.index != "" {
				require.Contains(t, lower, strings.ToLower(q.sql(c.index)), "plan:\n%s", all)
			}
		})
	}
}
