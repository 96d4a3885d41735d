package httpapi_test

import (
	"context"
	"encoding/json"
	"fmt"
	"net/http"
	"net/http/httptest"
	"reflect"
	"slices"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/prometheus/client_golang/prometheus"
	"github.com/redis/go-redis/v9"
	"github.com/stretchr/testify/require"

	"github.com/outboxd/outboxd/dispatcher"
	"github.com/outboxd/outboxd/internal/failpolicy"
	"github.com/outboxd/outboxd/internal/httpapi"
	"github.com/outboxd/outboxd/internal/operator"
	"github.com/outboxd/outboxd/internal/readmodel"
	ostatus "github.com/outboxd/outboxd/internal/status"
	"github.com/outboxd/outboxd/internal/stream"
	"github.com/outboxd/outboxd/internal/testkit"
	"github.com/outboxd/outboxd/outbox"
	"github.com/outboxd/outboxd/store"
	"github.com/outboxd/outboxd/worker"
)

// waitFor bounds every wait of the admin tests.
const waitFor = 30 * time.Second

// adminBundle is a pipeline (dispatcher and worker) on real stores with
// the admin API in front of it.
type adminBundle struct {
	st      store.Store
	rdb     *redis.Client
	rc      *stream.Client
	pg      *testkit.Postgres
	stream  string
	group   string
	writer  *outbox.Writer
	server  *httptest.Server
	breaker atomic.Pointer[func(ev *outbox.Event) error] // the worker's projection fails while it returns an error
}

// setupAdmin serves the admin API over st; mods change the HTTP config.
func setupAdmin(t *testing.T, st store.Store, mods ...func(*httpapi.Config)) *adminBundle {
	t.Helper()
	rdb, prefix := testkit.NewRedis(t)
	rc, err := stream.NewClient(rdb, nil)
	require.NoError(t, err)
	b := &adminBundle{st: st, rdb: rdb, rc: rc, pg: testkit.NewPostgres(t), stream: prefix + ":stream", group: "read-model"}
	b.writer = outbox.NewWriter(st, &outbox.WriterConfig{Stream: b.stream})
	admin, err := operator.New(&operator.Config{Store: st, Redis: rc, ReadModel: readmodel.New(b.pg.Pool), Stream: b.stream,
		Group: b.group, Registerer: prometheus.NewRegistry()}, testkit.Logger(t))
	require.NoError(t, err)
	cfg := &httpapi.Config{AuthToken: testToken, Store: st, Admin: admin,
		Status: &ostatus.Status{Store: st, Redis: rc, Stream: b.stream, Group: b.group}}
	for _, m := range mods {
		m(cfg)
	}
	h, err := httpapi.New(cfg, testkit.Logger(t))
	require.NoError(t, err)
	b.server = httptest.NewServer(h)
	t.Cleanup(b.server.Close)
	return b
}

// start runs a dispatcher and a worker until the test ends. The worker's
// projection goes through b.breaker, so a test can break a record's
// projection and fix it again.
func (b *adminBundle) start(t *testing.T, project worker.Projector) {
	t.Helper()
	ctx := context.Background()
	d, err := dispatcher.New(b.st, b.rdb, &dispatcher.Config{Stream: b.stream, LeaseTTL: time.Second}, testkit.Logger(t))
	require.NoError(t, err)
	require.NoError(t, d.Start(ctx))
	t.Cleanup(func() { require.NoError(t, d.Stop(context.Background())) })
	if project == nil {
		project = readmodel.NewProjector()
	}
	w, err := worker.New(b.st, b.rdb, b.pg.Pool, &worker.Config{Stream: b.stream, Group: b.group, Consumer: "c",
		Block: 50 * time.Millisecond, BackoffMax: 200 * time.Millisecond, ClaimIdle: 50 * time.Millisecond,
		ClaimInterval: 20 * time.Millisecond, MaxDeliveries: 2,
		Projector: worker.ProjectorFunc(func(ctx context.Context, tx pgx.Tx, events []*outbox.Event) error {
			if f := b.breaker.Load(); f != nil {
				for _, ev := range events {
					if err := (*f)(ev); err != nil {
						return err
					}
				}
			}
			return project.Project(ctx, tx, events)
		})}, testkit.Logger(t))
	require.NoError(t, err)
	require.NoError(t, w.Start(ctx))
	t.Cleanup(func() { require.NoError(t, w.Stop(context.Background())) })
}

// startPoisoning starts the pipeline with a projection that fails for bad
// (a bug), and waits until bad is parked and dead-lettered and everything
// else is drained; b.breaker.Store(nil) fixes the bug.
func (b *adminBundle) startPoisoning(t *testing.T, bad *outbox.Event) {
	t.Helper()
	fail := func(ev *outbox.Event) error {
		if ev.ID == bad.ID {
			return fmt.Errorf("%w: a projection bug", worker.ErrRecord)
		}
		return nil
	}
	b.breaker.Store(&fail)
	b.start(t, nil)
	require.Eventually(t, func() bool {
		return b.drained(t) && testkit.Event(t, b.st, bad.ID).State() == outbox.StateFailed &&
			b.rdb.XLen(context.Background(), b.keys().DLQ()).Val() == 1
	}, waitFor, 10*time.Millisecond)
}

// write stores one original per occurrence time and returns them.
func (b *adminBundle) write(t *testing.T, device string, occurred ...time.Time) []*outbox.Event {
	t.Helper()
	inputs := make([]outbox.Input, len(occurred))
	for i, at := range occurred {
		inputs[i] = outbox.Input{SourceKey: "src", DeviceKey: device, OccurredAt: at.Format(time.RFC3339Nano)}
	}
	res, err := b.writer.Write(context.Background(), inputs)
	require.NoError(t, err)
	out := make([]*outbox.Event, len(res))
	for i, r := range res {
		out[i] = testkit.Event(t, b.st, r.ID)
	}
	return out
}

// keys names the bundle's stream, dead-letter stream and budgets.
func (b *adminBundle) keys() stream.Keys { return stream.NewKeys(b.stream, b.group) }

// drained reports that the group read the whole stream and acknowledged
// everything, and the outbox is relayed.
func (b *adminBundle) drained(t *testing.T) bool {
	t.Helper()
	ctx := context.Background()
	c, err := b.st.Counts(ctx)
	if err != nil || c.Undispatched > 0 {
		return false
	}
	return testkit.Drained(ctx, b.rdb, b.stream, b.group)
}

func (b *adminBundle) waitDrained(t *testing.T, events ...*outbox.Event) {
	t.Helper()
	require.Eventually(t, func() bool {
		if !b.drained(t) {
			return false
		}
		for _, ev := range events {
			if got := testkit.Event(t, b.st, ev.ID); got.State() != outbox.StateSynced {
				return false
			}
		}
		return true
	}, waitFor, 10*time.Millisecond)
}

// check runs the checker of docs/reliability.md over events: one row each, the
// statistics equal to the rows, nothing left over.
func (b *adminBundle) check(t *testing.T, events []*outbox.Event) {
	t.Helper()
	keys := make([]string, len(events))
	for i, ev := range events {
		keys[i] = ev.IdempotencyKey
	}
	v, err := testkit.Check(context.Background(), b.st, b.pg.Pool, b.rdb, b.stream, b.group, keys)
	require.NoError(t, err)
	require.True(t, v.OK(), v.String())
}

// readModel returns the rows (with their projection time) and the
// statistics rows, as text, for comparisons.
func (b *adminBundle) readModel(t *testing.T) (rows, stats []string) {
	t.Helper()
	ctx := context.Background()
	r, err := b.pg.Pool.Query(ctx, `SELECT event_id || ' ' || device_key || ' ' || projected_at::text FROM events ORDER BY event_id`)
	require.NoError(t, err)
	rows, err = pgx.CollectRows(r, pgx.RowTo[string])
	require.NoError(t, err)
	s, err := b.pg.Pool.Query(ctx, `SELECT source_key || ' ' || device_key || ' ' || day::text || ' ' || event_count::text || ' ' ||
		first_occurred_at::text || ' ' || last_occurred_at::text FROM device_daily_stats ORDER BY 1`)
	require.NoError(t, err)
	stats, err = pgx.CollectRows(s, pgx.RowTo[string])
	require.NoError(t, err)
	return rows, stats
}

func (b *adminBundle) rowCount(t *testing.T, id string) int {
	t.Helper()
	var n int
	require.NoError(t, b.pg.Pool.QueryRow(context.Background(), `SELECT count(*) FROM events WHERE event_id = $1`, id).Scan(&n))
	return n
}

// call sends an admin request with the token and decodes a 200 answer into
// out; it returns the status and the body.
func (b *adminBundle) call(t *testing.T, method, path string, body, out any) (int, []byte) {
	t.Helper()
	var rd *strings.Reader
	if body != nil {
		j, err := json.Marshal(body)
		require.NoError(t, err)
		rd = strings.NewReader(string(j))
	} else {
		rd = strings.NewReader("")
	}
	req, err := http.NewRequest(method, b.server.URL+path, rd)
	require.NoError(t, err)
	req.Header.Set("Authorization", "Bearer "+testToken)
	if body != nil {
		req.Header.Set("Content-Type", "application/json")
	}
	res, err := b.server.Client().Do(req)
	require.NoError(t, err)
	defer res.Body.Close()
	var raw json.RawMessage
	require.NoError(t, json.NewDecoder(res.Body).Decode(&raw))
	if res.StatusCode == http.StatusOK && out != nil {
		reflect.ValueOf(out).Elem().SetZero() // an answer's omitted fields are empty, not the last answer's
		require.NoError(t, json.Unmarshal(raw, out))
	}
	return res.StatusCode, raw
}

// laneSince returns the messages of the replay lane, where replays go,
// after id.
func (b *adminBundle) laneSince(t *testing.T, id string) []outbox.Message {
	t.Helper()
	msgs, err := b.rdb.XRange(context.Background(), b.keys().Replay(), "("+id, "+").Result()
	require.NoError(t, err)
	out := make([]outbox.Message, len(msgs))
	for i, m := range msgs {
		out[i], err = outbox.DecodeMessage(m.Values)
		require.NoError(t, err)
	}
	return out
}

// laneLastID is the last id added to the replay lane (which the worker
// creates when it starts).
func (b *adminBundle) laneLastID(t *testing.T) string {
	t.Helper()
	info, err := b.rdb.XInfoStream(context.Background(), b.keys().Replay()).Result()
	require.NoError(t, err)
	return info.LastGeneratedID
}

// bothStores open a fresh store of each kind: SQLite, and MongoDB on lungo
// (or the replica set of OUTBOXD_TEST_MONGO_URI).
var bothStores = map[string]func(testing.TB) store.Store{
	"SQLite":  func(t testing.TB) store.Store { return testkit.NewSQLite(t) },
	"MongoDB": func(t testing.TB) store.Store { return testkit.NewMongo(t, nil) },
}

var day0 = time.Date(2026, 10, 1, 0, 0, 0, 0, time.UTC)

func hours(n int) []time.Time {
	out := make([]time.Time, n)
	for i := range out {
		out[i] = day0.Add(time.Duration(i) * time.Hour)
	}
	return out
}

// TestAdminDLQReplay: a record whose projection keeps failing is parked
// and dead-lettered; once the cause is fixed, replaying the dead letter
// projects it exactly once and empties the entry, and the duplicate
// delivery a crash between the publish and the entry's removal would make
// changes nothing. On the SQLite store and on the MongoDB store (lungo).
func TestAdminDLQReplay(t *testing.T) {
	t.Parallel()
	for name, open := range bothStores {
		t.Run(name, func(t *testing.T) {
			t.Parallel()
			ctx := context.Background()
			b := setupAdmin(t, open(t))
			events := b.write(t, "d1", hours(3)...)
			bad := events[1]
			b.startPoisoning(t, bad)
			require.Zero(t, b.rowCount(t, bad.ID))

			var page operator.DLQPage
			code, body := b.call(t, http.MethodGet, "/v1/admin/dlq?category=poison", nil, &page)
			require.Equal(t, http.StatusOK, code, string(body))
			require.Len(t, page.Entries, 1)
			dl := page.Entries[0]
			require.Equal(t, bad.ID, dl.EventID)
			require.Equal(t, outbox.CategoryPoison, dl.Category)
			require.Equal(t, outbox.StateFailed, dl.Original)
			require.Equal(t, int64(2), dl.Deliveries)
			require.NotEmpty(t, dl.Code)
			code, _ = b.call(t, http.MethodGet, "/v1/admin/dlq?category=non_retryable", nil, &page)
			require.Equal(t, http.StatusOK, code)
			require.Empty(t, page.Entries, "the filter keeps other categories out")

			var parked operator.EventsPage
			code, body = b.call(t, http.MethodGet, "/v1/admin/events?state=failed", nil, &parked)
			require.Equal(t, http.StatusOK, code, string(body))
			require.Len(t, parked.Events, 1, "the parked originals")
			require.Equal(t, bad.ID, parked.Events[0].ID)
			require.Equal(t, outbox.CategoryPoison, parked.Events[0].SyncFailure.Category)
			require.NotContains(t, string(body), "payload")

			var one operator.DeadLetter
			code, body = b.call(t, http.MethodGet, "/v1/admin/dlq/"+dl.ID, nil, &one)
			require.Equal(t, http.StatusOK, code, string(body))
			require.NotNil(t, one.Event)
			require.Equal(t, bad.IdempotencyKey, one.Event.IdempotencyKey)

			b.breaker.Store(nil) // the cause is fixed
			mark := b.laneLastID(t)
			var res operator.DLQActionResult
			code, body = b.call(t, http.MethodPost, "/v1/admin/dlq:replay", operator.DLQAction{IDs: []string{dl.ID}}, &res)
			require.Equal(t, http.StatusOK, code, string(body))
			require.Equal(t, 1, res.Replayed)
			require.Equal(t, []operator.DLQResult{{ID: dl.ID, EventID: bad.ID, Outcome: operator.OutcomeReplayed}}, res.Results)
			b.waitDrained(t, events...)
			require.Zero(t, b.rdb.XLen(ctx, b.keys().DLQ()).Val(), "the entry is gone")
			msgs := b.laneSince(t, mark)
			require.Len(t, msgs, 1)
			require.Equal(t, outbox.OriginDLQReplay, msgs[0].Origin)
			require.Equal(t, bad.IdempotencyKey, msgs[0].IdempotencyKey)
			require.Equal(t, 1, b.rowCount(t, bad.ID))
			require.Nil(t, testkit.Event(t, b.st, bad.ID).SyncFailure)
			b.check(t, events)

			// A crash after the publish, before the entry's removal, leaves
			// the entry: replayed again, the event is delivered twice.
			require.NoError(t, b.rdb.XAdd(ctx, &redis.XAddArgs{Stream: b.stream, Values: bad.Message(outbox.OriginDLQReplay).Values()}).Err())
			b.waitDrained(t, events...)
			require.Equal(t, 1, b.rowCount(t, bad.ID))
			b.check(t, events)

			code, body = b.call(t, http.MethodPost, "/v1/admin/dlq:replay", operator.DLQAction{IDs: []string{dl.ID}}, &res)
			require.Equal(t, http.StatusOK, code, string(body))
			require.Equal(t, 1, res.NotFound, "replayed entries are gone")
		})
	}
}

// TestAdminDLQMissingOriginalAndDrop: a dead letter whose original does
// not exist says so, is kept by a replay, and is dropped.
func TestAdminDLQMissingOriginalAndDrop(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	b := setupAdmin(t, testkit.NewStore(t))
	ghost := &outbox.Event{ID: outbox.NewEventID(), IdempotencyKey: "ghost", SourceKey: "s", DeviceKey: "d", OccurredAt: day0, CreatedAt: day0}
	require.NoError(t, b.rdb.XAdd(ctx, &redis.XAddArgs{Stream: b.stream, Values: ghost.Message(outbox.OriginOutbox).Values()}).Err())
	require.NoError(t, b.rdb.XAdd(ctx, &redis.XAddArgs{Stream: b.stream, Values: map[string]any{"payload": "not json"}}).Err())
	b.start(t, nil)
	require.Eventually(t, func() bool { return b.rdb.XLen(ctx, b.keys().DLQ()).Val() == 2 }, waitFor, 10*time.Millisecond)

	var page operator.DLQPage
	code, body := b.call(t, http.MethodGet, "/v1/admin/dlq?limit=1", nil, &page)
	require.Equal(t, http.StatusOK, code, string(body))
	require.Len(t, page.Entries, 1)
	require.NotEmpty(t, page.Next, "one more follows")
	require.Equal(t, int64(2), page.Length)
	require.Equal(t, operator.OriginalMissing, page.Entries[0].Original)
	named := []string{page.Entries[0].EventID}
	after := page.Next
	page = operator.DLQPage{}
	code, _ = b.call(t, http.MethodGet, "/v1/admin/dlq?after="+after, nil, &page)
	require.Equal(t, http.StatusOK, code)
	require.Len(t, page.Entries, 1)
	require.Equal(t, operator.OriginalMissing, page.Entries[0].Original)
	require.Empty(t, page.Next)
	require.ElementsMatch(t, []string{ghost.ID, ""}, append(named, page.Entries[0].EventID), "the entry of a bad message names no event")

	var res operator.DLQActionResult
	code, body = b.call(t, http.MethodPost, "/v1/admin/dlq:replay", operator.DLQAction{All: true}, &res)
	require.Equal(t, http.StatusOK, code, string(body))
	require.Equal(t, 2, res.OriginalMissing)
	require.True(t, res.Done)
	require.Equal(t, int64(2), b.rdb.XLen(ctx, b.keys().DLQ()).Val(), "kept")

	code, body = b.call(t, http.MethodPost, "/v1/admin/dlq:drop", operator.DLQAction{All: true, Code: "bad_message"}, &res)
	require.Equal(t, http.StatusOK, code, string(body))
	require.Equal(t, 1, res.Dropped, "only the code asked for")
	code, body = b.call(t, http.MethodPost, "/v1/admin/dlq:drop", operator.DLQAction{All: true}, &res)
	require.Equal(t, http.StatusOK, code, string(body))
	require.Equal(t, 1, res.Dropped)
	require.Zero(t, b.rdb.XLen(ctx, b.keys().DLQ()).Val())

	code, _ = b.call(t, http.MethodGet, "/v1/admin/dlq/1-0", nil, nil)
	require.Equal(t, http.StatusNotFound, code)
}

// TestAdminReplayWindow: a replay by boundary re-publishes the window's
// originals only (the count and the stream entries), with origin replay and
// their own idempotency keys, in chunks, and leaves the read model as it
// was. On both stores.
func TestAdminReplayWindow(t *testing.T) {
	t.Parallel()
	for name, open := range bothStores {
		t.Run(name, func(t *testing.T) {
			t.Parallel()
			b := setupAdmin(t, open(t))
			events := b.write(t, "d1", hours(8)...)
			other := b.write(t, "d2", hours(8)...)
			b.start(t, nil)
			all := append(slices.Clone(events), other...)
			b.waitDrained(t, all...)
			rows, stats := b.readModel(t)
			mark := b.laneLastID(t)

			req := httpapi.ReplayRequest{From: day0.Add(2 * time.Hour).Format(time.RFC3339), To: day0.Add(5 * time.Hour).Format(time.RFC3339),
				SourceKey: "src", DeviceKey: "d1", DryRun: true}
			var res operator.ReplayResult
			code, body := b.call(t, http.MethodPost, "/v1/admin/replay", req, &res)
			require.Equal(t, http.StatusOK, code, string(body))
			require.Equal(t, int64(3), *res.Count)
			require.Equal(t, mark, b.laneLastID(t), "a dry run publishes nothing")

			req.DryRun, req.Limit = false, 2
			published, chunks := 0, 0
			for {
				code, body = b.call(t, http.MethodPost, "/v1/admin/replay", req, &res)
				require.Equal(t, http.StatusOK, code, string(body))
				published += res.Published
				chunks++
				if res.Done {
					break
				}
				req.After = res.Next
			}
			require.Equal(t, 3, published)
			require.Equal(t, 2, chunks)
			msgs := b.laneSince(t, mark)
			require.Len(t, msgs, 3, "only the window's originals")
			for i, m := range msgs {
				require.Equal(t, events[2+i].ID, m.EventID)
				require.Equal(t, events[2+i].IdempotencyKey, m.IdempotencyKey)
				require.Equal(t, outbox.OriginReplay, m.Origin)
			}
			b.waitDrained(t, all...)
			rows2, stats2 := b.readModel(t)
			require.Equal(t, rows, rows2, "no row projected again")
			require.Equal(t, stats, stats2, "nothing counted twice")
			b.check(t, all)
		})
	}
}

// TestAdminReplayRebuild: after a projection bug (rows of the wrong
// device) is fixed, a replay with rebuild removes the window's rows and
// their counts and re-projects them through the normal path: correct rows
// and statistics, the rows outside the window untouched.
func TestAdminReplayRebuild(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	b := setupAdmin(t, testkit.NewStore(t))
	right := readmodel.NewProjector()
	var fixed atomic.Bool
	b.start(t, worker.ProjectorFunc(func(ctx context.Context, tx pgx.Tx, events []*outbox.Event) error {
		if fixed.Load() {
			return right.Project(ctx, tx, events)
		}
		wrong := make([]*outbox.Event, len(events))
		for i, ev := range events {
			c := *ev
			c.DeviceKey = "wrong"
			wrong[i] = &c
		}
		return right.Project(ctx, tx, wrong)
	}))
	events := b.write(t, "d1", hours(6)...)
	b.waitDrained(t, events...)
	deviceRows := func(device string) (rows, counted int64) {
		require.NoError(t, b.pg.Pool.QueryRow(ctx, `SELECT count(*) FROM events WHERE device_key = $1`, device).Scan(&rows))
		require.NoError(t, b.pg.Pool.QueryRow(ctx, `SELECT coalesce(sum(event_count), 0) FROM device_daily_stats WHERE device_key = $1`, device).Scan(&counted))
		return rows, counted
	}
	rows, counted := deviceRows("wrong")
	require.Equal(t, [2]int64{6, 6}, [2]int64{rows, counted}, "the bug at work")

	fixed.Store(true)
	req := httpapi.ReplayRequest{From: day0.Format(time.RFC3339), To: day0.Add(4 * time.Hour).Format(time.RFC3339), Rebuild: true, Limit: 3}
	var removed int64
	for {
		var res operator.ReplayResult
		code, body := b.call(t, http.MethodPost, "/v1/admin/replay", req, &res)
		require.Equal(t, http.StatusOK, code, string(body))
		removed += res.RemovedRows
		if res.Done {
			break
		}
		req.After = res.Next
	}
	require.Equal(t, int64(4), removed)
	b.waitDrained(t, events...)
	rows, counted = deviceRows("d1")
	require.Equal(t, [2]int64{4, 4}, [2]int64{rows, counted}, "the window recomputed")
	rows, counted = deviceRows("wrong")
	require.Equal(t, [2]int64{2, 2}, [2]int64{rows, counted}, "outside the window untouched")

	req = httpapi.ReplayRequest{From: day0.Format(time.RFC3339), To: day0.Add(24 * time.Hour).Format(time.RFC3339), Rebuild: true}
	code, body := b.call(t, http.MethodPost, "/v1/admin/replay", req, nil)
	require.Equal(t, http.StatusOK, code, string(body))
	b.waitDrained(t, events...)
	rows, counted = deviceRows("d1")
	require.Equal(t, [2]int64{6, 6}, [2]int64{rows, counted})
	rows, _ = deviceRows("wrong")
	require.Zero(t, rows)
	var wrongStats int
	require.NoError(t, b.pg.Pool.QueryRow(ctx, `SELECT count(*) FROM device_daily_stats WHERE device_key = 'wrong'`).Scan(&wrongStats))
	require.Zero(t, wrongStats, "the wrong statistics rows are gone")
	var first, last time.Time
	require.NoError(t, b.pg.Pool.QueryRow(ctx, `SELECT first_occurred_at, last_occurred_at FROM device_daily_stats WHERE device_key = 'd1'`).Scan(&first, &last))
	require.True(t, day0.Equal(first))
	require.True(t, day0.Add(5*time.Hour).Equal(last))
	b.check(t, events)
}

// verifyAll runs every chunk of a verify and returns the drift.
func (b *adminBundle) verifyAll(t *testing.T, req httpapi.VerifyRequest) ([]operator.Drift, map[string]int) {
	t.Helper()
	var drift []operator.Drift
	checked := map[string]int{}
	for range 100 {
		var res operator.VerifyResult
		code, body := b.call(t, http.MethodPost, "/v1/admin/verify", req, &res)
		require.Equal(t, http.StatusOK, code, string(body))
		drift = append(drift, res.Drift...)
		checked[res.Phase] += res.Checked
		if res.Done {
			return drift, checked
		}
		req.After = res.Next
	}
	t.Fatal("verify never ended")
	return nil, nil
}

// TestAdminVerifyRepair: verify finds a row deleted by hand (and its day's
// count, now one too high) and a row nobody accepted; repair re-publishes
// the original and recomputes the statistics, so the day ends counted
// once per row.
func TestAdminVerifyRepair(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	b := setupAdmin(t, testkit.NewStore(t))
	b.start(t, nil)
	events := b.write(t, "d1", hours(5)...)
	b.waitDrained(t, events...)
	drift, checked := b.verifyAll(t, httpapi.VerifyRequest{Limit: 2})
	require.Empty(t, drift)
	require.Equal(t, 5, checked[operator.PhaseOriginals])
	require.Equal(t, 5, checked[operator.PhaseRows])

	_, err := b.pg.Pool.Exec(ctx, `DELETE FROM events WHERE event_id = $1`, events[2].ID)
	require.NoError(t, err)
	orphan := outbox.NewEventID()
	_, err = b.pg.Pool.Exec(ctx, `INSERT INTO events (event_id, idempotency_key, source_key, device_key, type, occurred_at, payload, created_at)
		VALUES ($1, 'nobody', 'src', 'd9', 'event', $2, '{}', $2)`, orphan, day0)
	require.NoError(t, err)

	drift, _ = b.verifyAll(t, httpapi.VerifyRequest{Limit: 2})
	kinds := map[string][]string{}
	for _, d := range drift {
		kinds[d.Kind] = append(kinds[d.Kind], d.EventID+d.DeviceKey)
		require.False(t, d.Repaired)
	}
	require.Equal(t, map[string][]string{
		operator.DriftMissingRow: {events[2].ID + "d1"},
		operator.DriftOrphanRow:  {orphan + "d9"},
		operator.DriftStats:      {"d1", "d9"}, // d1 counts 5 for 4 rows; d9 has a row and no count
	}, kinds)

	// A window that leaves the deleted row's day out sees nothing of it.
	drift, _ = b.verifyAll(t, httpapi.VerifyRequest{From: day0.Add(24 * time.Hour).Format(time.RFC3339)})
	require.Empty(t, drift)

	drift, _ = b.verifyAll(t, httpapi.VerifyRequest{From: day0.Format(time.RFC3339), To: day0.Add(24 * time.Hour).Format(time.RFC3339), Repair: true})
	for _, d := range drift {
		require.Equal(t, d.Kind != operator.DriftOrphanRow, d.Repaired, "%+v", d)
	}
	b.waitDrained(t, events...)
	require.Equal(t, 1, b.rowCount(t, events[2].ID))
	var counted int64
	require.NoError(t, b.pg.Pool.QueryRow(ctx, `SELECT event_count FROM device_daily_stats WHERE device_key = 'd1'`).Scan(&counted))
	require.Equal(t, int64(5), counted, "the row projected again is counted once")

	drift, _ = b.verifyAll(t, httpapi.VerifyRequest{})
	require.Len(t, drift, 1, "only the row nobody accepted is left, for a person: %+v", drift)
	require.Equal(t, operator.DriftOrphanRow, drift[0].Kind)
}

// TestAdminAPI: the errors of the admin API are problem documents, behind
// the bearer token.
func TestAdminAPI(t *testing.T) {
	t.Parallel()
	b := setupAdmin(t, testkit.NewStore(t))
	hb := &handlerBundle{server: b.server}
	window := `{"from":"2026-10-01T00:00:00Z","to":"2026-10-02T00:00:00Z"}`

	t.Run("NeedsTheToken", func(t *testing.T) {
		hb.do(t, http.MethodGet, "/v1/admin/dlq", "").problem(t, http.StatusUnauthorized)
		hb.do(t, http.MethodPost, "/v1/admin/replay", window).problem(t, http.StatusUnauthorized)
	})
	auth := []string{"Authorization", "Bearer " + testToken}
	for _, tc := range []struct {
		name, method, path, body string
		status                   int
		field                    string
	}{
		{"ReplayWithoutWindow", http.MethodPost, "/v1/admin/replay", `{"to":"2026-10-02T00:00:00Z"}`, 422, "from"},
		{"ReplayBadTime", http.MethodPost, "/v1/admin/replay", `{"from":"yesterday","to":"2026-10-02T00:00:00Z"}`, 422, "from"},
		{"ReplayEmptyWindow", http.MethodPost, "/v1/admin/replay", `{"from":"2026-10-02T00:00:00Z","to":"2026-10-01T00:00:00Z"}`, 422, "to"},
		{"ReplayBadState", http.MethodPost, "/v1/admin/replay", `{"from":"2026-10-01T00:00:00Z","to":"2026-10-02T00:00:00Z","state":"lost"}`, 422, "state"},
		{"ReplayBadBy", http.MethodPost, "/v1/admin/replay", `{"from":"2026-10-01T00:00:00Z","to":"2026-10-02T00:00:00Z","by":"day"}`, 422, "by"},
		{"ReplayDeviceWithoutSource", http.MethodPost, "/v1/admin/replay", `{"from":"2026-10-01T00:00:00Z","to":"2026-10-02T00:00:00Z","deviceKey":"d"}`, 422, "sourceKey"},
		{"ReplayBadCursor", http.MethodPost, "/v1/admin/replay", `{"from":"2026-10-01T00:00:00Z","to":"2026-10-02T00:00:00Z","after":"x"}`, 422, "after"},
		{"ReplayUnknownField", http.MethodPost, "/v1/admin/replay", `{"from":"2026-10-01T00:00:00Z","to":"2026-10-02T00:00:00Z","window":1}`, 400, ""},
		{"ReplayTooBigChunk", http.MethodPost, "/v1/admin/replay", `{"from":"2026-10-01T00:00:00Z","to":"2026-10-02T00:00:00Z","limit":100000}`, 422, "limit"},
		{"VerifyBadCursor", http.MethodPost, "/v1/admin/verify", `{"after":"elsewhere:1"}`, 422, "after"},
		{"DLQNothingNamed", http.MethodPost, "/v1/admin/dlq:replay", `{}`, 422, "ids"},
		{"DLQIdsAndAll", http.MethodPost, "/v1/admin/dlq:drop", `{"ids":["1-0"],"all":true}`, 422, "all"},
		{"DLQBadID", http.MethodPost, "/v1/admin/dlq:drop", `{"ids":["one"]}`, 422, "ids"},
		{"DLQBadLimit", http.MethodGet, "/v1/admin/dlq?limit=0", ``, 422, "limit"},
		{"DLQUnknown", http.MethodGet, "/v1/admin/dlq/1-1", ``, 404, ""},
		{"DLQBadAfter", http.MethodGet, "/v1/admin/dlq?after=abc", ``, 422, "after"},
		{"DLQAfterWithoutSequence", http.MethodGet, "/v1/admin/dlq?after=1700000000000", ``, 422, "after"},
		{"DLQAfterBadSequence", http.MethodGet, "/v1/admin/dlq?after=1-x", ``, 422, "after"},
		{"DLQAfterSigned", http.MethodGet, "/v1/admin/dlq?after=-1-0", ``, 422, "after"},
		{"DLQBadIDInPath", http.MethodGet, "/v1/admin/dlq/abc", ``, 422, "id"},
		{"DLQActionBadAfter", http.MethodPost, "/v1/admin/dlq:replay", `{"all":true,"after":"abc"}`, 422, "after"},
		{"EventsBadState", http.MethodGet, "/v1/admin/events?state=lost", ``, 422, "state"},
		{"EventsBadWindow", http.MethodGet, "/v1/admin/events?from=2026-10-02T00:00:00Z&to=2026-10-01T00:00:00Z", ``, 422, "to"},
		{"WrongMethod", http.MethodDelete, "/v1/admin/replay", ``, 405, ""},
		{"RetriesNoClass", http.MethodPost, "/v1/admin/retries:resume", `{}`, 422, "class"},
		{"RetriesBadClass", http.MethodPost, "/v1/admin/retries:resume", `{"class":"poison"}`, 422, "class"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			p := hb.do(t, tc.method, tc.path, tc.body, auth...).problem(t, tc.status)
			if tc.field != "" {
				require.Equal(t, []string{tc.field}, fields(p))
			}
		})
	}
	// The answers of the API are kept by no cache and
	// not sniffed, errors included.
	t.Run("NoStore", func(t *testing.T) {
		for _, path := range []string{"/v1/status", "/v1/admin/dlq", "/v1/admin/events", "/v1/admin/dlq?after=abc", "/v1/nothing"} {
			r := hb.do(t, http.MethodGet, path, "", auth...)
			require.Equal(t, "no-store", r.header.Get("Cache-Control"), path)
			require.Equal(t, "nosniff", r.header.Get("X-Content-Type-Options"), path)
		}
	})
	t.Run("NotJSON", func(t *testing.T) {
		hb.do(t, http.MethodPost, "/v1/admin/verify", "{}", append(auth, "Content-Type", "")...).problem(t, http.StatusUnsupportedMediaType)
	})

	t.Run("ActionsAnInstanceCannotPerform", func(t *testing.T) {
		st := testkit.NewStore(t)
		admin, err := operator.New(&operator.Config{Store: st, Role: "ingest"}, nil)
		require.NoError(t, err)
		h, err := httpapi.New(&httpapi.Config{Admin: admin}, nil)
		require.NoError(t, err)
		srv := httptest.NewServer(h)
		defer srv.Close()
		ingest := &handlerBundle{server: srv}
		p := ingest.do(t, http.MethodGet, "/v1/admin/dlq", "").problem(t, http.StatusNotImplemented)
		require.Equal(t, httpapi.ProblemNotAvailable, p.Type)
		require.Contains(t, p.Detail, "ingest")
		ingest.do(t, http.MethodPost, "/v1/admin/verify", "{}").problem(t, http.StatusNotImplemented)
		ingest.do(t, http.MethodPost, "/v1/admin/retries:resume", `{"class":"record"}`).problem(t, http.StatusNotImplemented)
		ingest.do(t, http.MethodPost, "/v1/admin/replay", window).problem(t, http.StatusNotImplemented)
		// Counting needs the store only.
		r := ingest.do(t, http.MethodPost, "/v1/admin/replay", `{"from":"2026-10-01T00:00:00Z","to":"2026-10-02T00:00:00Z","dryRun":true}`)
		require.Equal(t, http.StatusOK, r.status, string(r.body))
		require.JSONEq(t, `{"dryRun":true,"count":0,"matched":0,"published":0,"redriven":0,"removedRows":0,"done":true}`, string(r.body))
	})
}

// TestAdminRetriesResume: POST /v1/admin/retries:resume clears a halted
// class of the group's workers and of the stream's dispatchers in Redis
// and says which it cleared; /v1/status shows the halts until then.
func TestAdminRetriesResume(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	b := setupAdmin(t, testkit.NewStore(t))
	keys := b.keys()
	pgDown := failpolicy.Infrastructure(failpolicy.SourcePostgres)
	storeDown := failpolicy.Infrastructure(failpolicy.SourceStore)
	_, err := b.rc.Streak(keys, stream.ComponentWorker).Fail(ctx, pgDown, 1)
	require.NoError(t, err)
	_, err = b.rc.Streak(keys, stream.ComponentDispatcher).Fail(ctx, storeDown, 1)
	require.NoError(t, err)
	var snap ostatus.Snapshot
	code, body := b.call(t, http.MethodGet, "/v1/status", nil, &snap)
	require.Equal(t, http.StatusOK, code, string(body))
	require.ElementsMatch(t, []ostatus.HaltedRetries{
		{Component: stream.ComponentWorker, Class: failpolicy.ClassInfrastructure, Code: pgDown.Code},
		{Component: stream.ComponentDispatcher, Class: failpolicy.ClassInfrastructure, Code: storeDown.Code},
	}, snap.RetriesHalted)

	var res operator.RetriesResult
	code, body = b.call(t, http.MethodPost, "/v1/admin/retries:resume", httpapi.RetriesRequest{Class: failpolicy.ClassRecord}, &res)
	require.Equal(t, http.StatusOK, code, string(body))
	require.Equal(t, operator.RetriesResult{Class: failpolicy.ClassRecord, Resumed: []operator.ResumedHalt{}}, res, "another class: nothing cleared")
	code, body = b.call(t, http.MethodPost, "/v1/admin/retries:resume", httpapi.RetriesRequest{Class: failpolicy.ClassInfrastructure}, &res)
	require.Equal(t, http.StatusOK, code, string(body))
	require.Equal(t, []operator.ResumedHalt{
		{Component: stream.ComponentWorker, Code: pgDown.Code, Source: failpolicy.SourcePostgres},
		{Component: stream.ComponentDispatcher, Code: storeDown.Code, Source: failpolicy.SourceStore},
	}, res.Resumed)
	code, body = b.call(t, http.MethodGet, "/v1/status", nil, &snap)
	require.Equal(t, http.StatusOK, code, string(body))
	require.Empty(t, snap.RetriesHalted)
}
