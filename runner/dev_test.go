package runner

import (
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"io"
	"net"
	"net/http"
	"path/filepath"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	ostatus "github.com/outboxd/outboxd/internal/status"
	"github.com/outboxd/outboxd/internal/testkit"
	"github.com/outboxd/outboxd/store"
	"github.com/outboxd/outboxd/store/mongostore"
	"github.com/outboxd/outboxd/store/sqlitestore"
)

// devBundle runs `outboxd dev` in-process against the test's own stores.
type devBundle struct {
	base     string
	store    string // the --store value
	pg       *testkit.Postgres
	stream   string
	group    string
	cancel   context.CancelFunc
	done     chan int
	stderr   *syncBuffer
	accepted sync.Map // idempotency key -> id
}

type syncBuffer struct {
	mu sync.Mutex
	b  bytes.Buffer
}

func (s *syncBuffer) Write(p []byte) (int, error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.b.Write(p)
}

func (s *syncBuffer) String() string {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.b.String()
}

func freeAddr(t *testing.T) string {
	l, err := net.Listen("tcp", "127.0.0.1:0")
	require.NoError(t, err)
	defer l.Close()
	return l.Addr().String()
}

// startDev runs `outboxd dev` on storeURI ("" for a fresh SQLite file).
func startDev(t *testing.T, storeURI string, extra ...string) *devBundle {
	t.Helper()
	return startDevOver(t, "http", http.DefaultClient, storeURI, extra...)
}

// startDevOver runs `outboxd dev` and waits until it answers /readyz at
// scheme ("https" with --tls-cert) through client.
func startDevOver(t *testing.T, scheme string, client *http.Client, storeURI string, extra ...string) *devBundle {
	t.Helper()
	_, prefix := testkit.NewRedis(t)
	b := &devBundle{pg: testkit.NewPostgres(t), stream: prefix + "-stream", group: prefix + "-group",
		done: make(chan int, 1), stderr: &syncBuffer{}}
	addr := freeAddr(t)
	b.base = scheme + "://" + addr
	mongoDB := "outboxd"
	switch {
	case storeURI == "":
		storeURI = "sqlite:" + filepath.Join(t.TempDir(), "outboxd.db")
	case storeURI == mongostore.LungoMemory && testkit.RealMongo():
		storeURI, mongoDB = testkit.MongoURI(), testkit.Name("outboxd_e2e")
	}
	b.store = storeURI
	args := append([]string{"dev", "--store", storeURI, "--mongo-db", mongoDB,
		"--postgres-url", b.pg.URL, "--redis-url", testkit.RedisURL(),
		"--stream", b.stream, "--group", b.group, "--http-addr", addr, "--log-level", "warn"}, extra...)
	ctx, cancel := context.WithCancel(context.Background())
	b.cancel = cancel
	go func() { b.done <- run(ctx, args, io.Discard, b.stderr) }()
	t.Cleanup(func() { b.stop(t) })
	require.Eventually(t, func() bool {
		resp, err := client.Get(b.base + "/readyz")
		if err != nil {
			return false
		}
		resp.Body.Close()
		return resp.StatusCode == http.StatusOK
	}, 30*time.Second, 20*time.Millisecond, "dev did not become ready: %s", b.stderr)
	return b
}

// stop cancels dev like SIGTERM and requires a clean exit 0.
func (b *devBundle) stop(t *testing.T) {
	if b.cancel == nil {
		return
	}
	b.cancel()
	b.cancel = nil
	select {
	case code := <-b.done:
		require.Equal(t, ExitOK, code, b.stderr.String())
	case <-time.After(60 * time.Second):
		t.Fatalf("dev did not stop within 60s")
	}
}

func (b *devBundle) post(t *testing.T, path, key, body string) (int, []byte) {
	req, err := http.NewRequest(http.MethodPost, b.base+path, strings.NewReader(body))
	require.NoError(t, err)
	req.Header.Set("Content-Type", "application/json")
	if key != "" {
		req.Header.Set("Idempotency-Key", key)
	}
	resp, err := http.DefaultClient.Do(req)
	require.NoError(t, err)
	defer resp.Body.Close()
	out, err := io.ReadAll(resp.Body)
	require.NoError(t, err)
	return resp.StatusCode, out
}

// status reads GET /v1/status; safe inside require.Eventually's goroutine.
func (b *devBundle) status() (ostatus.Snapshot, error) {
	var s ostatus.Snapshot
	resp, err := http.Get(b.base + "/v1/status")
	if err != nil {
		return s, err
	}
	defer resp.Body.Close()
	if resp.StatusCode != http.StatusOK {
		return s, fmt.Errorf("status: %s", resp.Status)
	}
	return s, json.NewDecoder(resp.Body).Decode(&s)
}

// converged reports a snapshot of a pipeline that has done everything for
// its n originals: all synced, no stream entry pending, and every outbox
// entry marked dispatched. The dispatcher marks what it relayed in a write
// of its own after the XADD, so an event can be synced before its entry is
// marked, and a checker run then would find it undispatched.
func converged(s ostatus.Snapshot, n int64) bool {
	return s.Events != nil && s.Events.Total == n && s.Events.Synced == n &&
		(s.Stream == nil || s.Stream.Pending == 0) && s.Outbox != nil && s.Outbox.Undispatched == 0
}

func event(i int) string {
	return fmt.Sprintf(`{"sourceKey":"src-%d","deviceKey":"dev-%d","occurredAt":"2026-11-%02dT%02d:%02d:00Z","payload":{"i":%d}}`,
		i%3, i%17, 1+i%5, i%24, i%60, i)
}

// TestDevEndToEnd ingests 5,000 events through the HTTP API (4,000 single
// requests, 500 client retries of them and one batch of 500) into `outboxd
// dev` on the default SQLite store and waits for the whole pipeline to
// converge: one row per accepted key, stats counted once, every original
// synced, nothing pending. TestDevEndToEndMongo runs the same, smaller, on
// the MongoDB store.
func TestDevEndToEnd(t *testing.T) {
	t.Parallel()
	devEndToEnd(t, startDev(t, "", "--min-age", "1h"), 4000, 500, 500)
}

// TestDevEndToEndMongo is TestDevEndToEnd on the MongoDB store (lungo, or
// the replica set of OUTBOXD_TEST_MONGO_URI).
func TestDevEndToEndMongo(t *testing.T) {
	t.Parallel()
	devEndToEnd(t, startDev(t, mongostore.LungoMemory, "--min-age", "1h"), 300, 50, 100)
}

func devEndToEnd(t *testing.T, b *devBundle, singles, retries, batch int) {
	var wg sync.WaitGroup
	work := make(chan int)
	for range 8 {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for i := range work {
				key := fmt.Sprintf("k-%d", i)
				code, body := b.post(t, "/v1/events", key, event(i))
				var r struct{ ID string }
				if assert.Equal(t, http.StatusCreated, code, string(body)) && assert.NoError(t, json.Unmarshal(body, &r)) {
					b.accepted.Store(key, r.ID)
				}
			}
		}()
	}
	for i := range singles {
		work <- i
	}
	close(work)
	wg.Wait()
	require.False(t, t.Failed())

	// Client retries: same key, same content → 200, the first id.
	for i := range retries {
		key := fmt.Sprintf("k-%d", i*7%singles)
		code, body := b.post(t, "/v1/events", key, event(i*7%singles))
		require.Equal(t, http.StatusOK, code, string(body))
		var r struct {
			ID        string
			Duplicate bool
		}
		require.NoError(t, json.Unmarshal(body, &r))
		first, _ := b.accepted.Load(key)
		require.Equal(t, first, r.ID)
		require.True(t, r.Duplicate)
	}

	items := make([]string, batch)
	for j := range batch {
		i := singles + j
		items[j] = strings.Replace(event(i), "{", fmt.Sprintf(`{"idempotencyKey":"k-%d",`, i), 1)
	}
	code, body := b.post(t, "/v1/events:batch", "", `{"events":[`+strings.Join(items, ",")+`]}`)
	require.Equal(t, http.StatusOK, code, string(body))
	var br struct {
		Results []struct{ ID, IdempotencyKey string }
	}
	require.NoError(t, json.Unmarshal(body, &br))
	require.Len(t, br.Results, batch)
	for j, r := range br.Results {
		require.Equal(t, fmt.Sprintf("k-%d", singles+j), r.IdempotencyKey)
		b.accepted.Store(r.IdempotencyKey, r.ID)
	}

	total := singles + batch
	require.Eventually(t, func() bool {
		s, err := b.status()
		return err == nil && converged(s, int64(total))
	}, 4*time.Minute, 100*time.Millisecond, "pipeline did not converge")

	var keys []string
	b.accepted.Range(func(k, _ any) bool { keys = append(keys, k.(string)); return true })
	require.Len(t, keys, total)
	rdb, _ := testkit.NewRedis(t)
	v, err := testkit.Check(context.Background(), b.openStore(t), b.pg.Pool, rdb, b.stream, b.group, keys)
	require.NoError(t, err)
	require.True(t, v.OK(), v.String())
	var rows, counted int64
	require.NoError(t, b.pg.Pool.QueryRow(context.Background(),
		`SELECT (SELECT count(*) FROM events), (SELECT sum(event_count) FROM device_daily_stats)`).Scan(&rows, &counted))
	require.EqualValues(t, total, rows)
	require.Equal(t, rows, counted)
	s, err := b.status()
	require.NoError(t, err)
	require.Zero(t, s.Outbox.Undispatched)
	require.Zero(t, s.Stream.Pending)
	b.stop(t)
}

// openStore opens a second handle on dev's store, as another process would
// (nil for lungo's engine, which only dev's process can reach).
func (b *devBundle) openStore(t *testing.T) store.Store {
	t.Helper()
	path, ok := strings.CutPrefix(b.store, "sqlite:")
	if !ok {
		return nil
	}
	st, err := sqlitestore.Open(context.Background(), path, nil)
	require.NoError(t, err)
	t.Cleanup(func() { _ = st.Close(context.Background()) })
	return st
}
