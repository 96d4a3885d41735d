package runner

import (
	"context"
	"encoding/json"
	"fmt"
	"net/http"
	"os/exec"
	"path/filepath"
	"strings"
	"sync"
	"sync/atomic"
	"syscall"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	ostatus "github.com/outboxd/outboxd/internal/status"
	"github.com/outboxd/outboxd/internal/testkit"
)

// devProcess is `outboxd dev` as a child process.
type devProcess struct {
	cmd    *exec.Cmd
	stderr *syncBuffer
	done   chan error
}

func buildOutboxd(t *testing.T) string {
	t.Helper()
	bin := filepath.Join(t.TempDir(), "outboxd")
	out, err := exec.Command("go", "build", "-o", bin, "github.com/outboxd/outboxd/cmd/outboxd").CombinedOutput()
	require.NoError(t, err, string(out))
	return bin
}

func startProcess(t *testing.T, bin string, args []string, base string) *devProcess {
	t.Helper()
	p := &devProcess{cmd: exec.Command(bin, args...), stderr: &syncBuffer{}, done: make(chan error, 1)}
	p.cmd.Stderr = p.stderr
	require.NoError(t, p.cmd.Start())
	go func() { p.done <- p.cmd.Wait() }()
	t.Cleanup(func() { _ = p.cmd.Process.Kill() })
	require.Eventually(t, func() bool {
		resp, err := http.Get(base + "/readyz")
		if err != nil {
			return false
		}
		resp.Body.Close()
		return resp.StatusCode == http.StatusOK
	}, 60*time.Second, 50*time.Millisecond, "outboxd dev did not become ready: %s", p.stderr)
	return p
}

// TestDevSurvivesSIGKILL kills `outboxd dev` (on its SQLite store)
// with SIGKILL while clients are sending events, starts it again on the same
// store, and checks that the pipeline converges: every event a client got a
// 2xx for ends with exactly one row and one count, nothing left pending.
// Clients retry failed requests with the same Idempotency-Key, as real
// clients do, so an event committed just before the kill is answered 200.
func TestDevSurvivesSIGKILL(t *testing.T) {
	if testing.Short() {
		t.Skip("builds and runs the binary")
	}
	bin := buildOutboxd(t)
	pg := testkit.NewPostgres(t)
	rdb, prefix := testkit.NewRedis(t)
	stream, group := prefix+"-stream", prefix+"-group"
	addr := freeAddr(t)
	base := "http://" + addr
	args := []string{"dev", "--store", "sqlite:" + filepath.Join(t.TempDir(), "outboxd.db"),
		"--postgres-url", pg.URL, "--redis-url", testkit.RedisURL(), "--stream", stream, "--group", group,
		"--http-addr", addr, "--log-level", "warn",
		// The restarted process is a new consumer: let it reclaim the dead
		// one's pending entries quickly.
		"--claim-idle", "2s", "--min-age", "5s", "--requeue-after", "5s", "--every", "2s"}

	proc := startProcess(t, bin, args, base)
	const events, clients = 600, 4
	var accepted sync.Map
	var sent atomic.Int64
	ctx, cancel := context.WithTimeout(context.Background(), 3*time.Minute)
	defer cancel()
	var wg sync.WaitGroup
	work := make(chan int)
	for range clients {
		wg.Add(1)
		go func() {
			defer wg.Done()
			client := &http.Client{Timeout: 5 * time.Second}
			for i := range work {
				key := fmt.Sprintf("kill-%d", i)
				for ctx.Err() == nil { // retry until accepted, as a client would
					req, _ := http.NewRequestWithContext(ctx, http.MethodPost, base+"/v1/events", strings.NewReader(event(i)))
					req.Header.Set("Content-Type", "application/json")
					req.Header.Set("Idempotency-Key", key)
					resp, err := client.Do(req)
					if err == nil {
						resp.Body.Close()
						if resp.StatusCode == http.StatusCreated || resp.StatusCode == http.StatusOK {
							accepted.Store(key, true)
							sent.Add(1)
							break
						}
					}
					select {
					case <-ctx.Done():
					case <-time.After(50 * time.Millisecond): // client back-off between retries
					}
				}
			}
		}()
	}
	go func() {
		defer close(work)
		for i := range events {
			select {
			case work <- i:
			case <-ctx.Done():
				return
			}
		}
	}()

	// Kill it under load, once a third of the events are in, while the worker
	// holds a batch it has read but not projected: a table lock makes its
	// INSERT wait, so entries are surely pending on the consumer that dies.
	require.Eventually(t, func() bool { return sent.Load() >= events/3 }, 2*time.Minute, 10*time.Millisecond)
	lock, err := pg.Pool.Begin(ctx)
	require.NoError(t, err)
	_, err = lock.Exec(ctx, "LOCK TABLE events IN SHARE MODE")
	require.NoError(t, err)
	require.Eventually(t, func() bool {
		p, err := rdb.XPending(ctx, stream, group).Result()
		return err == nil && p.Count > 0
	}, time.Minute, 10*time.Millisecond, "the worker never held entries")
	require.NoError(t, proc.cmd.Process.Signal(syscall.SIGKILL))
	<-proc.done
	require.NoError(t, lock.Rollback(ctx))
	proc = startProcess(t, bin, args, base)
	wg.Wait()
	require.NoError(t, ctx.Err(), "clients did not finish")

	var keys []string
	accepted.Range(func(k, _ any) bool { keys = append(keys, k.(string)); return true })
	require.Len(t, keys, events)
	require.Eventually(t, func() bool {
		resp, err := http.Get(base + "/v1/status")
		if err != nil {
			return false
		}
		defer resp.Body.Close()
		var s ostatus.Snapshot
		return json.NewDecoder(resp.Body).Decode(&s) == nil && converged(s, events)
	}, 2*time.Minute, 100*time.Millisecond, "pipeline did not converge after the kill: %s", proc.stderr)

	v, err := testkit.Check(context.Background(), nil, pg.Pool, rdb, stream, group, keys)
	require.NoError(t, err)
	require.True(t, v.OK(), v.String())

	// SIGTERM: finish in-flight work and exit 0.
	require.NoError(t, proc.cmd.Process.Signal(syscall.SIGTERM))
	select {
	case err := <-proc.done:
		require.NoError(t, err, "exit after SIGTERM: %s", proc.stderr)
	case <-time.After(45 * time.Second):
		t.Fatal("outboxd dev did not stop within 45s of SIGTERM")
	}
}
