package runner

import (
	"fmt"
	"net/http"
	"strings"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/outboxd/outboxd/internal/operator"
	ostatus "github.com/outboxd/outboxd/internal/status"
	"github.com/outboxd/outboxd/internal/testkit"
)

// TestAuditInDev: `outboxd dev` audits the read model every --audit-every;
// a row deleted by hand shows as drift in /v1/status and `outboxd status`
// (the id, and the verify --repair command over its day) within a few
// runs; the printed command repairs it, the next runs find no drift, and
// the pipeline converges.
func TestAuditInDev(t *testing.T) {
	t.Parallel()
	b := startDev(t, "", "--audit-every", "1s", "--audit-sample", "100", "--min-age", "1h")
	var keys []string
	for i := range 6 {
		key := fmt.Sprintf("audit-%d", i)
		code, body := b.post(t, "/v1/events", key, event(i))
		require.Equal(t, http.StatusCreated, code, string(body))
		keys = append(keys, key)
	}
	audited := func(cond func(*operator.AuditReport) bool) *ostatus.Snapshot {
		var last ostatus.Snapshot
		require.Eventually(t, func() bool {
			s, err := b.status()
			if err != nil || s.Audit == nil {
				return false
			}
			last = s
			return cond(s.Audit)
		}, 60*time.Second, 50*time.Millisecond, "last audit: %+v", last.Audit)
		return &last
	}
	s := audited(func(a *operator.AuditReport) bool { return a.Checked == 6 && a.DriftTotal() == 0 })
	require.Equal(t, map[string]int{"missing": 0, "extra": 0, "content": 0, "stats": 0}, s.Audit.Drift)

	// A row deleted by hand.
	var id string
	require.NoError(t, b.pg.Pool.QueryRow(t.Context(), `DELETE FROM events WHERE idempotency_key = $1 RETURNING event_id`, keys[2]).Scan(&id))
	s = audited(func(a *operator.AuditReport) bool { return a.Drift[operator.AuditMissing] == 1 })
	require.Equal(t, 1, s.Audit.Drift[operator.AuditStats], "its day still counts it")
	require.Equal(t, id, s.Audit.Findings[0].EventID)
	require.Len(t, s.Audit.Repair, 1)
	repair := s.Audit.Repair[0]
	require.True(t, strings.HasPrefix(repair, "outboxd verify --from "), repair)

	code, out, _ := cli("status", "--server", b.base)
	require.Equal(t, ExitOK, code)
	require.Contains(t, out, "AUDIT")
	require.Contains(t, out, "DRIFT missing 1, stats 1")
	require.Contains(t, out, "missing "+id)
	require.Contains(t, out, "REPAIR")
	require.Contains(t, out, repair)

	// The printed command repairs it (exit 1: drift was found).
	args := append(strings.Fields(strings.TrimPrefix(repair, "outboxd ")), "--server", b.base)
	code, out, errOut := cli(args...)
	require.Equal(t, ExitFailure, code, out+errOut)
	ranAt := time.Now()
	audited(func(a *operator.AuditReport) bool {
		return a.StartedAt.After(ranAt) && a.Checked == 6 && a.DriftTotal() == 0
	})

	rdb, _ := testkit.NewRedis(t)
	testkit.RequireConverged(t, testkit.Pipeline{Store: b.openStore(t), Pool: b.pg.Pool, Redis: rdb, Stream: b.stream, Group: b.group},
		keys, 60*time.Second)
}

// TestAuditOffWithoutItsReadModel: `reconcile --every` beside a read model
// of a team's own (outboxd's tables are not in the database) runs no audit
// and says so once: past the first audit tick (a sweep begun 1.5s after
// the start, with --audit-every 1s), the status shows neither an audit nor
// an unavailable one, /metrics has no audit metric (an audit, run or not,
// registers outboxd_audit_*; a run against the missing tables counts
// outboxd_audit_errors_total) and no run is recorded, while the sweeps go
// on.
func TestAuditOffWithoutItsReadModel(t *testing.T) {
	t.Parallel()
	ctx := t.Context()
	pg := testkit.NewPostgres(t)
	_, err := pg.Pool.Exec(ctx, `DROP TABLE events, device_daily_stats, audit_runs`)
	require.NoError(t, err)
	storeURI := "sqlite:" + t.TempDir() + "/s.db"
	code, out := runCLI(t, nil, "migrate", "--store", storeURI, "--store-only")
	require.Equal(t, ExitOK, code, out)
	_, prefix := testkit.NewRedis(t)
	addr := freeAddr(t)
	started := time.Now()
	startRole(t, addr, "reconcile", "--store", storeURI, "--postgres-url", pg.URL, "--redis-url", testkit.RedisURL(),
		"--stream", prefix+"-stream", "--group", prefix+"-group", "--every", "1s", "--audit-every", "1s")
	b := &devBundle{base: "http://" + addr}
	var last ostatus.Snapshot
	require.Eventually(t, func() bool {
		s, err := b.status()
		if err != nil || s.Reconciler == nil || s.Reconciler.LastReport == nil {
			return false
		}
		last = s
		return s.Reconciler.LastReport.StartedAt.After(started.Add(1500 * time.Millisecond))
	}, 30*time.Second, 20*time.Millisecond)
	require.Nil(t, last.Audit)
	require.NotContains(t, last.Unavailable, "audit")
	require.NotNil(t, last.ReadModel)
	require.False(t, last.ReadModel.Checkable)
	require.Contains(t, last.ReadModel.Unchecked, "not in this PostgreSQL database")
	names, _ := scrape(t, addr)
	require.True(t, names["outboxd_reconciler_sweeps_total"], "the reconciler's metrics are served")
	for name := range names {
		require.False(t, strings.HasPrefix(name, "outboxd_audit_"), "no audit: %s", name)
	}
	var tables int
	require.NoError(t, pg.Pool.QueryRow(ctx, `SELECT count(*) FROM pg_tables WHERE schemaname = 'public' AND tablename = 'audit_runs'`).Scan(&tables))
	require.Zero(t, tables, "no audit ran (it would have found no table to record in)")
}
