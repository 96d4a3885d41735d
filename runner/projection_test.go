package runner

import (
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgxpool"
	"github.com/redis/go-redis/v9"
	"github.com/stretchr/testify/require"

	"github.com/outboxd/outboxd/internal/operator"
	"github.com/outboxd/outboxd/internal/readmodel"
	"github.com/outboxd/outboxd/internal/testkit"
	"github.com/outboxd/outboxd/outbox"
	"github.com/outboxd/outboxd/projection"
	"github.com/outboxd/outboxd/worker"
)

// ordersProjection is a SQL projection into two tables of the test's own:
// one row per order, and per customer a counter and a sum grown only from
// the rows inserted.
const ordersProjection = `-- key: orders.event_id
-- types: order.placed
WITH ins AS (
	INSERT INTO orders (event_id, customer, amount, coupon)
	VALUES (:eventId, :payload.customer, :payload.amount, :payload.coupon)
	ON CONFLICT DO NOTHING
	RETURNING customer, amount
)
INSERT INTO customer_totals AS c (customer, orders, amount)
SELECT customer, count(*), sum(amount) FROM ins GROUP BY 1 ORDER BY 1
ON CONFLICT (customer) DO UPDATE SET orders = c.orders + EXCLUDED.orders, amount = c.amount + EXCLUDED.amount;
`

const ordersTables = `
CREATE TABLE orders (event_id text PRIMARY KEY, customer text NOT NULL, amount numeric NOT NULL, coupon text);
CREATE TABLE customer_totals (customer text PRIMARY KEY, orders bigint NOT NULL, amount numeric NOT NULL);`

func order(i int) string {
	return fmt.Sprintf(`{"sourceKey":"shop","deviceKey":"till-%d","type":"order.placed","occurredAt":"2026-11-03T%02d:%02d:00Z","payload":{"customer":"c%d","amount":%d}}`,
		i%5, i%24, i%60, i%7, i)
}

// checkOrders is the checker of the orders read model: one row per
// accepted order (none lost, none unexpected), and every customer's counter
// and sum equal to its orders (nothing counted twice).
func checkOrders(ctx context.Context, t *testing.T, pool interface {
	QueryRow(context.Context, string, ...any) pgx.Row
}, n int) {
	t.Helper()
	var rows, counted int64
	var amount, summed, wantAmount int64
	for i := range n {
		wantAmount += int64(i)
	}
	require.NoError(t, pool.QueryRow(ctx, `SELECT count(*), coalesce(sum(amount), 0)::bigint FROM orders`).Scan(&rows, &amount))
	require.NoError(t, pool.QueryRow(ctx, `SELECT coalesce(sum(orders), 0)::bigint, coalesce(sum(amount), 0)::bigint FROM customer_totals`).Scan(&counted, &summed))
	require.Equal(t, int64(n), rows, "one row per accepted order")
	require.Equal(t, wantAmount, amount, "the rows are the accepted orders")
	require.Equal(t, int64(n), counted, "every order counted once")
	require.Equal(t, wantAmount, summed, "every amount added once")
	var drift int64
	require.NoError(t, pool.QueryRow(ctx, `SELECT count(*) FROM customer_totals c
		FULL JOIN (SELECT customer, count(*) AS n, sum(amount) AS a FROM orders GROUP BY 1) o USING (customer)
		WHERE c.orders IS DISTINCT FROM o.n OR c.amount IS DISTINCT FROM o.a`).Scan(&drift))
	require.Zero(t, drift, "every customer's counter matches its rows")
}

// TestSQLProjectionSurvivesSIGKILL runs `outboxd dev --projection` on a
// file of the test's own, kills it with SIGKILL while its worker holds a
// batch it has not projected (the orders table is locked), deletes the
// stream entries it held (lost: the reconciler must re-publish their
// originals, and does), starts it again, and then replays the whole
// window: the rows are there exactly once and the counters exact, through
// redelivery, reconciliation and replay.
func TestSQLProjectionSurvivesSIGKILL(t *testing.T) {
	if testing.Short() {
		t.Skip("builds and runs the binary")
	}
	ctx, cancel := context.WithTimeout(context.Background(), 3*time.Minute)
	defer cancel()
	bin := buildOutboxd(t)
	pg := testkit.NewPostgres(t)
	_, err := pg.Pool.Exec(ctx, ordersTables)
	require.NoError(t, err)
	file := filepath.Join(t.TempDir(), "orders.sql")
	require.NoError(t, os.WriteFile(file, []byte(ordersProjection), 0o600))
	rdb, prefix := testkit.NewRedis(t)
	stream, group := prefix+"-stream", prefix+"-group"
	addr := freeAddr(t)
	base := "http://" + addr
	args := []string{"dev", "--store", "sqlite:" + filepath.Join(t.TempDir(), "outboxd.db"), "--projection", file,
		"--postgres-url", pg.URL, "--redis-url", testkit.RedisURL(), "--stream", stream, "--group", group,
		"--http-addr", addr, "--log-level", "warn",
		"--claim-idle", "2s", "--min-age", "5s", "--requeue-after", "5s", "--every", "2s"}
	proc := startProcess(t, bin, args, base)

	const n = 300
	post := func(i int) {
		t.Helper()
		for ctx.Err() == nil { // retry until accepted, as a client would
			req, _ := http.NewRequestWithContext(ctx, http.MethodPost, base+"/v1/events", strings.NewReader(order(i)))
			req.Header.Set("Content-Type", "application/json")
			req.Header.Set("Idempotency-Key", fmt.Sprintf("order-%d", i))
			resp, err := http.DefaultClient.Do(req)
			if err == nil {
				resp.Body.Close()
				if resp.StatusCode == http.StatusCreated || resp.StatusCode == http.StatusOK {
					return
				}
			}
			select {
			case <-ctx.Done():
			case <-time.After(50 * time.Millisecond):
			}
		}
	}
	for i := range n / 3 {
		post(i)
	}
	lock, err := pg.Pool.Begin(ctx)
	require.NoError(t, err)
	_, err = lock.Exec(ctx, "LOCK TABLE orders IN SHARE MODE")
	require.NoError(t, err)
	for i := n / 3; i < n/2; i++ {
		post(i)
	}
	require.Eventually(t, func() bool {
		p, err := rdb.XPending(ctx, stream, group).Result()
		return err == nil && p.Count > 0
	}, time.Minute, 10*time.Millisecond, "the worker never held entries")
	require.NoError(t, proc.cmd.Process.Signal(syscall.SIGKILL))
	<-proc.done
	require.NoError(t, lock.Rollback(ctx))
	// The entries the killed worker held are lost with it (as if Redis had
	// lost them): only the reconciler brings their originals back.
	held, err := rdb.XPendingExt(ctx, &redis.XPendingExtArgs{Stream: stream, Group: group, Start: "-", End: "+", Count: n}).Result()
	require.NoError(t, err)
	require.NotEmpty(t, held)
	for _, p := range held {
		require.NoError(t, rdb.XDel(ctx, stream, p.ID).Err())
	}
	proc = startProcess(t, bin, args, base)
	require.Eventually(t, func() bool { return reconcilerPublished(t, base) >= float64(len(held)) }, time.Minute, 100*time.Millisecond,
		"the reconciler did not re-publish the %d lost originals: %s", len(held), proc.stderr)
	for i := n / 2; i < n; i++ {
		post(i)
	}
	waitConverged := func() {
		t.Helper()
		require.Eventually(t, func() bool {
			resp, err := http.Get(base + "/v1/status")
			if err != nil {
				return false
			}
			defer resp.Body.Close()
			var s struct{ Events struct{ Total, Synced int64 } }
			return json.NewDecoder(resp.Body).Decode(&s) == nil && s.Events.Total == n && s.Events.Synced == n &&
				testkit.Drained(ctx, rdb, stream, group)
		}, 2*time.Minute, 100*time.Millisecond, "the pipeline did not converge: %s", proc.stderr)
	}
	waitConverged()
	checkOrders(ctx, t, pg.Pool, n)

	// A replay of every original: each goes through the projection again.
	var out, errOut bytes.Buffer
	replay := exec.CommandContext(ctx, bin, "replay", "--server", base, "--from", "2026-11-01T00:00:00Z", "--to", "2026-11-05T00:00:00Z")
	replay.Stdout, replay.Stderr = &out, &errOut
	require.NoError(t, replay.Run(), errOut.String())
	require.Contains(t, out.String(), fmt.Sprint(n))
	waitConverged()
	checkOrders(ctx, t, pg.Pool, n)

	require.NoError(t, proc.cmd.Process.Signal(syscall.SIGTERM))
	select {
	case err := <-proc.done:
		require.NoError(t, err, "exit after SIGTERM: %s", proc.stderr)
	case <-time.After(45 * time.Second):
		t.Fatal("outboxd dev did not stop within 45s of SIGTERM")
	}
}

// reconcilerPublished returns outboxd_reconciler_published_total of the
// process at base (0 when it cannot be read).
func reconcilerPublished(t *testing.T, base string) float64 {
	t.Helper()
	resp, err := http.Get(base + "/metrics")
	if err != nil {
		return 0
	}
	defer resp.Body.Close()
	var b bytes.Buffer
	if _, err := b.ReadFrom(resp.Body); err != nil {
		return 0
	}
	var total float64
	for line := range strings.Lines(b.String()) {
		if name, value, ok := strings.Cut(strings.TrimSpace(line), " "); ok && strings.HasPrefix(name, "outboxd_reconciler_published_total") {
			var v float64
			if _, err := fmt.Sscan(value, &v); err == nil {
				total += v
			}
		}
	}
	return total
}

// TestProjectionFlag: a statement PostgreSQL refuses stops the worker
// with exit code 2, naming the file and the line; a file that does not
// parse too.
func TestProjectionFlag(t *testing.T) {
	t.Parallel()
	pg := testkit.NewPostgres(t)
	_, prefix := testkit.NewRedis(t)
	dir := t.TempDir()
	common := []string{"work", "--store", "sqlite:" + filepath.Join(dir, "outboxd.db"), "--postgres-url", pg.URL,
		"--redis-url", testkit.RedisURL(), "--stream", prefix + "-stream", "--http-addr", ""}
	for name, tc := range map[string]struct{ src, want string }{
		"BadStatement": {"-- key: events.event_id\n\nINSERT INTO events (event_id)\n  VALUES (:eventId)\n  ON CONFLICT (nope) DO NOTHING;",
			":5: column \"nope\" does not exist"},
		"UnknownParameter": {"SELECT 1;\nSELECT :eventID", ":2: unknown parameter :eventID"},
	} {
		t.Run(name, func(t *testing.T) {
			file := filepath.Join(dir, name+".sql")
			require.NoError(t, os.WriteFile(file, []byte(tc.src), 0o600))
			migrate := run(context.Background(), []string{"migrate", "--store", "sqlite:" + filepath.Join(dir, "outboxd.db"), "--postgres-url", pg.URL}, &bytes.Buffer{}, &bytes.Buffer{})
			require.Equal(t, ExitOK, migrate)
			var stderr bytes.Buffer
			code := run(context.Background(), append(common, "--projection", file), &bytes.Buffer{}, &stderr)
			require.Equal(t, ExitUsage, code, stderr.String())
			require.Contains(t, stderr.String(), "--projection "+file+tc.want)
		})
	}
}

// TestReadModelOfProjector: the operator actions and the audit check the
// demo tables by default, a projection file through its key line, and say
// once why a read model cannot be checked (a file without a key, a Go
// projector that cannot tell).
func TestReadModelOfProjector(t *testing.T) {
	t.Parallel()
	pool, err := pgxpool.New(context.Background(), "postgres://nobody@127.0.0.1:1/none") // never connected
	require.NoError(t, err)
	t.Cleanup(pool.Close)
	keyed, err := projection.Parse("keyed.sql", "-- key: t.id\nINSERT INTO t VALUES (:eventId)")
	require.NoError(t, err)
	unkeyed, err := projection.Parse("unkeyed.sql", "INSERT INTO t VALUES (:eventId)")
	require.NoError(t, err)
	goProjector := worker.ProjectorFunc(func(context.Context, pgx.Tx, []*outbox.Event) error { return nil })

	a := &app{o: &options{}, pg: pool, set: &settings{}}
	rm, why := a.readModel()
	require.IsType(t, &readmodel.DB{}, rm)
	require.Empty(t, why)

	a.o.projectionFile = keyed
	rm, _ = a.readModel()
	require.IsType(t, &readmodel.Keyed{}, rm)

	a.o.projectionFile = unkeyed
	rm, why = a.readModel()
	require.Nil(t, rm)
	require.Equal(t, "the projection file unkeyed.sql has no `-- key: TABLE.COLUMN` line naming where it keeps the event id", why)

	a.set.projector = goProjector
	rm, why = a.readModel()
	require.Nil(t, rm)
	require.Contains(t, why, "its projector does not tell which originals it holds")
}

// TestWithProjectorFile: a projection file given as the program's
// projector (runner.WithProjector) is prepared at start in every role with
// PostgreSQL, a worker's or not (replay --rebuild and repair run its
// statements); a bad statement exits 2 naming the file and the line; and
// --projection beside it is a usage error.
func TestWithProjectorFile(t *testing.T) {
	t.Parallel()
	ctx, cancel := context.WithTimeout(t.Context(), 30*time.Second) // a role that starts runs until then
	defer cancel()
	pg := testkit.NewPostgres(t)
	_, err := pg.Pool.Exec(ctx, ordersTables)
	require.NoError(t, err)
	_, prefix := testkit.NewRedis(t)
	dir := t.TempDir()
	storeURI := "sqlite:" + filepath.Join(dir, "outboxd.db")
	code, out := runCLI(t, nil, "migrate", "--store", storeURI, "--store-only")
	require.Equal(t, ExitOK, code, out)
	work := []string{"work", "--store", storeURI, "--postgres-url", pg.URL, "--redis-url", testkit.RedisURL(),
		"--stream", prefix + "-stream", "--http-addr", ""}

	t.Run("BadStatement", func(t *testing.T) {
		bad, err := projection.Parse("bad.sql", "-- key: orders.event_id\n\nINSERT INTO orders (event_id)\n  VALUES (:eventId)\n  ON CONFLICT (nope) DO NOTHING;")
		require.NoError(t, err)
		var stderr bytes.Buffer
		code := Run(ctx, work, &bytes.Buffer{}, &stderr, WithProjector(bad))
		require.Equal(t, ExitUsage, code, stderr.String())
		require.Contains(t, stderr.String(), "runner.WithProjector: bad.sql:5: column \"nope\" does not exist")
	})
	t.Run("BesideTheFlag", func(t *testing.T) {
		file := filepath.Join(dir, "orders.sql")
		require.NoError(t, os.WriteFile(file, []byte(ordersProjection), 0o600))
		good, err := projection.Parse("orders.sql", ordersProjection)
		require.NoError(t, err)
		var stderr bytes.Buffer
		code := Run(ctx, append(work, "--projection", file), &bytes.Buffer{}, &stderr, WithProjector(good))
		require.Equal(t, ExitUsage, code, stderr.String())
		require.Contains(t, stderr.String(), "--projection cannot be given to a program that sets its projector (runner.WithProjector)")
	})
	t.Run("PreparedWithoutAWorker", func(t *testing.T) {
		file, err := projection.Parse("orders.sql", deviceRecompute)
		require.NoError(t, err)
		a := &app{o: &options{}, pg: pg.Pool, set: &settings{projector: file}}
		require.NoError(t, a.prepareProjection(ctx))
		tx, err := pg.Pool.Begin(ctx)
		require.NoError(t, err)
		defer func() { require.NoError(t, tx.Rollback(ctx)) }()
		_, err = file.Recompute(ctx, tx, []*outbox.Event{{ID: "e1", Type: "order.placed", Payload: json.RawMessage(`{"customer":"c1"}`)}})
		require.NoError(t, err, "verify --repair's recompute runs on a reconcile instance")
		_, err = file.Unproject(ctx, tx, []string{"e1"})
		require.NoError(t, err, "replay --rebuild runs on a reconcile instance")
	})
}

// deviceRecompute is ordersProjection with what repair and rebuild run.
const deviceRecompute = ordersProjection + `
-- recompute:
UPDATE customer_totals c SET orders = (SELECT count(*) FROM orders o WHERE o.customer = c.customer) WHERE c.customer = :payload.customer;
-- unproject:
DELETE FROM customer_totals WHERE customer IN (SELECT customer FROM orders WHERE event_id = ANY(:eventIds));
`

// TestAuditOfProjectionFile: `reconcile --every --projection FILE` beside
// workers that project with the same file audits that read model: a key
// row deleted by hand is reported missing within a few runs; an original
// of a type the file does not key is skipped, never drift.
func TestAuditOfProjectionFile(t *testing.T) {
	t.Parallel()
	ctx := t.Context()
	pg := testkit.NewPostgres(t)
	_, err := pg.Pool.Exec(ctx, ordersTables)
	require.NoError(t, err)
	file := filepath.Join(t.TempDir(), "orders.sql")
	require.NoError(t, os.WriteFile(file, []byte(ordersProjection), 0o600))
	_, prefix := testkit.NewRedis(t)
	common := []string{"--store", "sqlite:" + filepath.Join(t.TempDir(), "outboxd.db"), "--postgres-url", pg.URL, "--redis-url", testkit.RedisURL(),
		"--stream", prefix + "-stream", "--group", prefix + "-group", "--projection", file}
	devAddr, recAddr := freeAddr(t), freeAddr(t)
	startRole(t, devAddr, append([]string{"dev", "--audit-every", "0"}, common...)...)
	startRole(t, recAddr, append([]string{"reconcile", "--every", "1s", "--audit-every", "1s"}, common...)...)
	dev, rec := &devBundle{base: "http://" + devAddr}, &devBundle{base: "http://" + recAddr}

	const n = 6
	for i := range n {
		code, body := dev.post(t, "/v1/events", fmt.Sprintf("order-%d", i), order(i))
		require.Equal(t, http.StatusCreated, code, string(body))
	}
	code, body := dev.post(t, "/v1/events", "cancel", `{"sourceKey":"shop","deviceKey":"till-0","type":"order.cancelled","occurredAt":"2026-11-03T12:00:00Z","payload":{}}`)
	require.Equal(t, http.StatusCreated, code, string(body))
	audited := func(cond func(*operator.AuditReport) bool) *operator.AuditReport {
		t.Helper()
		var last *operator.AuditReport
		require.Eventually(t, func() bool {
			s, err := rec.status()
			if err != nil || s.Audit == nil {
				return false
			}
			last = s.Audit
			return cond(s.Audit)
		}, 60*time.Second, 50*time.Millisecond, "last audit: %+v", last)
		return last
	}
	audited(func(a *operator.AuditReport) bool { return a.Checked == n && a.Skipped == 1 && a.DriftTotal() == 0 })

	var id string
	require.NoError(t, pg.Pool.QueryRow(ctx, `DELETE FROM orders WHERE event_id = (SELECT min(event_id) FROM orders) RETURNING event_id`).Scan(&id))
	deleted := time.Now()
	rep := audited(func(a *operator.AuditReport) bool { return a.Drift[operator.AuditMissing] == 1 })
	require.Equal(t, id, rep.Findings[0].EventID)
	require.Equal(t, 1, rep.DriftTotal(), "the cancel event is not drift")
	require.Less(t, time.Since(deleted), 30*time.Second)
}

// TestAuditOffWithoutItsTable: `reconcile --every --projection FILE` on a
// database without outboxd's audit_runs table says once that the audit is
// off (it needs `outboxd migrate --read-model-only`): the status shows
// neither an audit nor an unavailable one, run after run, while verify
// can still check the read model.
func TestAuditOffWithoutItsTable(t *testing.T) {
	t.Parallel()
	ctx := t.Context()
	pg := testkit.NewPostgres(t)
	_, err := pg.Pool.Exec(ctx, `DROP TABLE events, device_daily_stats, audit_runs;`+ordersTables)
	require.NoError(t, err)
	file := filepath.Join(t.TempDir(), "orders.sql")
	require.NoError(t, os.WriteFile(file, []byte(ordersProjection), 0o600))
	storeURI := "sqlite:" + filepath.Join(t.TempDir(), "outboxd.db")
	code, out := runCLI(t, nil, "migrate", "--store", storeURI, "--store-only")
	require.Equal(t, ExitOK, code, out)
	_, prefix := testkit.NewRedis(t)
	addr := freeAddr(t)
	startRole(t, addr, "reconcile", "--store", storeURI, "--postgres-url", pg.URL, "--redis-url", testkit.RedisURL(),
		"--stream", prefix+"-stream", "--group", prefix+"-group", "--every", "1s", "--audit-every", "1s", "--projection", file)
	b := &devBundle{base: "http://" + addr}
	began := time.Now()
	var sweeps int
	require.Eventually(t, func() bool {
		s, err := b.status()
		if err != nil || s.Reconciler == nil || s.Reconciler.LastReport == nil {
			return false
		}
		require.NotContains(t, s.Unavailable, "audit")
		require.Nil(t, s.Audit)
		require.True(t, s.ReadModel == nil || s.ReadModel.Checkable, "the read model itself can be checked")
		sweeps++
		return time.Since(began) > 2500*time.Millisecond // past two audit ticks
	}, 30*time.Second, 100*time.Millisecond)
	require.Positive(t, sweeps)
	var tables int
	require.NoError(t, pg.Pool.QueryRow(ctx, `SELECT count(*) FROM pg_tables WHERE schemaname = 'public' AND tablename = 'audit_runs'`).Scan(&tables))
	require.Zero(t, tables)
}
