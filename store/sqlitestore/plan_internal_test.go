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
// each uses the index its comment names.
func TestQueryPlans(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	s, err := Open(ctx, filepath.Join(t.TempDir(), "outboxd.db"), nil)
	require.NoError(t, err)
	defer s.Close(ctx)
	require.NoError(t, s.Migrate(ctx, nil))

	window := store.EventQuery{From: time.Unix(0, 0), To: time.Unix(10, 0), Limit: 10,
		After: &store.EventCursor{At: time.Unix(1, 0), ID: "x"}}
	list := func(mod func(q *store.EventQuery)) string {
		q := window
		mod(&q)
		sql, _ := listEventsSQL(q)
		return sql
	}
	count := func(mod func(q *store.EventQuery)) string {
		q := window
		mod(&q)
		sql, _ := countEventsSQL(q)
		return sql
	}
	cases := []struct {
		name, query, index string
	}{
		{"ListOccurred", list(func(*store.EventQuery) {}), "events_occurred"},
		{"ListOccurredOpen", list(func(q *store.EventQuery) { q.From, q.To, q.After = time.Time{}, time.Time{}, nil }), "events_occurred"},
		{"ListOccurredSourceFailed", list(func(q *store.EventQuery) { q.SourceKey, q.State = "s", outbox.StateFailed }), "events_occurred"},
		{"ListDevice", list(func(q *store.EventQuery) { q.SourceKey, q.DeviceKey, q.State = "s", "d", outbox.StateSynced }), "events_device"},
		{"ListCreated", list(func(q *store.EventQuery) { q.By, q.State = store.ByCreated, outbox.StatePending }), "events_created"},
		{"ListCreatedDevice", list(func(q *store.EventQuery) { q.By, q.SourceKey, q.DeviceKey = store.ByCreated, "s", "d" }), "events_created"},
		{"CountOccurred", count(func(*store.EventQuery) {}), "events_occurred"},
		{"CountDevice", count(func(q *store.EventQuery) { q.SourceKey, q.DeviceKey = "s", "d" }), "events_device"},
		{"CountCreated", count(func(q *store.EventQuery) { q.By = store.ByCreated }), "events_created"},
		{"Redrive", qRedrive, "events_id"},
		{"LookupKeys", txQueries[stmtLookupKeys], "events_idempotency_key"},
		{"KeyExists", txQueries[stmtKeyExists], "events_idempotency_key"},
		{"LoadEvents", qLoadEvents, "events_id"},
		{"EventByKey", qEventByKey, "events_idempotency_key"},
		{"MarkSynced", qMarkSynced, "events_id"},
		{"Park", qPark, "events_id"},
		{"Candidates", qCandidates, "events_pending"},
		{"ClaimRead", qClaimRead, "events_id"},
		{"Claim", qClaim, "events_id"},
		{"RollbackClaim", qRollbackClaim, "events_id"},
		{"CountTotal", qCountTotal, ""},
		{"CountPending", qCountPending, "events_pending"},
		{"CountFailed", qCountFailed, "events_failed"},
		{"CountUndispatched", qCountUndispatched, "_undispatched"},
		{"LastSeq", qLastSeq, ""},
		{"Floor", qFloor, ""},
		{"FloorAndLastSeq", qFloorAndLastSeq, ""},
		{"Feed", qFeed, "outbox_stream_seq"},
		{"Undispatched", qUndispatched, "outbox_undispatched"},
		{"FeedPartition", qFeedPartition, "outbox_partition_seq"},
		{"UndispatchedPartition", qUndispatchedPartition, "outbox_partition_undispatched"},
		{"Partitions", qPartitions, ""},
		{"RecordPartitions", qRecordPartitions, ""},
		{"OutboxEntries", qOutboxEntries, "outbox_event"},
		{"MarkDispatched", qMarkDispatched, "INTEGER PRIMARY KEY"},
		{"DeleteDispatched", qDeleteDispatched, "outbox_dispatched_at"},
		{"DeleteSynced", qDeleteSynced, "events_created"},
		{"DeleteSyncedOutbox", qDeleteSynced, "outbox_event"},
		{"CountRemoved", qCountRemoved, ""},
		{"RaiseFloor", qRaiseFloor, ""},
		{"LeaseRead", qLeaseRead, ""},
		{"LeaseRenew", qLeaseRenew, ""},
		{"CheckpointSet", qCheckpointSet, ""},
		{"LeaseCheck", qLeaseCheck, ""},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
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
			for _, line := range plan {
				if !strings.HasPrefix(line, "SCAN events") && !strings.HasPrefix(line, "SCAN outbox") {
					continue
				}
				// A scan of a partial index reads the backlog (pending,
				// parked or undispatched rows) only; the table rows are never
				// read (the plan's DeferredSeek is not followed by a column
				// of the table).
				partial := strings.HasSuffix(line, " events_pending") || strings.HasSuffix(line, " events_failed") ||
					strings.HasSuffix(line, " outbox_undispatched") || strings.HasSuffix(line, " outbox_partition_undispatched")
				require.True(t, partial, "a scan of a table or of a full index:\n%s", all)
			}
			if c.index != "" {
				require.Contains(t, all, c.index, "plan:\n%s", all)
			}
		})
	}
}
