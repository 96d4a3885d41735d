package projection_test

import (
	"context"
	"encoding/json"
	"fmt"
	"os"
	"path/filepath"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgconn"
	"github.com/stretchr/testify/require"

	"github.com/outboxd/outboxd/internal/readmodel"
	"github.com/outboxd/outboxd/internal/testkit"
	"github.com/outboxd/outboxd/outbox"
	"github.com/outboxd/outboxd/projection"
	"github.com/outboxd/outboxd/worker"
)

var (
	_ worker.PipelinedProjector = (*projection.File)(nil)
	_ worker.Preparer           = (*projection.File)(nil)
	_ worker.Checker            = (*projection.File)(nil)
	_ worker.Unprojector        = (*projection.File)(nil)
	_ worker.Recomputer         = (*projection.File)(nil)
)

func TestMain(m *testing.M) { testkit.Main(m) }

// ordersSQL projects order events into a test's own two tables: one row
// per order, and per customer a counter grown only from the rows inserted.
const ordersSQL = `-- Orders and the customers' counters.
-- key: orders.event_id

-- types: order.created, order.paid
WITH ins AS (
	INSERT INTO orders (event_id, customer, total, express, note, placed_at)
	VALUES (:eventId, :payload.customer, :payload.order.total, :payload.order.express, :payload.note, :occurredAt)
	ON CONFLICT DO NOTHING
	RETURNING customer, total
)
INSERT INTO customer_totals AS c (customer, orders, spent)
SELECT customer, count(*), coalesce(sum(total), 0) FROM ins GROUP BY 1 ORDER BY 1
ON CONFLICT (customer) DO UPDATE SET orders = c.orders + EXCLUDED.orders, spent = c.spent + EXCLUDED.spent;

-- types: order.cancelled
UPDATE orders SET cancelled = true WHERE event_id = :payload.orderEventId;
`

const ordersSchema = `
CREATE TABLE orders (event_id text PRIMARY KEY, customer text NOT NULL, total numeric, express boolean,
	note text, placed_at timestamptz NOT NULL, cancelled boolean NOT NULL DEFAULT false);
CREATE TABLE customer_totals (customer text PRIMARY KEY, orders bigint NOT NULL, spent numeric NOT NULL);`

type bundle struct {
	ctx  context.Context
	pg   *testkit.Postgres
	file *projection.File
}

func setup(t *testing.T, schema, src string) *bundle {
	t.Helper()
	ctx := context.Background()
	pg := testkit.NewPostgres(t)
	if schema != "" {
		_, err := pg.Pool.Exec(ctx, schema)
		require.NoError(t, err)
	}
	f, err := projection.Parse("orders.sql", src)
	require.NoError(t, err)
	require.NoError(t, f.Prepare(ctx, pg.Pool))
	return &bundle{ctx: ctx, pg: pg, file: f}
}

// project runs p for events in one transaction, as the worker does:
// pipelined, or through a pgx.Tx.
func project(t *testing.T, b *bundle, p worker.Projector, pipelined bool, events []*outbox.Event) {
	t.Helper()
	err := pgx.BeginFunc(b.ctx, b.pg.Pool, func(tx pgx.Tx) error {
		if pp, ok := p.(worker.PipelinedProjector); ok && pipelined {
			batch := &pgx.Batch{}
			if err := pp.QueueProject(batch, events); err != nil {
				return err
			}
			return tx.SendBatch(b.ctx, batch).Close()
		}
		return p.Project(b.ctx, tx, events)
	})
	require.NoError(t, err)
}

func event(typ string, payload string) *outbox.Event {
	at := time.Date(2026, 11, 2, 10, 0, 0, 0, time.UTC)
	return &outbox.Event{ID: outbox.NewEventID(), IdempotencyKey: outbox.NewEventID(), SourceKey: "s", DeviceKey: "d",
		Type: typ, OccurredAt: at, CreatedAt: at, Payload: json.RawMessage(payload)}
}

func TestOwnReadModel(t *testing.T) {
	t.Parallel()
	b := setup(t, ordersSchema, ordersSQL)
	a := event("order.created", `{"customer":"ann","order":{"total":12.5,"express":true},"note":"gift"}`)
	c := event("order.paid", `{"customer":"ann","order":{"total":7}}`) // no express, no note: NULL
	d := event("order.created", `{"customer":"bob","order":{"total":"3.25"}}`)
	other := event("device.reading", `{"customer":"eve"}`)
	cancel := event("order.cancelled", fmt.Sprintf(`{"orderEventId":%q}`, d.ID))
	all := []*outbox.Event{a, c, d, other, cancel}

	for round, pipelined := range []bool{true, false, true} { // the first batch, then redeliveries
		project(t, b, b.file, pipelined, all)
		project(t, b, b.file, pipelined, all[round:round+2]) // a part of the batch again
	}

	type order struct {
		Customer  string
		Total     *string
		Express   *bool
		Note      *string
		Cancelled bool
	}
	rows, err := b.pg.Pool.Query(b.ctx, `SELECT event_id, customer, total::text, express, note, cancelled FROM orders`)
	require.NoError(t, err)
	got := map[string]order{}
	for rows.Next() {
		var id string
		var o order
		require.NoError(t, rows.Scan(&id, &o.Customer, &o.Total, &o.Express, &o.Note, &o.Cancelled))
		got[id] = o
	}
	require.NoError(t, rows.Err())
	ptr := func(s string) *string { return &s }
	yes := true
	require.Equal(t, map[string]order{
		a.ID: {Customer: "ann", Total: ptr("12.5"), Express: &yes, Note: ptr("gift")},
		c.ID: {Customer: "ann", Total: ptr("7")},
		d.ID: {Customer: "bob", Total: ptr("3.25"), Cancelled: true},
	}, got, "one row per order event, a missing payload field NULL, other types skipped")

	totals := map[string]string{}
	rows, err = b.pg.Pool.Query(b.ctx, `SELECT customer, orders || '/' || spent FROM customer_totals`)
	require.NoError(t, err)
	for rows.Next() {
		var k, v string
		require.NoError(t, rows.Scan(&k, &v))
		totals[k] = v
	}
	require.Equal(t, map[string]string{"ann": "2/19.5", "bob": "1/3.25"}, totals, "counters grew once per order")

	t.Run("Projected", func(t *testing.T) {
		err := pgx.BeginTxFunc(b.ctx, b.pg.Pool, pgx.TxOptions{AccessMode: pgx.ReadOnly}, func(tx pgx.Tx) error {
			found, err := b.file.Projected(b.ctx, tx, []string{a.ID, other.ID, cancel.ID})
			require.Equal(t, map[string]bool{a.ID: true}, found)
			return err
		})
		require.NoError(t, err)
	})
}

// ordersRebuildSQL is ordersSQL with what replay --rebuild and repair
// need to keep the customers' counters exact.
const ordersRebuildSQL = ordersSQL + `
-- unproject:
UPDATE customer_totals c SET orders = c.orders - o.n, spent = c.spent - o.s
FROM (SELECT customer, count(*) AS n, coalesce(sum(total), 0) AS s FROM orders WHERE event_id = ANY(:eventIds) GROUP BY 1) o
WHERE c.customer = o.customer;

-- types: order.created, order.paid
-- recompute:
SELECT FROM customer_totals WHERE customer = :payload.customer FOR UPDATE;
-- types: order.created, order.paid
-- recompute:
UPDATE customer_totals c SET orders = o.n, spent = o.s
FROM (SELECT count(*) AS n, coalesce(sum(total), 0) AS s FROM orders WHERE customer = :payload.customer) o
WHERE c.customer = :payload.customer;
`

// TestUnprojectAndRecompute: Unproject removes the key rows of the ids
// that have one (and counts those only) after its -- unproject: statement
// took their share out of the counters; Recompute sets the counters of
// the originals of its types to their rows; projecting again after either
// leaves every counter exact.
func TestUnprojectAndRecompute(t *testing.T) {
	t.Parallel()
	b := setup(t, ordersSchema, ordersRebuildSQL)
	a := event("order.created", `{"customer":"ann","order":{"total":12.5}}`)
	c := event("order.paid", `{"customer":"ann","order":{"total":7}}`)
	d := event("order.created", `{"customer":"bob","order":{"total":3}}`)
	other := event("device.reading", `{"customer":"ann"}`)
	all := []*outbox.Event{a, c, d, other}
	totals := func() map[string]string {
		rows, err := b.pg.Pool.Query(b.ctx, `SELECT customer, orders || '/' || spent::float8 FROM customer_totals`)
		require.NoError(t, err)
		out := map[string]string{}
		for rows.Next() {
			var k, v string
			require.NoError(t, rows.Scan(&k, &v))
			out[k] = v
		}
		require.NoError(t, rows.Err())
		return out
	}
	inTx := func(fn func(tx pgx.Tx) error) { require.NoError(t, pgx.BeginFunc(b.ctx, b.pg.Pool, fn)) }
	exact := map[string]string{"ann": "2/19.5", "bob": "1/3"}
	project(t, b, b.file, true, all)
	require.Equal(t, exact, totals())

	inTx(func(tx pgx.Tx) error {
		n, err := b.file.Unproject(b.ctx, tx, []string{a.ID, d.ID, other.ID, "unknown"})
		require.Equal(t, int64(2), n, "the originals with a key row")
		return err
	})
	require.Equal(t, map[string]string{"ann": "1/7", "bob": "0/0"}, totals(), "their share taken out")
	project(t, b, b.file, false, all)
	require.Equal(t, exact, totals(), "projected again, counted once")

	_, err := b.pg.Pool.Exec(b.ctx, `DELETE FROM orders WHERE event_id = $1`, c.ID) // by hand: its count stays
	require.NoError(t, err)
	inTx(func(tx pgx.Tx) error {
		n, err := b.file.Recompute(b.ctx, tx, []*outbox.Event{c, other})
		require.Equal(t, 1, n, "the statements' types only")
		return err
	})
	require.Equal(t, map[string]string{"ann": "1/12.5", "bob": "1/3"}, totals(), "ann's counter is its rows")
	project(t, b, b.file, true, all)
	require.Equal(t, exact, totals())

	t.Run("NothingToRecompute", func(t *testing.T) {
		plain := setup(t, ordersSchema, ordersSQL)
		inTx(func(tx pgx.Tx) error {
			n, err := plain.file.Recompute(b.ctx, tx, all)
			require.Zero(t, n)
			return err
		})
	})
}

// TestDemoMatchesTheGoProjector projects the same batches, redeliveries
// included, with the demo file and with readmodel's Projector into two
// databases, and compares their tables.
func TestDemoMatchesTheGoProjector(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	day := time.Date(2026, 10, 1, 0, 0, 0, 0, time.UTC)
	var events []*outbox.Event
	for i := range 40 {
		events = append(events, &outbox.Event{
			ID: outbox.NewEventID(), IdempotencyKey: fmt.Sprintf("k%d", i), SourceKey: fmt.Sprintf("s%d", i%3),
			DeviceKey: fmt.Sprintf("d%d", i%4), Type: "event", OccurredAt: day.Add(time.Duration(i) * 97 * time.Minute),
			Payload: json.RawMessage(fmt.Sprintf(`{"n":%d,"s":"x\u00e9"}`, i)), CreatedAt: day.Add(time.Duration(i) * time.Second),
		})
	}
	demo := projection.Demo()
	dump := func(p worker.Projector, prepare bool) []string {
		b := &bundle{ctx: ctx, pg: testkit.NewPostgres(t)}
		if prepare {
			require.NoError(t, demo.Prepare(ctx, b.pg.Pool))
		}
		project(t, b, p, true, events[:25])
		project(t, b, p, false, events[10:])
		project(t, b, p, true, events[5:15])
		var out []string
		for _, q := range []string{
			`SELECT event_id || idempotency_key || source_key || device_key || type || occurred_at || payload::text || created_at FROM events ORDER BY 1`,
			`SELECT source_key || device_key || day || event_count || first_occurred_at || last_occurred_at FROM device_daily_stats ORDER BY 1`,
		} {
			rows, err := b.pg.Pool.Query(ctx, q)
			require.NoError(t, err)
			s, err := pgx.CollectRows(rows, pgx.RowTo[string])
			require.NoError(t, err)
			out = append(out, s...)
		}
		return out
	}
	want := dump(readmodel.NewProjector(), false)
	require.Greater(t, len(want), 40, "the rows and their statistics")
	require.Equal(t, want, dump(demo, true))
}

func TestBadStatement(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	pg := testkit.NewPostgres(t)
	_, err := pg.Pool.Exec(ctx, ordersSchema)
	require.NoError(t, err)
	path := filepath.Join(t.TempDir(), "bad.sql")
	src := "-- key: orders.event_id\nINSERT INTO orders (event_id, customer, placed_at)\nVALUES (:eventId, :sourceKey, :occurredAt);\n\n" +
		"UPDATE orders\n   SET totl = 1\n WHERE event_id = :eventId;\n"
	require.NoError(t, os.WriteFile(path, []byte(src), 0o600))
	f, err := projection.Load(path)
	require.NoError(t, err)
	err = f.Prepare(ctx, pg.Pool)
	var se *projection.StatementError
	require.ErrorAs(t, err, &se)
	require.Equal(t, path, se.File)
	require.Equal(t, 6, se.Line, "the line of the unknown column")
	require.Contains(t, err.Error(), path+":6: column \"totl\" of relation \"orders\" does not exist")

	b := &pgx.Batch{}
	require.ErrorIs(t, f.QueueProject(b, nil), projection.ErrNotPrepared)

	t.Run("BadUnproject", func(t *testing.T) {
		f, err := projection.Parse("u.sql", "-- key: orders.event_id\nSELECT :eventId::text;\n\n-- unproject:\nDELETE FROM orders\n WHERE nope = ANY(:eventIds)")
		require.NoError(t, err)
		require.ErrorContains(t, f.Prepare(ctx, pg.Pool), `u.sql:6: column "nope" does not exist`)
		_, err = f.Unproject(ctx, nil, nil)
		require.ErrorIs(t, err, projection.ErrNotPrepared)
	})
	t.Run("BadKey", func(t *testing.T) {
		f, err := projection.Parse("k.sql", "-- key: orders.nope\nSELECT :eventId::text")
		require.NoError(t, err)
		require.ErrorContains(t, f.Prepare(ctx, pg.Pool), `column "nope" does not exist`)
	})
}

// BenchmarkProject projects batches of the worker's default size with the
// demo file and with readmodel's Projector, each batch new events in its
// own transaction, pipelined as the worker sends them.
func BenchmarkProject(b *testing.B) {
	ctx := context.Background()
	for _, name := range []string{"GoProjector", "DemoFile"} {
		b.Run(name, func(b *testing.B) {
			pg := testkit.NewPostgres(b)
			var p worker.PipelinedProjector = readmodel.NewProjector()
			if name == "DemoFile" {
				demo := projection.Demo()
				require.NoError(b, demo.Prepare(ctx, pg.Pool))
				p = demo
			}
			day := time.Date(2026, 10, 1, 0, 0, 0, 0, time.UTC)
			batch := make([]*outbox.Event, worker.BatchSizeDefault)
			b.ResetTimer()
			for i := range b.N {
				b.StopTimer()
				for j := range batch {
					batch[j] = &outbox.Event{ID: outbox.NewEventID(), IdempotencyKey: outbox.NewEventID(), SourceKey: "s",
						DeviceKey: fmt.Sprintf("d%d", j%50), Type: "event", OccurredAt: day.Add(time.Duration(i*len(batch)+j) * time.Second),
						Payload: json.RawMessage(`{"temperature":21.5,"unit":"C"}`), CreatedAt: day}
				}
				b.StartTimer()
				err := pgx.BeginFunc(ctx, pg.Pool, func(tx pgx.Tx) error {
					q := &pgx.Batch{}
					if err := p.QueueProject(q, batch); err != nil {
						return err
					}
					return tx.SendBatch(ctx, q).Close()
				})
				require.NoError(b, err)
			}
			b.ReportMetric(float64(b.N*len(batch))/b.Elapsed().Seconds(), "events/s")
		})
	}
}

// TestUpsertSameKeyInBatch: a plain single-row upsert runs once per batch
// in its batch form, which PostgreSQL refuses when the batch holds its
// conflict key twice (21000: ON CONFLICT DO UPDATE cannot affect a row a
// second time); `-- per-event:` runs it once per event, in event id order,
// so the batch goes through and the last event's value wins.
func TestUpsertSameKeyInBatch(t *testing.T) {
	t.Parallel()
	const schema = `CREATE TABLE latest (device text PRIMARY KEY, v int NOT NULL)`
	const upsert = "INSERT INTO latest (device, v) VALUES (:deviceKey, :payload.v) ON CONFLICT (device) DO UPDATE SET v = EXCLUDED.v"
	first, second := event("reading", `{"v":1}`), event("reading", `{"v":2}`) // one device
	first.ID, second.ID = "6b0000000000000000000001", "6b0000000000000000000002"
	batch := []*outbox.Event{second, first}

	t.Run("BatchForm", func(t *testing.T) {
		b := setup(t, schema, upsert)
		err := pgx.BeginFunc(b.ctx, b.pg.Pool, func(tx pgx.Tx) error { return b.file.Project(b.ctx, tx, batch) })
		var pgErr *pgconn.PgError
		require.ErrorAs(t, err, &pgErr)
		require.Equal(t, "21000", pgErr.Code)
	})
	t.Run("PerEvent", func(t *testing.T) {
		b := setup(t, schema, "-- per-event:\n"+upsert)
		for _, pipelined := range []bool{true, false} {
			project(t, b, b.file, pipelined, batch)
			var v int
			require.NoError(t, b.pg.Pool.QueryRow(b.ctx, `SELECT v FROM latest WHERE device = 'd'`).Scan(&v))
			require.Equal(t, 2, v, "the later event's value")
		}
	})
}
