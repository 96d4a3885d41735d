package main

import (
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"io"
	"math/rand/v2"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"syscall"
	"testing"
	"time"

	"github.com/jackc/pgx/v5/pgxpool"
	"github.com/stretchr/testify/require"

	"github.com/outboxd/outboxd/internal/stream"
	"github.com/outboxd/outboxd/internal/testkit"
	"github.com/outboxd/outboxd/outbox"
	"github.com/outboxd/outboxd/store"
	"github.com/outboxd/outboxd/store/sqlitestore"
)

// process is a role running as a child process.
type process struct {
	name string
	cmd  *exec.Cmd
	log  string // the file its stderr goes to
	done chan error
}

// String returns what the process wrote to stderr so far.
func (p *process) String() string {
	b, _ := os.ReadFile(p.log)
	return p.name + ": " + string(b)
}

// build builds the packages without -race, in one go build, into a
// temporary folder and returns their binaries' paths.
func build(t *testing.T, pkgs ...string) []string {
	t.Helper()
	dir := t.TempDir()
	out, err := exec.Command("go", append([]string{"build", "-o", dir + "/"}, pkgs...)...).CombinedOutput()
	require.NoError(t, err, string(out))
	bins := make([]string, len(pkgs))
	for i, pkg := range pkgs {
		bins[i] = filepath.Join(dir, filepath.Base(pkg))
	}
	return bins
}

// start runs bin with args and env, and waits until it answers /readyz at
// addr; it is killed at cleanup if the test did not stop it.
func start(t *testing.T, env []string, bin, addr string, args ...string) *process {
	t.Helper()
	p := &process{name: filepath.Base(bin) + " " + args[0], cmd: exec.Command(bin, append(args, "--http-addr", addr)...),
		log: filepath.Join(t.TempDir(), "stderr"), done: make(chan error, 1)}
	stderr, err := os.Create(p.log)
	require.NoError(t, err)
	defer stderr.Close() // the child has its own copy
	p.cmd.Env, p.cmd.Stderr = env, stderr
	require.NoError(t, p.cmd.Start())
	go func() { p.done <- p.cmd.Wait() }()
	t.Cleanup(func() { _ = p.cmd.Process.Kill() })
	require.Eventually(t, func() bool { return get(addr, "/readyz") == http.StatusOK }, 30*time.Second, 20*time.Millisecond,
		"%s did not become ready", p)
	return p
}

// stop sends SIGTERM and waits for a clean exit.
func (p *process) stop(t *testing.T) {
	t.Helper()
	require.NoError(t, p.cmd.Process.Signal(syscall.SIGTERM))
	select {
	case err := <-p.done:
		require.NoError(t, err, "after SIGTERM: %s", p)
	case <-time.After(30 * time.Second):
		t.Fatalf("did not stop within 30s of SIGTERM: %s", p)
	}
}

// get returns the status of GET path at addr, 0 when it cannot be asked.
func get(addr, path string) int {
	resp, err := http.Get("http://" + addr + path)
	if err != nil {
		return 0
	}
	resp.Body.Close()
	return resp.StatusCode
}

// post posts body to /orders at addr and returns the status, 0 when the
// request failed.
func post(ctx context.Context, client *http.Client, addr string, body any) int {
	b, _ := json.Marshal(body)
	req, _ := http.NewRequestWithContext(ctx, http.MethodPost, "http://"+addr+"/orders", bytes.NewReader(b))
	req.Header.Set("Content-Type", "application/json")
	resp, err := client.Do(req)
	if err != nil {
		return 0
	}
	_, _ = io.Copy(io.Discard, resp.Body)
	resp.Body.Close()
	return resp.StatusCode
}

// TestOrders runs the example as a team deploys it, three processes on one
// SQLite file, PostgreSQL and Redis: `orders ingest` serving POST /orders,
// the stock `outboxd dispatch` as a sidecar, `orders work` with the
// service's projector. Clients post a few thousand orders and post a
// quarter of them again (retries, some while the first post is in flight);
// every order must end exactly once in the service's tables, its
// customer's counters exact, every original synced and nothing pending.
func TestOrders(t *testing.T) {
	if testing.Short() {
		t.Skip("builds and runs the binaries")
	}
	bins := build(t, "github.com/outboxd/outboxd/examples/orders", "github.com/outboxd/outboxd/cmd/outboxd")
	orders, outboxd := bins[0], bins[1]
	pg := testkit.NewPostgres(t)
	rdb, prefix := testkit.NewRedis(t)
	streamName, group := prefix+"-stream", prefix+"-group"
	const partitions = 2
	dbPath := filepath.Join(t.TempDir(), "orders.db")
	// One environment for every process, as one ConfigMap for a pod.
	env := append(os.Environ(), "OUTBOXD_STORE=sqlite:"+dbPath, "OUTBOXD_STREAM="+streamName,
		fmt.Sprintf("OUTBOXD_PARTITIONS=%d", partitions), "OUTBOXD_POSTGRES_URL="+pg.URL,
		"OUTBOXD_REDIS_URL="+testkit.RedisURL(), "OUTBOXD_GROUP="+group, "OUTBOXD_LOG_LEVEL=warn")

	// The read model is the service's own (setup creates it): the store's
	// schema alone, as docs/adopting.md advises.
	migrate := exec.Command(orders, "migrate", "--store-only")
	migrate.Env = env
	out, err := migrate.CombinedOutput()
	require.NoError(t, err, string(out))

	ingestAddr, dispatchAddr, workAddr := testkit.FreeAddr(t), testkit.FreeAddr(t), testkit.FreeAddr(t)
	ingest := start(t, env, orders, ingestAddr, "ingest")
	dispatch := start(t, env, outboxd, dispatchAddr, "dispatch")
	work := start(t, env, orders, workAddr, "work")

	t.Run("RefusesBadInput", func(t *testing.T) {
		ctx := context.Background()
		for _, body := range []any{
			map[string]any{"id": "bad-1", "customer": "c", "amountCents": 0, "placedAt": "2026-11-29T09:00:00Z"},
			map[string]any{"id": "bad-2", "customer": "c", "amountCents": 5, "placedAt": "yesterday"},
			map[string]any{"id": "", "customer": "c", "amountCents": 5, "placedAt": "2026-11-29T09:00:00Z"},
			map[string]any{"id": "bad-3", "customer": "c", "amountCents": 5, "placedAt": "2026-11-29T09:00:00Z", "extra": 1},
		} {
			require.Equal(t, http.StatusBadRequest, post(ctx, http.DefaultClient, ingestAddr, body), "%v", body)
		}
	})

	const n, customers, clients = 3000, 37, 8
	placed := time.Date(2026, 11, 29, 9, 0, 0, 0, time.UTC)
	orderOf := func(i int) order {
		return order{ID: fmt.Sprintf("o-%d", i), Customer: fmt.Sprintf("c-%d", i%customers), AmountCents: int64(100 + i%500),
			PlacedAt: placed.Add(time.Duration(i) * time.Second).Format(time.RFC3339)}
	}
	// Every order once, a quarter of them twice more: shuffled, so that
	// some retries run while the first post is in flight.
	jobs := make([]int, 0, n+n/2)
	for i := range n {
		jobs = append(jobs, i)
		if i%4 == 0 {
			jobs = append(jobs, i, i)
		}
	}
	rand.New(rand.NewPCG(1, 2)).Shuffle(len(jobs), func(i, j int) { jobs[i], jobs[j] = jobs[j], jobs[i] })

	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	began := time.Now()
	var created, duplicates atomic.Int64
	todo := make(chan int)
	var wg sync.WaitGroup
	for range clients {
		wg.Go(func() {
			client := &http.Client{Timeout: 5 * time.Second}
			for i := range todo {
				for ctx.Err() == nil { // retry until answered, as a client does
					code := post(ctx, client, ingestAddr, orderOf(i))
					if code == http.StatusCreated {
						created.Add(1)
						break
					}
					if code == http.StatusOK {
						duplicates.Add(1)
						break
					}
					select {
					case <-ctx.Done():
					case <-time.After(20 * time.Millisecond):
					}
				}
			}
		})
	}
	for _, i := range jobs {
		select {
		case todo <- i:
		case <-ctx.Done():
		}
	}
	close(todo)
	wg.Wait()
	require.NoError(t, ctx.Err(), "the clients did not finish")
	require.EqualValues(t, n, created.Load(), "each order is created once")
	require.EqualValues(t, len(jobs)-n, duplicates.Load(), "every other post is a duplicate")
	t.Logf("%d orders posted (%d posts) in %s", n, len(jobs), time.Since(began).Round(time.Millisecond))

	// Another order under a used id: 409, nothing written.
	other := orderOf(0)
	other.AmountCents++
	require.Equal(t, http.StatusConflict, post(ctx, http.DefaultClient, ingestAddr, other))

	st, err := sqlitestore.Open(ctx, dbPath, nil)
	require.NoError(t, err)
	defer st.Close(context.Background())
	rc, err := stream.NewClient(rdb, nil)
	require.NoError(t, err)
	keys := stream.NewKeys(streamName, group).Split(partitions)
	require.Eventually(t, func() bool {
		synced, err1 := st.CountEvents(ctx, store.EventQuery{State: outbox.StateSynced})
		pending, err2 := rc.GroupPending(ctx, keys)
		counts, err3 := st.Counts(ctx) // the dispatcher marks entries dispatched after it relayed them
		return err1 == nil && err2 == nil && err3 == nil && synced == n && pending == 0 && counts.Undispatched == 0 && counts.Pending == 0
	}, time.Minute, 50*time.Millisecond, "the pipeline did not converge:\n%s\n%s\n%s", ingest, dispatch, work)
	t.Logf("converged %s after the first post", time.Since(began).Round(time.Millisecond))

	requireExactlyOnce(ctx, t, st, pg.Pool, n, orderOf)

	// The operator replays every order (through the worker's admin API):
	// each event is projected again, and nothing may change.
	replay := exec.Command(orders, "replay", "--server", "http://"+workAddr, "--from", placed.Format(time.RFC3339),
		"--to", placed.Add(n*time.Second).Format(time.RFC3339))
	replay.Env = env
	out, err = replay.CombinedOutput()
	require.NoError(t, err, string(out))
	require.Eventually(t, func() bool {
		pending, err := rc.GroupPending(ctx, keys)
		return metric(workAddr, "outboxd_worker_replay_acked_total") == n && err == nil && pending == 0
	}, time.Minute, 50*time.Millisecond, "the replay was not projected: %s", work)
	requireExactlyOnce(ctx, t, st, pg.Pool, n, orderOf)

	// The worker serves its probes and metrics like the stock one.
	require.Equal(t, http.StatusOK, get(workAddr, "/readyz"))
	require.Equal(t, http.StatusOK, get(workAddr, "/metrics"))
	require.Positive(t, metric(workAddr, "outboxd_worker_processed_total"))

	for _, p := range []*process{ingest, dispatch, work} {
		p.stop(t)
	}
}

// requireExactlyOnce checks that the n orders orderOf makes are each once
// in the system of record (one order row, one original) and in the read
// model, and that each customer's counters equal its orders.
func requireExactlyOnce(ctx context.Context, t *testing.T, st *sqlitestore.Store, pool *pgxpool.Pool, n int, orderOf func(int) order) {
	t.Helper()
	// The system of record: each order once, with its one original.
	total, err := st.CountEvents(ctx, store.EventQuery{})
	require.NoError(t, err)
	require.EqualValues(t, n, total)
	var rows int
	require.NoError(t, st.DB().QueryRowContext(ctx, `SELECT count(*) FROM orders`).Scan(&rows))
	require.Equal(t, n, rows)

	// The read model: each order once, and each customer's counters equal
	// to the orders it holds.
	got := map[string]order{}
	r, err := pool.Query(ctx, `SELECT order_id, customer, amount_cents FROM orders_read`)
	require.NoError(t, err)
	for r.Next() {
		var o order
		require.NoError(t, r.Scan(&o.ID, &o.Customer, &o.AmountCents))
		got[o.ID] = o
	}
	require.NoError(t, r.Err())
	wantCount, wantAmount := map[string]int64{}, map[string]int64{}
	for i := range n {
		o := orderOf(i)
		require.Equal(t, order{ID: o.ID, Customer: o.Customer, AmountCents: o.AmountCents}, got[o.ID])
		wantCount[o.Customer]++
		wantAmount[o.Customer] += o.AmountCents
	}
	require.Len(t, got, n)
	gotCount, gotAmount := map[string]int64{}, map[string]int64{}
	r, err = pool.Query(ctx, `SELECT customer, orders, amount_cents FROM customer_orders`)
	require.NoError(t, err)
	for r.Next() {
		var c string
		var k, a int64
		require.NoError(t, r.Scan(&c, &k, &a))
		gotCount[c], gotAmount[c] = k, a
	}
	require.NoError(t, r.Err())
	require.Equal(t, wantCount, gotCount)
	require.Equal(t, wantAmount, gotAmount)
}

// metric returns the sum of the series of name that addr's /metrics
// serves, -1 when it cannot be read.
func metric(addr, name string) int {
	resp, err := http.Get("http://" + addr + "/metrics")
	if err != nil {
		return -1
	}
	defer resp.Body.Close()
	body, err := io.ReadAll(resp.Body)
	if err != nil || resp.StatusCode != http.StatusOK {
		return -1
	}
	sum := 0.0
	for line := range strings.Lines(string(body)) {
		if rest, ok := strings.CutPrefix(line, name); ok && (rest[0] == '{' || rest[0] == ' ') {
			fields := strings.Fields(line)
			v, err := strconv.ParseFloat(fields[len(fields)-1], 64)
			if err != nil {
				return -1
			}
			sum += v
		}
	}
	return int(sum)
}
