package dispatcher_test

import (
	"context"
	"encoding/json"
	"fmt"
	"net/http"
	"net/http/httptest"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"
	"github.com/stretchr/testify/require"

	"github.com/outboxd/outboxd/dispatcher"
	"github.com/outboxd/outboxd/internal/fault"
	"github.com/outboxd/outboxd/internal/httpapi"
	"github.com/outboxd/outboxd/internal/stream"
	"github.com/outboxd/outboxd/internal/testkit"
	"github.com/outboxd/outboxd/outbox"
	"github.com/outboxd/outboxd/store"
	"github.com/outboxd/outboxd/store/mongostore"
	"github.com/outboxd/outboxd/worker"
)

// Store kinds the dispatcher's tests run on: the SQLite store (its feed is
// the outbox sequence) and the MongoDB store on lungo (its feed is a change
// stream).
const (
	kindSQLite = "SQLite"
	kindMongo  = "Mongo"
)

var kinds = []string{kindSQLite, kindMongo}

// testBundle is one test's stores, writer and stream.
type testBundle struct {
	t      *testing.T
	kind   string
	st     store.Store
	mongo  *mongostore.Store // set on kindMongo
	rdb    redis.UniversalClient
	rc     *stream.Client
	stream string
	writer *outbox.Writer
	faults *fault.Set
	source string
	seq    atomic.Int64
	keys   sync.Map // idempotency keys written, for the checker
}

type setupOpts struct {
	kind  string // kindSQLite by default
	mongo *mongostore.Options
	// redis is a private server's client; nil means the shared test Redis.
	redis redis.UniversalClient
}

func setup(t *testing.T, o *setupOpts) *testBundle {
	t.Helper()
	if o == nil {
		o = &setupOpts{}
	}
	b := &testBundle{t: t, kind: o.kind, faults: &fault.Set{}, source: testkit.Name("src")}
	if b.kind == "" {
		b.kind = kindSQLite
	}
	if b.kind == kindMongo {
		b.mongo = testkit.NewMongo(t, o.mongo)
		b.st = b.mongo
	} else {
		b.st = testkit.NewSQLite(t)
	}
	if o.redis != nil {
		b.rdb = o.redis
		b.stream = testkit.Name("stream")
	} else {
		rdb, prefix := testkit.NewRedis(t)
		b.rdb, b.stream = rdb, prefix+":stream"
	}
	rc, err := stream.NewClient(b.rdb, nil)
	require.NoError(t, err)
	b.rc = rc
	b.writer = outbox.NewWriter(b.st, &outbox.WriterConfig{Stream: b.stream})
	return b
}

// config returns a fast test configuration; callers adjust it.
func (b *testBundle) config() *dispatcher.Config {
	cfg := &dispatcher.Config{
		Stream:         b.stream,
		LeaseTTL:       600 * time.Millisecond,
		IdleCheckpoint: 50 * time.Millisecond,
		// Idle positions are written as often as IdleCheckpoint, as the
		// tests of lost positions need.
		IdleCheckpointMax: 50 * time.Millisecond,
		PollInterval:      10 * time.Millisecond,
		BackoffMax:        200 * time.Millisecond,
		BreakerTimeout:    200 * time.Millisecond,
		Owner:             testkit.Name("owner"),
	}
	dispatcher.SetFaults(cfg, b.faults)
	return cfg
}

// newDispatcher builds a dispatcher stopped at cleanup.
func (b *testBundle) newDispatcher(cfg *dispatcher.Config) *dispatcher.Dispatcher {
	b.t.Helper()
	return b.newDispatcherOn(b.st, cfg)
}

// startOn builds and starts a dispatcher on st (the bundle's store behind
// a test's wrapper), stopped at cleanup.
func (b *testBundle) startOn(st store.Store, cfg *dispatcher.Config) *dispatcher.Dispatcher {
	b.t.Helper()
	d := b.newDispatcherOn(st, cfg)
	require.NoError(b.t, d.Start(context.Background()))
	return d
}

// newDispatcherOn builds a dispatcher on st, stopped at cleanup.
func (b *testBundle) newDispatcherOn(st store.Store, cfg *dispatcher.Config) *dispatcher.Dispatcher {
	b.t.Helper()
	d, err := dispatcher.New(st, b.rdb, cfg, testkit.Logger(b.t))
	require.NoError(b.t, err)
	b.t.Cleanup(func() {
		ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
		defer cancel()
		_ = d.Stop(ctx)
	})
	return d
}

// start builds and starts a dispatcher.
func (b *testBundle) start(cfg *dispatcher.Config) *dispatcher.Dispatcher {
	b.t.Helper()
	d := b.newDispatcher(cfg)
	require.NoError(b.t, d.Start(context.Background()))
	return d
}

// write stores n events, perBatch per Write call, and returns their ids in
// commit order.
func (b *testBundle) write(n, perBatch int) []string {
	b.t.Helper()
	ids := make([]string, 0, n)
	for len(ids) < n {
		k := min(perBatch, n-len(ids))
		inputs := make([]outbox.Input, k)
		for i := range inputs {
			inputs[i] = outbox.Input{
				SourceKey: b.source, DeviceKey: fmt.Sprintf("d%d", b.seq.Add(1)),
				OccurredAt: "2026-11-01T10:00:00Z",
			}
		}
		res, err := b.writer.Write(context.Background(), inputs)
		require.NoError(b.t, err)
		for _, r := range res {
			ids = append(ids, r.ID)
			b.keys.Store(r.IdempotencyKey, true)
		}
	}
	return ids
}

// postEvent posts one event through the HTTP API (which needs no Redis),
// requires a 201 and returns the original's id; the checker expects it.
func (b *testBundle) postEvent() string {
	b.t.Helper()
	h, err := httpapi.New(&httpapi.Config{Writer: b.writer}, nil)
	require.NoError(b.t, err)
	rec := httptest.NewRecorder()
	req := httptest.NewRequest(http.MethodPost, "/v1/events", strings.NewReader(
		`{"sourceKey":"`+b.source+`","deviceKey":"http","occurredAt":"2026-11-01T10:00:00Z"}`))
	req.Header.Set("Content-Type", "application/json")
	h.ServeHTTP(rec, req)
	require.Equal(b.t, http.StatusCreated, rec.Code, rec.Body.String())
	var created outbox.Result
	require.NoError(b.t, json.Unmarshal(rec.Body.Bytes(), &created))
	b.keys.Store(created.IdempotencyKey, true)
	return created.ID
}

// streamIDs returns the event ids in the stream, in stream order. It
// reads again for a moment while the read fails: after an outage go-redis's
// pool answers with its last dial error for up to a second (containsAll).
func (b *testBundle) streamIDs() []string {
	b.t.Helper()
	var msgs []redis.XMessage
	end := time.Now().Add(5 * time.Second)
	for {
		var err error
		msgs, err = b.rdb.XRange(context.Background(), b.stream, "-", "+").Result()
		if err == nil {
			break
		}
		require.True(b.t, time.Now().Before(end), "reading the stream: %v", err)
		time.Sleep(20 * time.Millisecond) // poll until the deadline
	}
	ids := make([]string, len(msgs))
	for i, m := range msgs {
		msg, err := outbox.DecodeMessage(m.Values)
		require.NoError(b.t, err)
		require.Equal(b.t, outbox.OriginOutbox, msg.Origin)
		ids[i] = msg.EventID
	}
	return ids
}

// containsAll reports whether the stream holds every id in want (false
// while Redis does not answer: go-redis's pool returns its last dial error
// for up to a second after an outage, and the dispatcher's watch dials
// during one too).
func (b *testBundle) containsAll(want []string) bool {
	if b.rdb.Ping(context.Background()).Err() != nil {
		return false
	}
	have := map[string]bool{}
	for _, id := range b.streamIDs() {
		have[id] = true
	}
	for _, id := range want {
		if !have[id] {
			return false
		}
	}
	return true
}

// undispatched counts the outbox entries not dispatched yet.
func (b *testBundle) undispatched() int64 {
	b.t.Helper()
	c, err := b.st.Counts(context.Background())
	require.NoError(b.t, err)
	return c.Undispatched
}

// state reads the dispatcher's lease and checkpoint.
func (b *testBundle) state() *store.LeaseState {
	b.t.Helper()
	st, err := b.st.ReadLease(context.Background(), dispatcher.LeaseName(b.stream))
	require.NoError(b.t, err)
	require.NotNil(b.t, st)
	return st
}

// waitRelayed waits until every id is in the stream and nothing is left
// undispatched.
func (b *testBundle) waitRelayed(ids []string, timeout time.Duration) {
	b.t.Helper()
	require.Eventually(b.t, func() bool { return b.containsAll(ids) && b.undispatched() == 0 },
		timeout, 10*time.Millisecond, "not every entry was relayed")
}

// waitDispatched waits until nothing is left undispatched (the store says
// so: cheaper than reading a long stream back, and still true once it is
// trimmed).
func (b *testBundle) waitDispatched(timeout time.Duration) {
	b.t.Helper()
	require.Eventually(b.t, func() bool { return b.undispatched() == 0 }, timeout, 10*time.Millisecond, "not every entry was relayed")
}

// unique returns ids without repetitions, first occurrence kept.
func unique(ids []string) []string {
	seen := map[string]bool{}
	var out []string
	for _, id := range ids {
		if !seen[id] {
			seen[id] = true
			out = append(out, id)
		}
	}
	return out
}

// startWorker starts a worker on the bundle's stream (group
// stream.GroupDefault) with a fresh PostgreSQL database, stopped at
// cleanup, and returns the pipeline the checker reads.
func (b *testBundle) startWorker() testkit.Pipeline {
	b.t.Helper()
	return b.startWorkerOn(b.st)
}

// startWorkerOn is startWorker with the worker on st (the bundle's store
// behind a test's wrapper).
func (b *testBundle) startWorkerOn(st store.Store) testkit.Pipeline {
	b.t.Helper()
	pg := testkit.NewPostgres(b.t)
	w, err := worker.New(st, b.rdb, pg.Pool, &worker.Config{
		Stream: b.stream, Group: stream.GroupDefault, Consumer: testkit.Name("c"),
		Block: 50 * time.Millisecond, BackoffMax: 200 * time.Millisecond, BreakerTimeout: 200 * time.Millisecond,
	}, testkit.Logger(b.t))
	require.NoError(b.t, err)
	require.NoError(b.t, w.Start(context.Background()))
	b.t.Cleanup(func() { require.NoError(b.t, w.Stop(context.Background())) })
	return testkit.Pipeline{Store: b.st, Pool: pg.Pool, Redis: b.rdb, Stream: b.stream, Group: stream.GroupDefault}
}

// requireConverged is the last step of a fault test: with a worker
// draining the stream (p), every event written through the bundle ends
// with one row and one count, synced, nothing pending or undispatched.
func (b *testBundle) requireConverged(p testkit.Pipeline) {
	b.t.Helper()
	var keys []string
	b.keys.Range(func(k, _ any) bool { keys = append(keys, k.(string)); return true })
	testkit.RequireConverged(b.t, p, keys, 30*time.Second)
}
