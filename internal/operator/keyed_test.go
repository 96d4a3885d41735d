package operator_test

import (
	"context"
	"encoding/json"
	"fmt"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/stretchr/testify/require"

	"github.com/outboxd/outboxd/internal/operator"
	"github.com/outboxd/outboxd/internal/readmodel"
	"github.com/outboxd/outboxd/internal/testkit"
	"github.com/outboxd/outboxd/outbox"
	"github.com/outboxd/outboxd/projection"
	"github.com/outboxd/outboxd/worker"
)

var (
	_ operator.ReadModel      = (*readmodel.Keyed)(nil)
	_ operator.AuditReadModel = (*readmodel.Keyed)(nil)
)

// deviceOrders is a SQL projection into tables of the test's own, with its
// key line: verify, the audit and repair check it.
const deviceOrders = `-- key: orders.event_id
WITH ins AS (
	INSERT INTO orders (event_id, device) VALUES (:eventId, :deviceKey)
	ON CONFLICT DO NOTHING RETURNING device
)
INSERT INTO device_orders AS d (device, n) SELECT device, count(*) FROM ins GROUP BY 1 ORDER BY 1
ON CONFLICT (device) DO UPDATE SET n = d.n + EXCLUDED.n`

// typedOrders is deviceOrders keyed for the default type only, with an
// UPDATE for events of type "note": their originals have no key row by
// design.
const typedOrders = "-- types: " + outbox.TypeDefault + "\n" + deviceOrders + `;
-- types: note
UPDATE device_orders SET n = n WHERE device = :deviceKey`

// TestVerifyAnyReadModel: verify finds a row deleted by hand from a
// SQL-projected table, and repair re-publishes its original, which a
// worker projects again; the audit finds the same drift within its run;
// an original of a type the file does not key, or routed to another
// stream, is neither drift nor re-published; a read model whose
// projector cannot tell is refused with one clear message, and --rebuild
// where the projector cannot remove rows.
func TestVerifyAnyReadModel(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	b := setup(t)
	_, err := b.pg.Pool.Exec(ctx, `CREATE TABLE orders (event_id text PRIMARY KEY, device text NOT NULL);
		CREATE TABLE device_orders (device text PRIMARY KEY, n bigint NOT NULL)`)
	require.NoError(t, err)
	file, err := projection.Parse("orders.sql", typedOrders)
	require.NoError(t, err)
	rm := readmodel.NewKeyed(b.pg.Pool, file)
	op, err := operator.New(&operator.Config{Store: b.st, Redis: b.rc, ReadModel: rm, Stream: b.keys.Name(), Group: b.keys.Group(),
		Role: "work"}, testkit.Logger(t))
	require.NoError(t, err)

	w, err := worker.New(b.st, b.rdb, b.pg.Pool, &worker.Config{Stream: b.keys.Name(), Group: b.keys.Group(), Consumer: "c",
		Block: 50 * time.Millisecond, Projector: file}, testkit.Logger(t))
	require.NoError(t, err)
	require.NoError(t, w.Start(ctx)) // prepares the file
	t.Cleanup(func() { require.NoError(t, w.Stop(context.Background())) })

	events := b.write(t, "a", "b", "c")
	res, err := b.w.Write(ctx, []outbox.Input{{SourceKey: "src", DeviceKey: "n", Type: "note", OccurredAt: "2026-11-01T10:00:00Z"}})
	require.NoError(t, err)
	note := testkit.Event(t, b.st, res[0].ID)
	require.NoError(t, b.rc.Publisher(b.keys, nil, nil).PublishEvents(ctx, append(events, note), outbox.OriginOutbox))
	synced := func(id string) bool { ev := testkit.Event(t, b.st, id); return ev.SyncedAt != nil }
	require.Eventually(t, func() bool {
		return synced(events[0].ID) && synced(events[1].ID) && synced(events[2].ID) && synced(note.ID)
	}, waitFor, 10*time.Millisecond)

	verifyWith := func(op *operator.Operator, repair bool) (drift []operator.Drift, republished, skipped int) {
		t.Helper()
		q := operator.VerifyQuery{Repair: repair}
		for {
			res, err := op.Verify(ctx, q)
			require.NoError(t, err)
			drift = append(drift, res.Drift...)
			republished += res.Republished
			skipped += res.Skipped
			if res.Done {
				return drift, republished, skipped
			}
			q.After = res.Next
		}
	}
	verify := func(repair bool) []operator.Drift {
		t.Helper()
		drift, _, _ := verifyWith(op, repair)
		return drift
	}
	require.Empty(t, verify(false), "an exact read model verifies clean")
	for range 2 { // the note event has no key row by design: nothing to repair, run after run
		drift, republished, skipped := verifyWith(op, true)
		require.Empty(t, drift)
		require.Zero(t, republished)
		require.Equal(t, 1, skipped, "the note event is not compared")
	}

	_, err = b.pg.Pool.Exec(ctx, `DELETE FROM orders WHERE event_id = $1`, events[1].ID)
	require.NoError(t, err)
	drift := verify(false)
	require.Len(t, drift, 1)
	require.Equal(t, operator.DriftMissingRow, drift[0].Kind)
	require.Equal(t, events[1].ID, drift[0].EventID)

	t.Run("Audit", func(t *testing.T) {
		audit, err := operator.NewAudit(&operator.AuditConfig{Store: b.st, ReadModel: rm, Stream: b.keys.Name(),
			Now: func() time.Time { return time.Now().Add(time.Hour) }}, testkit.Logger(t))
		require.NoError(t, err)
		rep, err := audit.Run(ctx)
		require.NoError(t, err)
		require.Equal(t, 3, rep.Checked)
		require.Equal(t, 1, rep.Skipped, "the note event")
		require.Equal(t, 1, rep.Drift[operator.AuditMissing])
		require.Equal(t, events[1].ID, rep.Findings[0].EventID)
	})

	t.Run("RoutedElsewhere", func(t *testing.T) {
		// The default type goes to another stream, whose workers feed
		// another read model: its originals are not this one's.
		routes := outbox.Routes{outbox.TypeDefault: "elsewhere"}
		routed, err := operator.New(&operator.Config{Store: b.st, ReadModel: rm, Stream: b.keys.Name(), Group: b.keys.Group(),
			Routes: routes}, testkit.Logger(t))
		require.NoError(t, err)
		drift, republished, skipped := verifyWith(routed, false)
		require.Empty(t, drift)
		require.Zero(t, republished)
		require.Equal(t, 4, skipped)
		audit, err := operator.NewAudit(&operator.AuditConfig{Store: b.st, ReadModel: rm, Stream: b.keys.Name(), Routes: routes,
			Now: func() time.Time { return time.Now().Add(time.Hour) }}, testkit.Logger(t))
		require.NoError(t, err)
		rep, err := audit.Run(ctx)
		require.NoError(t, err)
		require.Zero(t, rep.Checked)
		require.Zero(t, rep.DriftTotal())
	})

	drift = verify(true)
	require.Len(t, drift, 1)
	require.True(t, drift[0].Repaired)
	require.Eventually(t, func() bool {
		var n int
		return b.pg.Pool.QueryRow(ctx, `SELECT count(*) FROM orders WHERE event_id = $1`, events[1].ID).Scan(&n) == nil && n == 1
	}, waitFor, 10*time.Millisecond, "repair restored the row")
	require.Empty(t, verify(false))

	t.Run("RebuildNeedsUnproject", func(t *testing.T) {
		onlyChecks := readmodel.NewKeyed(b.pg.Pool, checkerOnly{file}) // a Go projector that can tell, not remove
		op, err := operator.New(&operator.Config{Store: b.st, Redis: b.rc, ReadModel: onlyChecks, Stream: b.keys.Name(), Group: b.keys.Group()},
			testkit.Logger(t))
		require.NoError(t, err)
		_, err = op.Replay(ctx, operator.ReplayQuery{EventsQuery: operator.EventsQuery{From: time.Date(2026, 11, 1, 0, 0, 0, 0, time.UTC),
			To: time.Date(2026, 11, 2, 0, 0, 0, 0, time.UTC)}, Rebuild: true})
		require.ErrorIs(t, err, operator.ErrNotAvailable)
		require.ErrorContains(t, err, "cannot remove rows")
	})

	t.Run("Unchecked", func(t *testing.T) {
		op, err := operator.New(&operator.Config{Store: b.st, Redis: b.rc, Stream: b.keys.Name(), Group: b.keys.Group(),
			Unchecked: "its projector does not tell which originals it holds"}, testkit.Logger(t))
		require.NoError(t, err)
		_, err = op.Verify(ctx, operator.VerifyQuery{})
		require.ErrorIs(t, err, operator.ErrNotAvailable)
		require.ErrorContains(t, err, "this read model cannot be checked: its projector does not tell")
		j, err := op.Journey(ctx, events[0].ID)
		require.NoError(t, err, "the journey leaves the read model out")
		require.Nil(t, j.ReadModel.Row)
	})
}

// checkerOnly is a projector that tells which originals its read model
// holds, and nothing more.
type checkerOnly struct{ c worker.Checker }

func (c checkerOnly) Projected(ctx context.Context, tx pgx.Tx, ids []string) (map[string]bool, error) {
	return c.c.Projected(ctx, tx, ids)
}

// deviceCounters is deviceOrders with what replay --rebuild and repair
// need to keep its counter per device exact: an -- unproject: statement
// that takes the removed rows' count out of it, and -- recompute:
// statements that lock a device's counter, then set it to its rows (the
// device read from the payload: repair binds the whole original).
const deviceCounters = deviceOrders + `;

-- unproject:
UPDATE device_orders d SET n = d.n - o.n
FROM (SELECT device, count(*) AS n FROM orders WHERE event_id = ANY(:eventIds) GROUP BY 1) o
WHERE d.device = o.device;

-- recompute:
SELECT FROM device_orders WHERE device = :payload.device FOR UPDATE;
-- recompute:
UPDATE device_orders d SET n = (SELECT count(*) FROM orders o WHERE o.device = d.device) WHERE d.device = :payload.device;
`

// TestRebuildAndRepairCounters: on a projection file with a counter per
// device, replay --rebuild of a window removes each original's row and
// its count (RemovedRows exact), and the worker projects each again
// exactly once; repair of a row deleted by hand recomputes its device's
// counter from the rows before re-publishing it, so it is counted once.
func TestRebuildAndRepairCounters(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	b := setup(t)
	_, err := b.pg.Pool.Exec(ctx, `CREATE TABLE orders (event_id text PRIMARY KEY, device text NOT NULL);
		CREATE TABLE device_orders (device text PRIMARY KEY, n bigint NOT NULL)`)
	require.NoError(t, err)
	file, err := projection.Parse("counters.sql", deviceCounters)
	require.NoError(t, err)
	op, err := operator.New(&operator.Config{Store: b.st, Redis: b.rc, ReadModel: readmodel.NewKeyed(b.pg.Pool, file),
		Stream: b.keys.Name(), Group: b.keys.Group(), Role: "work"}, testkit.Logger(t))
	require.NoError(t, err)
	w, err := worker.New(b.st, b.rdb, b.pg.Pool, &worker.Config{Stream: b.keys.Name(), Group: b.keys.Group(), Consumer: "c",
		Block: 50 * time.Millisecond, Projector: file}, testkit.Logger(t))
	require.NoError(t, err)
	require.NoError(t, w.Start(ctx))
	t.Cleanup(func() { require.NoError(t, w.Stop(context.Background())) })

	var inputs []outbox.Input
	for i, d := range []string{"a", "b", "c", "a", "b", "b", "d"} { // on 2026-11-01
		inputs = append(inputs, outbox.Input{SourceKey: "src", DeviceKey: d, OccurredAt: fmt.Sprintf("2026-11-01T10:%02d:00Z", i),
			Payload: json.RawMessage(fmt.Sprintf(`{"device":%q}`, d))})
	}
	inputs = append(inputs, outbox.Input{SourceKey: "src", DeviceKey: "a", OccurredAt: "2026-11-05T10:00:00Z"}) // outside the window
	res, err := b.w.Write(ctx, inputs)
	require.NoError(t, err)
	var all []*outbox.Event
	for _, r := range res {
		all = append(all, testkit.Event(t, b.st, r.ID))
	}
	events := all[:7]
	require.NoError(t, b.rc.Publisher(b.keys, nil, nil).PublishEvents(ctx, all, outbox.OriginOutbox))
	want := map[string]int64{"a": 3, "b": 3, "c": 1, "d": 1}
	rows := func() int {
		var n int
		require.NoError(t, b.pg.Pool.QueryRow(ctx, `SELECT count(*) FROM orders`).Scan(&n))
		return n
	}
	counters := func() map[string]int64 {
		r, err := b.pg.Pool.Query(ctx, `SELECT device, n FROM device_orders`)
		require.NoError(t, err)
		out, err := pgx.CollectRows(r, func(r pgx.CollectableRow) (kv struct {
			d string
			n int64
		}, err error) {
			return kv, r.Scan(&kv.d, &kv.n)
		})
		require.NoError(t, err)
		m := map[string]int64{}
		for _, kv := range out {
			m[kv.d] = kv.n
		}
		return m
	}
	// A row is inserted with its count in one transaction: once every row
	// is there, every count is in.
	require.Eventually(t, func() bool { return rows() == len(all) }, waitFor, 10*time.Millisecond)
	require.Equal(t, want, counters())

	// Rebuild the window of 2026-11-01 in chunks of 3.
	q := operator.ReplayQuery{EventsQuery: operator.EventsQuery{From: time.Date(2026, 11, 1, 0, 0, 0, 0, time.UTC),
		To: time.Date(2026, 11, 2, 0, 0, 0, 0, time.UTC), Limit: 3}, Rebuild: true}
	var removed int64
	var published int
	for {
		res, err := op.Replay(ctx, q)
		require.NoError(t, err)
		removed += res.RemovedRows
		published += res.Published
		if res.Done {
			break
		}
		q.After, q.Started = res.Next, *res.Started
	}
	require.Equal(t, int64(len(events)), removed, "every original of the window had its row")
	require.Equal(t, len(events), published)
	require.Eventually(t, func() bool { return rows() == len(all) }, waitFor, 10*time.Millisecond, "the worker projects the window again")
	require.Equal(t, want, counters(), "each original of the window counted once again")

	t.Run("RepairRecomputes", func(t *testing.T) {
		_, err := b.pg.Pool.Exec(ctx, `DELETE FROM orders WHERE event_id = $1`, events[1].ID) // a row of b, by hand
		require.NoError(t, err)
		res, err := op.Verify(ctx, operator.VerifyQuery{Repair: true})
		require.NoError(t, err)
		require.Len(t, res.Drift, 1)
		require.True(t, res.Drift[0].Repaired)
		require.Equal(t, 1, res.Republished)
		require.Equal(t, 1, res.StatsRecomputed, "the counter of b recomputed for the one original re-published")
		require.Eventually(t, func() bool { return rows() == len(all) }, waitFor, 10*time.Millisecond, "repair restored the row")
		require.Equal(t, want, counters(), "the restored row counted once")
	})
}

// TestProjectionFileDeadLetters: a projection file binding a payload
// field into an int column: an original whose field is not a number
// ("qty":"x", SQLSTATE 22P02 in PostgreSQL) is dead-lettered after its
// deliveries, and the others of its batches are projected.
func TestProjectionFileDeadLetters(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	b := setup(t)
	_, err := b.pg.Pool.Exec(ctx, `CREATE TABLE lines (event_id text PRIMARY KEY, qty int NOT NULL)`)
	require.NoError(t, err)
	file, err := projection.Parse("lines.sql", "-- key: lines.event_id\nINSERT INTO lines (event_id, qty) VALUES (:eventId, :payload.qty) ON CONFLICT DO NOTHING")
	require.NoError(t, err)
	var inputs []outbox.Input
	for i, qty := range []string{"1", `"x"`, "3", "4"} {
		inputs = append(inputs, outbox.Input{SourceKey: "src", DeviceKey: fmt.Sprintf("d%d", i), OccurredAt: "2026-11-01T10:00:00Z",
			Payload: json.RawMessage(`{"qty":` + qty + `}`)})
	}
	res, err := b.w.Write(ctx, inputs)
	require.NoError(t, err)
	var events []*outbox.Event
	for _, r := range res {
		events = append(events, testkit.Event(t, b.st, r.ID))
	}
	bad := events[1]
	require.NoError(t, b.rc.Publisher(b.keys, nil, nil).PublishEvents(ctx, events, outbox.OriginOutbox))
	w, err := worker.New(b.st, b.rdb, b.pg.Pool, &worker.Config{Stream: b.keys.Name(), Group: b.keys.Group(), Consumer: "c",
		Block: 50 * time.Millisecond, MaxDeliveries: 2, RecordBackoff: 10 * time.Millisecond, Projector: file}, testkit.Logger(t))
	require.NoError(t, err)
	require.NoError(t, w.Start(ctx))
	t.Cleanup(func() { require.NoError(t, w.Stop(context.Background())) })
	require.Eventually(t, func() bool {
		n, err := b.rc.Len(ctx, b.keys.DLQ())
		return err == nil && n == 1 && testkit.Event(t, b.st, bad.ID).State() == outbox.StateFailed
	}, waitFor, 10*time.Millisecond)

	page, err := b.op.ListDLQ(ctx, operator.DLQQuery{})
	require.NoError(t, err)
	require.Len(t, page.Entries, 1)
	require.Equal(t, bad.ID, page.Entries[0].EventID)
	require.Equal(t, outbox.CategoryPoison, page.Entries[0].Category)
	require.Contains(t, page.Entries[0].Error, "22P02")
	rows, err := b.pg.Pool.Query(ctx, `SELECT event_id, qty FROM lines ORDER BY qty`)
	require.NoError(t, err)
	got, err := pgx.CollectRows(rows, pgx.RowToMap)
	require.NoError(t, err)
	require.Equal(t, []map[string]any{{"event_id": events[0].ID, "qty": int32(1)}, {"event_id": events[2].ID, "qty": int32(3)},
		{"event_id": events[3].ID, "qty": int32(4)}}, got, "the others projected, once")
	for _, ev := range []*outbox.Event{events[0], events[2], events[3]} {
		require.Equal(t, outbox.StateSynced, testkit.Event(t, b.st, ev.ID).State())
	}
}
