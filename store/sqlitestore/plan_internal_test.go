package sqlitestore

import (
	"context"
	"path/filepath"
	"strings"
	"testing"

	"github.com/stretchr/testify/require"
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

	cases := []struct {
		name, query, index string
	}{
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
		{"CountUndispatched", qCountUndispatched, "outbox_undispatched"},
		{"LastSeq", qLastSeq, ""},
		{"Floor", qFloor, ""},
		{"FloorAndLastSeq", qFloorAndLastSeq, ""},
		{"Feed", qFeed, "outbox_stream_seq"},
		{"Undispatched", qUndispatched, "outbox_undispatched"},
		{"MarkDispatched", qMarkDispatched, "INTEGER PRIMARY KEY"},
		{"DeleteDispatched", qDeleteDispatched, "outbox_dispatched_at"},
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
					strings.HasSuffix(line, " outbox_undispatched")
				require.True(t, partial, "a scan of a table or of a full index:\n%s", all)
			}
			if c.index != "" {
				require.Contains(t, all, c.index, "plan:\n%s", all)
			}
		})
	}
}
