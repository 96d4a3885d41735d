package runner

import (
	"bufio"
	"bytes"
	"context"
	"errors"
	"fmt"
	"io"
	"net"
	"net/http"
	"path/filepath"
	"strings"
	"sync"
	"sync/atomic"
	"syscall"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"
	"github.com/stretchr/testify/require"

	"github.com/outboxd/outboxd/dispatcher"
	"github.com/outboxd/outboxd/internal/testkit"
	"github.com/outboxd/outboxd/outbox"
	"github.com/outboxd/outboxd/store"
	"github.com/outboxd/outboxd/store/sqlitestore"
	"github.com/outboxd/outboxd/worker"
)

// pipelineBundle is a test's stores for running roles in-process with run(),
// as separate processes would: one SQLite file, a PostgreSQL database, a
// stream and a group of its own.
type pipelineBundle struct {
	path     string
	pg       *testkit.Postgres
	redisURL string
	stream   string
	group    string
}

func newPipelineBundle(t *testing.T) *pipelineBundle {
	t.Helper()
	_, prefix := testkit.NewRedis(t)
	return &pipelineBundle{
		path: filepath.Join(t.TempDir(), "outboxd.db"), pg: testkit.NewPostgres(t), redisURL: testkit.RedisURL(),
		stream: prefix + "-stream", group: prefix + "-group",
	}
}

// args returns role's command line on the bundle's stores, with the flags
// the role has.
func (b *pipelineBundle) args(role string, extra ...string) []string {
	args := []string{role, "--store", "sqlite:" + b.path, "--log-level", "warn"}
	redis := []string{"--redis-url", b.redisURL, "--stream", b.stream, "--group", b.group}
	switch role {
	case "dev", "work":
		args = append(append(args, redis...), "--postgres-url", b.pg.URL)
	case "dispatch", "reconcile":
		args = append(args, redis...)
	case "migrate":
		args = append(args, "--postgres-url", b.pg.URL)
	}
	return append(args, extra...)
}

// process is one role run in-process by run(), stopped like SIGTERM by
// cancelling its context.
type process struct {
	cancel context.CancelFunc
	done   chan int
	stderr *syncBuffer
}

// start runs args and, when addr is not empty, waits until /readyz answers
// 200 there. The process is stopped at cleanup (exit 0 required).
func start(t *testing.T, addr string, args []string) *process {
	t.Helper()
	ctx, cancel := context.WithCancel(context.Background())
	p := &process{cancel: cancel, done: make(chan int, 1), stderr: &syncBuffer{}}
	go func() { p.done <- run(ctx, args, io.Discard, p.stderr) }()
	t.Cleanup(func() { p.stop(t, time.Minute) })
	if addr != "" {
		require.Eventually(t, func() bool {
			resp, err := http.Get("http://" + addr + "/readyz")
			if err != nil {
				return false
			}
			resp.Body.Close()
			return resp.StatusCode == http.StatusOK
		}, 30*time.Second, 20*time.Millisecond, "%s did not become ready: %s", args[0], p.stderr)
	}
	return p
}

// stop sends the stop (SIGTERM) and requires exit 0 within limit; it
// returns how long the exit took. Stopping twice is a no-op.
func (p *process) stop(t *testing.T, limit time.Duration) time.Duration {
	t.Helper()
	return p.sigterm()(t, limit)
}

// sigterm sends the stop and returns the wait for the exit: exit 0 within
// limit, and how long after the stop it came.
func (p *process) sigterm() func(t *testing.T, limit time.Duration) time.Duration {
	if p.cancel == nil {
		return func(*testing.T, time.Duration) time.Duration { return 0 }
	}
	began := time.Now()
	p.cancel()
	p.cancel = nil
	return func(t *testing.T, limit time.Duration) time.Duration {
		t.Helper()
		select {
		case code := <-p.done:
			require.Equal(t, ExitOK, code, p.stderr.String())
		case <-time.After(limit):
			t.Fatalf("did not exit within %s of SIGTERM: %s", limit, p.stderr)
		}
		return time.Since(began)
	}
}

// heldRequest is a POST /v1/events that is in flight for sure: it asks for
// 100-continue, and the server sends "100 Continue" only once the handler
// reads the body; the body goes when finish is called.
type heldRequest struct {
	conn net.Conn
	br   *bufio.Reader
	body string
}

func holdRequest(t *testing.T, addr, key, body string) *heldRequest {
	t.Helper()
	conn, err := net.Dial("tcp", addr)
	require.NoError(t, err)
	t.Cleanup(func() { _ = conn.Close() })
	_, err = fmt.Fprintf(conn, "POST /v1/events HTTP/1.1\r\nHost: %s\r\nContent-Type: application/json\r\n"+
		"Idempotency-Key: %s\r\nExpect: 100-continue\r\nContent-Length: %d\r\n\r\n", addr, key, len(body))
	require.NoError(t, err)
	h := &heldRequest{conn: conn, br: bufio.NewReader(conn), body: body}
	resp, err := http.ReadResponse(h.br, nil)
	require.NoError(t, err)
	require.Equal(t, http.StatusContinue, resp.StatusCode, "the handler reads the body")
	return h
}

// finish sends the body and returns the answer's status.
func (h *heldRequest) finish(t *testing.T) int {
	t.Helper()
	_, err := io.WriteString(h.conn, h.body)
	require.NoError(t, err)
	resp, err := http.ReadResponse(h.br, nil)
	require.NoError(t, err, "the request in flight at SIGTERM was answered")
	_, _ = io.Copy(io.Discard, resp.Body)
	_ = resp.Body.Close()
	return resp.StatusCode
}

// loadClient posts events with Idempotency-Keys and retries each until it is
// accepted, as a real client does.
type loadClient struct {
	accepted sync.Map // key -> id
	n        atomic.Int64
	// answers counts answers received while window is 1.
	window, answers atomic.Int64
	mu              sync.Mutex
	failures        []string // answers no client should ever see
}

// send posts events [from, to) to base(i) from workers goroutines, until
// each is accepted or ctx ends. Refused connections (the server is down
// or restarting) are retried, and so is a request on a reused keep-alive
// connection that the server closed as idle just as the request went out
// (EOF or a reset: HTTP/1.1 cannot tell the client whether the server read
// it, which is what the Idempotency-Key is for); anything else that is not
// an answer is a request the server dropped, and is recorded.
func (c *loadClient) send(ctx context.Context, base func(i int) string, from, to, workers int) {
	work := make(chan int)
	var wg sync.WaitGroup
	for range workers {
		wg.Go(func() {
			hc := &http.Client{Timeout: 30 * time.Second}
			for i := range work {
				key := fmt.Sprint("k-", i)
				for ctx.Err() == nil {
					req, _ := http.NewRequestWithContext(ctx, http.MethodPost, base(i)+"/v1/events", strings.NewReader(event(i)))
					req.Header.Set("Content-Type", "application/json")
					req.Header.Set("Idempotency-Key", key)
					resp, err := hc.Do(req)
					if err == nil && c.window.Load() == 1 {
						c.answers.Add(1)
					}
					if err == nil {
						body, _ := io.ReadAll(resp.Body)
						resp.Body.Close()
						if resp.StatusCode == http.StatusCreated || resp.StatusCode == http.StatusOK {
							c.accepted.Store(key, true)
							c.n.Add(1)
							break
						}
						c.fail(fmt.Sprintf("%s: %d %s", key, resp.StatusCode, body))
					} else if !errors.Is(err, syscall.ECONNREFUSED) && !errors.Is(err, io.EOF) &&
						!errors.Is(err, syscall.ECONNRESET) && ctx.Err() == nil {
						c.fail(fmt.Sprintf("%s: %v", key, err))
					}
					select {
					case <-ctx.Done():
					case <-time.After(20 * time.Millisecond):
					}
				}
			}
		})
	}
	for i := from; i < to && ctx.Err() == nil; i++ {
		work <- i
	}
	close(work)
	wg.Wait()
}

func (c *loadClient) fail(msg string) {
	c.mu.Lock()
	defer c.mu.Unlock()
	c.failures = append(c.failures, msg)
}

func (c *loadClient) keys() []string {
	var keys []string
	c.accepted.Range(func(k, _ any) bool { keys = append(keys, k.(string)); return true })
	return keys
}

// pipeline returns what the checker reads, with a store handle of the
// test's own (another process, as far as SQLite goes).
func (b *pipelineBundle) pipeline(t *testing.T) testkit.Pipeline {
	t.Helper()
	st, err := sqlitestore.Open(context.Background(), b.path, nil)
	require.NoError(t, err)
	t.Cleanup(func() { _ = st.Close(context.Background()) })
	opt, err := redis.ParseURL(b.redisURL)
	require.NoError(t, err)
	rdb := redis.NewClient(opt)
	t.Cleanup(func() { _ = rdb.Close() })
	return testkit.Pipeline{Store: st, Pool: b.pg.Pool, Redis: rdb, Stream: b.stream, Group: b.group}
}

// TestSIGTERMUnderLoad is the row "SIGTERM under load: stop reading,
// finish in-flight work, XACK and checkpoint, exit 0 within the grace
// period". Clients keep sending to `outboxd dev`; SIGTERM (run's context,
// as main's signal.NotifyContext cancels it) stops it while requests are in
// flight: every request the server took is answered (a client sees a
// refused connection, never a dropped one), it exits 0 well within
// --shutdown-timeout with nothing pending in the group and its lease
// released; restarted on the same stores, nothing is lost.
func TestSIGTERMUnderLoad(t *testing.T) {
	t.Parallel()
	ctx, cancel := context.WithTimeout(context.Background(), 3*time.Minute)
	defer cancel()
	b := newPipelineBundle(t)
	addr := freeAddr(t)
	const grace = 10 * time.Second
	args := b.args("dev", "--http-addr", addr, "--shutdown-timeout", grace.String(),
		"--min-age", "2s", "--requeue-after", "2s", "--every", "1s", "--claim-idle", "1s")
	dev := start(t, addr, args)

	const events = 600
	c := &loadClient{}
	sent := make(chan struct{})
	go func() {
		defer close(sent)
		c.send(ctx, func(int) string { return "http://" + addr }, 0, events, 8)
	}()
	require.Eventually(t, func() bool { return c.n.Load() >= events/3 }, time.Minute, 5*time.Millisecond)

	// One request is in flight for sure when SIGTERM comes (the clients'
	// may all sit between two requests): its handler is reading the body.
	held := holdRequest(t, addr, "k-held", event(events))
	c.window.Store(1)
	exited := dev.sigterm()
	status := held.finish(t)
	took := exited(t, grace)
	c.window.Store(0)
	t.Logf("exit 0 %s after SIGTERM, %d events accepted, %d more answered during the shutdown", took, c.n.Load(), c.answers.Load())
	require.Equal(t, http.StatusCreated, status, "the request in flight at SIGTERM was accepted")
	c.accepted.Store("k-held", true)
	p := b.pipeline(t)
	pending, err := p.Redis.XPending(ctx, b.stream, b.group).Result()
	require.NoError(t, err)
	require.Zero(t, pending.Count, "the batch in flight was acknowledged")
	lease, err := p.Store.ReadLease(ctx, dispatcher.LeaseName(b.stream))
	require.NoError(t, err)
	require.Empty(t, lease.Owner, "the dispatcher checkpointed and released its lease")

	start(t, addr, args) // the same stores, the same address
	<-sent
	require.NoError(t, ctx.Err(), "clients did not finish")
	require.Empty(t, c.failures, "requests dropped or refused by the server")
	require.Len(t, c.keys(), events+1)
	testkit.RequireConverged(t, p, c.keys(), 2*time.Minute)
}

// TestReconcileExitsOneAfterFailedPublish is the row "reconciler publish
// fails after claim: claim rolled back …; job exits 1", for the process:
// `outboxd reconcile` with Redis down exits 1 and leaves the claims rolled
// back; run again with Redis up it exits 0, and the worker converges.
func TestReconcileExitsOneAfterFailedPublish(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	b := newPipelineBundle(t)
	st := testkit.NewSQLite(t)
	b.path = st.Path()
	w := outbox.NewWriter(st, &outbox.WriterConfig{Stream: b.stream})
	res, err := w.Write(ctx, []outbox.Input{
		{SourceKey: "s", DeviceKey: "a", OccurredAt: "2026-11-01T10:00:00Z"},
		{SourceKey: "s", DeviceKey: "b", OccurredAt: "2026-11-01T10:00:00Z"},
		{SourceKey: "s", DeviceKey: "c", OccurredAt: "2026-11-01T10:00:00Z"},
	})
	require.NoError(t, err)
	var keys []string
	for _, r := range res {
		keys = append(keys, r.IdempotencyKey)
	}
	// Relayed, then lost with Redis: only the reconciler brings them back.
	entries, err := st.Undispatched(ctx, b.stream, store.Partition{}, "", 10)
	require.NoError(t, err)
	lease, err := st.AcquireLease(ctx, dispatcher.LeaseName(b.stream), "gone", time.Now(), time.Minute)
	require.NoError(t, err)
	ids := make([]string, len(entries))
	for i, e := range entries {
		ids[i] = e.ID
	}
	require.NoError(t, st.MarkDispatched(ctx, lease, ids, time.Now()))

	reconcile := func(redisURL string) (int, string) {
		var stdout bytes.Buffer
		stderr := &syncBuffer{}
		code := run(ctx, []string{"reconcile", "--store", "sqlite:" + b.path, "--redis-url", redisURL, "--stream", b.stream,
			"--min-age", "1ms", "--http-addr", "", "--log-level", "error"}, &stdout, stderr)
		return code, stdout.String() + stderr.String()
	}
	code, out := reconcile("redis://" + freeAddr(t) + "/0") // nothing listens there
	require.Equal(t, ExitFailure, code, out)
	require.Contains(t, out, "publish failed 3")
	require.Contains(t, out, "rolled back 3")
	for _, r := range res {
		ev := testkit.Event(t, st, r.ID)
		require.Nil(t, ev.LastRequeuedAt, "claim rolled back")
		require.Zero(t, ev.RequeueCount)
	}

	code, out = reconcile(testkit.RedisURL())
	require.Equal(t, ExitOK, code, out)
	require.Contains(t, out, "published 3")

	rdb, _ := testkit.NewRedis(t)
	wk, err := worker.New(st, rdb, b.pg.Pool, &worker.Config{Stream: b.stream, Group: b.group, Block: 50 * time.Millisecond}, testkit.Logger(t))
	require.NoError(t, err)
	require.NoError(t, wk.Start(ctx))
	t.Cleanup(func() { require.NoError(t, wk.Stop(context.Background())) })
	testkit.RequireConverged(t, testkit.Pipeline{Store: st, Pool: b.pg.Pool, Redis: rdb, Stream: b.stream, Group: b.group}, keys, time.Minute)
}

// TestSeveralProcessesOneSQLiteStore is the row "several processes on one
// SQLite store (each role its own process, or two dev): one dispatcher
// leads, the consumer group shares work, reconciler claims hold; effects
// exact". Each role runs in-process with its own store handle, which to
// SQLite's locks is another process.
func TestSeveralProcessesOneSQLiteStore(t *testing.T) {
	t.Parallel()

	t.Run("TwoDev", func(t *testing.T) {
		t.Parallel()
		ctx, cancel := context.WithTimeout(context.Background(), 3*time.Minute)
		defer cancel()
		b := newPipelineBundle(t)
		addrs := []string{freeAddr(t), freeAddr(t)}
		for _, addr := range addrs {
			start(t, addr, b.args("dev", "--http-addr", addr, "--min-age", "2s", "--requeue-after", "2s", "--every", "500ms"))
		}
		c := &loadClient{}
		c.send(ctx, func(i int) string { return "http://" + addrs[i%2] }, 0, 300, 6)
		require.Empty(t, c.failures)
		testkit.RequireConverged(t, b.pipeline(t), c.keys(), 2*time.Minute)
		requireOneLeader(t, addrs)
	})

	t.Run("RolePerProcess", func(t *testing.T) {
		t.Parallel()
		ctx, cancel := context.WithTimeout(context.Background(), 3*time.Minute)
		defer cancel()
		b := newPipelineBundle(t)
		// The ingest role has no --stream flag: it writes entries for the
		// default stream, so this test takes a Redis server of its own.
		b.redisURL, b.stream = testkit.NewRedisServer(t).URL(), outbox.StreamDefault
		var out bytes.Buffer
		require.Equal(t, ExitOK, run(ctx, b.args("migrate"), &out, &out), out.String())
		ingest := freeAddr(t)
		start(t, ingest, b.args("ingest", "--http-addr", ingest))
		var dispatchers []string
		for range 2 {
			addr := freeAddr(t)
			dispatchers = append(dispatchers, addr)
			start(t, addr, b.args("dispatch", "--http-addr", addr))
		}
		for range 2 {
			addr := freeAddr(t)
			start(t, addr, b.args("work", "--http-addr", addr))
		}
		reconcile := freeAddr(t)
		start(t, reconcile, b.args("reconcile", "--http-addr", reconcile, "--every", "500ms", "--min-age", "2s", "--requeue-after", "2s"))
		c := &loadClient{}
		c.send(ctx, func(int) string { return "http://" + ingest }, 0, 300, 6)
		require.Empty(t, c.failures)
		testkit.RequireConverged(t, b.pipeline(t), c.keys(), 2*time.Minute)
		requireOneLeader(t, dispatchers)
	})
}

// requireOneLeader checks, on the /metrics of the dispatchers at addrs,
// that exactly one holds the stream's lease.
func requireOneLeader(t *testing.T, addrs []string) {
	t.Helper()
	leaders := 0.0
	for _, addr := range addrs {
		resp, err := http.Get("http://" + addr + "/metrics")
		require.NoError(t, err)
		body, err := io.ReadAll(resp.Body)
		resp.Body.Close()
		require.NoError(t, err)
		for _, line := range strings.Split(string(body), "\n") {
			if strings.HasPrefix(line, "outboxd_dispatcher_leader{") {
				var v float64
				_, err := fmt.Sscan(line[strings.LastIndex(line, " ")+1:], &v)
				require.NoError(t, err)
				leaders += v
			}
		}
	}
	require.Equal(t, 1.0, leaders, "one dispatcher leads")
}
