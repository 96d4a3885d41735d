package runner

import (
	"context"
	"fmt"
	"io"
	"net/http"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/outboxd/outboxd/internal/testkit"
	"github.com/outboxd/outboxd/store/sqlitestore"
)

// TestShutdownOrder sends SIGTERM (cancels run's context) to `outboxd dev`
// while an ingest request is in flight (held behind a lock on the SQLite
// store) and the worker holds a batch in flight (held behind a PostgreSQL
// table lock), then lets both go: the request is answered 201, the batch is
// projected and acknowledged, and dev exits 0 — the HTTP server drained its
// requests, then the services finished their work, then the stores closed.
func TestShutdownOrder(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	pg := testkit.NewPostgres(t)
	rdb, prefix := testkit.NewRedis(t)
	stream, group := prefix+"-stream", prefix+"-group"
	path := filepath.Join(t.TempDir(), "outboxd.db")
	addr := freeAddr(t)
	base := "http://" + addr
	runCtx, sigterm := context.WithCancel(ctx)
	defer sigterm()
	stderr := &syncBuffer{}
	done := make(chan int, 1)
	go func() {
		done <- run(runCtx, []string{"dev", "--store", "sqlite:" + path, "--postgres-url", pg.URL,
			"--redis-url", testkit.RedisURL(), "--stream", stream, "--group", group, "--http-addr", addr,
			"--log-level", "warn", "--every", "1h"}, io.Discard, stderr)
	}()
	require.Eventually(t, func() bool {
		resp, err := http.Get(base + "/readyz")
		if err == nil {
			resp.Body.Close()
		}
		return err == nil && resp.StatusCode == http.StatusOK
	}, 30*time.Second, 20*time.Millisecond, "dev did not start: %s", stderr)

	post := func(i int) (int, error) {
		req, err := http.NewRequestWithContext(ctx, http.MethodPost, base+"/v1/events", strings.NewReader(event(i)))
		if err != nil {
			return 0, err
		}
		req.Header.Set("Content-Type", "application/json")
		req.Header.Set("Idempotency-Key", fmt.Sprint("shutdown-", i))
		resp, err := http.DefaultClient.Do(req)
		if err != nil {
			return 0, err
		}
		defer resp.Body.Close()
		return resp.StatusCode, nil
	}

	// A batch in flight: the worker reads it, then waits on the lock.
	lock, err := pg.Pool.Begin(ctx)
	require.NoError(t, err)
	defer lock.Rollback(ctx) //nolint:errcheck // released below
	_, err = lock.Exec(ctx, "LOCK TABLE events IN SHARE MODE")
	require.NoError(t, err)
	for i := range 5 {
		code, err := post(i)
		require.NoError(t, err)
		require.Equal(t, http.StatusCreated, code)
	}
	require.Eventually(t, func() bool {
		p, err := rdb.XPending(ctx, stream, group).Result()
		return err == nil && p.Count > 0
	}, 20*time.Second, 10*time.Millisecond, "the worker never held a batch")

	// A request in flight: it waits for the store's write lock.
	other, err := sqlitestore.Open(ctx, path, nil)
	require.NoError(t, err)
	defer other.Close(ctx)
	storeLock, err := other.DB().BeginTx(ctx, nil)
	require.NoError(t, err)
	_, err = storeLock.ExecContext(ctx, `CREATE TABLE hold_the_lock (x INTEGER)`)
	require.NoError(t, err)
	answered := make(chan int, 1)
	go func() {
		req, _ := http.NewRequestWithContext(ctx, http.MethodPost, base+"/v1/events", strings.NewReader(event(99)))
		req.Header.Set("Content-Type", "application/json")
		resp, err := http.DefaultClient.Do(req)
		if err != nil {
			t.Log(err)
			answered <- -1
			return
		}
		resp.Body.Close()
		answered <- resp.StatusCode
	}()
	// Wait until the handler serves it (not merely sent: a request the
	// server has not read is not in flight yet).
	require.Eventually(t, func() bool {
		resp, err := http.Get(base + "/metrics")
		if err != nil {
			return false
		}
		defer resp.Body.Close()
		body, _ := io.ReadAll(resp.Body)
		return strings.Contains(string(body), `outboxd_http_requests_in_flight{route="POST /v1/events"} 1`)
	}, 10*time.Second, 5*time.Millisecond, "the request never reached the handler")

	sigterm()
	select {
	case code := <-answered:
		t.Fatalf("the request was answered (%d) while the store was locked", code)
	case code := <-done:
		t.Fatalf("dev exited (%d) with a request in flight: %s", code, stderr)
	default:
	}
	require.NoError(t, storeLock.Rollback())
	select {
	case code := <-answered:
		require.Equal(t, http.StatusCreated, code, "the request in flight at SIGTERM is answered: %s", stderr)
	case <-time.After(20 * time.Second):
		t.Fatal("the request in flight was not answered")
	}
	select {
	case code := <-done:
		t.Fatalf("dev exited (%d) before the worker's batch in flight was done: %s", code, stderr)
	default:
	}
	require.NoError(t, lock.Rollback(ctx))
	select {
	case code := <-done:
		require.Equal(t, ExitOK, code, stderr.String())
	case <-time.After(30 * time.Second):
		t.Fatal("dev did not exit after SIGTERM")
	}
	p, err := rdb.XPending(ctx, stream, group).Result()
	require.NoError(t, err)
	require.Zero(t, p.Count, "the batch in flight was acknowledged")
	var rows int
	require.NoError(t, pg.Pool.QueryRow(ctx, `SELECT count(*) FROM events`).Scan(&rows))
	require.Positive(t, rows, "the batch in flight was projected")
	c, err := other.Counts(ctx)
	require.NoError(t, err)
	require.Equal(t, int64(6), c.Total, "the event answered during shutdown is stored")
}
