package httpapi_test

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"net/http"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/outboxd/outboxd/internal/httpapi"
	"github.com/outboxd/outboxd/internal/testkit"
	"github.com/outboxd/outboxd/outbox"
	"github.com/outboxd/outboxd/store"
)

// countingStore is the real store; it counts the transactions run through
// it.
type countingStore struct {
	store.Store
	txs atomic.Int64
}

func (s *countingStore) WriteTx(ctx context.Context, fn func(ctx context.Context, tx outbox.Tx) error) error {
	s.txs.Add(1)
	return s.Store.WriteTx(ctx, fn)
}

// setupGroupCommit serves the ingest API with a Committer of cfg over a
// store that counts its transactions.
func setupGroupCommit(t *testing.T, st store.Store, cfg *outbox.CommitterConfig) (*handlerBundle, *countingStore, *outbox.Committer) {
	t.Helper()
	cs := &countingStore{Store: st}
	w := outbox.NewWriter(cs, nil)
	c, err := outbox.NewCommitter(w, cfg)
	require.NoError(t, err)
	require.NoError(t, c.Start(context.Background()))
	t.Cleanup(func() { require.NoError(t, c.Stop(context.Background())) })
	return setupHandlerOn(t, st, &httpapi.Config{Writer: w, Committer: c}), cs, c
}

// postAll sends the n events of eventJSON("d<i>") at once.
func postAll(t *testing.T, b *handlerBundle, n int) []reply {
	t.Helper()
	return b.postConcurrently(t, n, func(i int) string { return eventJSON(fmt.Sprint("d", i)) })
}

// postBatches sends n batch requests of size events at once (batch i holds
// the devices b<i>-0 …) and returns each one's results; each must be
// answered 200.
func postBatches(t *testing.T, b *handlerBundle, n, size int) [][]outbox.Result {
	t.Helper()
	out := make([][]outbox.Result, n)
	errs := make([]error, n)
	var wg sync.WaitGroup
	for i := range n {
		events := make([]string, size)
		for j := range events {
			events[j] = eventJSON(fmt.Sprintf("b%d-%d", i, j))
		}
		body := `{"events":[` + strings.Join(events, ",") + `]}`
		wg.Go(func() {
			resp, err := http.Post(b.server.URL+"/v1/events:batch", "application/json", strings.NewReader(body))
			if err != nil {
				errs[i] = err
				return
			}
			defer resp.Body.Close()
			var v struct{ Results []outbox.Result }
			if resp.StatusCode != http.StatusOK {
				errs[i] = fmt.Errorf("batch %d: %s", i, resp.Status)
				return
			}
			errs[i] = json.NewDecoder(resp.Body).Decode(&v)
			out[i] = v.Results
		})
	}
	wg.Wait()
	require.NoError(t, errors.Join(errs...))
	return out
}

func TestIngestGroupCommit(t *testing.T) {
	t.Parallel()

	t.Run("ConcurrentRequestsShareTransactions", func(t *testing.T) {
		t.Parallel()
		b, st, _ := setupGroupCommit(t, testkit.NewSQLite(t), &outbox.CommitterConfig{GroupWait: 50 * time.Millisecond})
		const n = 16
		ids := map[string]bool{}
		replies := postAll(t, b, n)
		for _, r := range replies {
			require.Equal(t, http.StatusCreated, r.status, "body: %s", r.body)
			ids[r.json(t)["id"].(string)] = true
		}
		require.Len(t, ids, n, "distinct ids")
		require.Less(t, st.txs.Load(), int64(n/2), "transactions for %d requests", n)
		b.requireStored(t, n)
		for id := range ids {
			b.event(t, id)
		}

		for i, r := range postAll(t, b, n) {
			require.Equal(t, http.StatusOK, r.status, "body: %s", r.body)
			v := r.json(t)
			require.Equal(t, true, v["duplicate"])
			require.Equal(t, replies[i].json(t)["id"], v["id"])
		}
		b.requireStored(t, n)
	})

	t.Run("StoppedCommitterIs503", func(t *testing.T) {
		t.Parallel()
		b, _, c := setupGroupCommit(t, testkit.NewSQLite(t), nil)
		require.NoError(t, c.Stop(context.Background()))
		r := b.do(t, http.MethodPost, "/v1/events", eventJSON("d1"))
		r.problem(t, http.StatusServiceUnavailable)
		require.NotEmpty(t, r.header.Get("Retry-After"))
		// A batch goes through the committer too.
		r = b.do(t, http.MethodPost, "/v1/events:batch", `{"events":[`+eventJSON("d2")+`]}`)
		r.problem(t, http.StatusServiceUnavailable)
		require.NotEmpty(t, r.header.Get("Retry-After"))
		b.requireStored(t, 0)
	})

	t.Run("ConcurrentBatchesShareTransactions", func(t *testing.T) {
		t.Parallel()
		b, st, _ := setupGroupCommit(t, testkit.NewSQLite(t), &outbox.CommitterConfig{GroupWait: 50 * time.Millisecond})
		const n, size = 6, 3
		first := postBatches(t, b, n, size)
		ids := map[string]bool{}
		for _, res := range first {
			require.Len(t, res, size)
			for _, r := range res {
				require.False(t, r.Duplicate)
				ids[r.ID] = true
			}
		}
		require.Len(t, ids, n*size, "distinct ids")
		require.Less(t, st.txs.Load(), int64(n/2), "transactions for %d batch requests", n)
		b.requireStored(t, n*size)
		for id := range ids {
			b.event(t, id)
		}

		// Sent again, every event of every batch is a duplicate of its
		// original, whichever group the batch joins.
		for i, res := range postBatches(t, b, n, size) {
			for j, r := range res {
				require.True(t, r.Duplicate, "batch %d event %d", i, j)
				require.Equal(t, first[i][j].ID, r.ID, "batch %d event %d", i, j)
			}
		}
		b.requireStored(t, n*size)
	})

	t.Run("StoreUnavailableIs503", func(t *testing.T) {
		t.Parallel()
		st := testkit.NewMongo(t, nil)
		b, _, _ := setupGroupCommit(t, st, nil)
		require.Equal(t, http.StatusCreated, b.do(t, http.MethodPost, "/v1/events", eventJSON("before")).status)
		require.NoError(t, st.Close(context.Background()))
		p := b.do(t, http.MethodPost, "/v1/events", eventJSON("after")).problem(t, http.StatusServiceUnavailable)
		require.Equal(t, httpapi.ProblemUnavailable, p.Type)
	})
}

// TestReadyzStoreRefusingWrites: the SQLite store gets
// full (PRAGMA max_page_count on its one write connection: the writes
// that need a page more fail with SQLITE_FULL, "database or disk is
// full", as on a full disk) while its reads go on. Ingest answers 503 and
// /readyz says "store: refusing writes" although the store's own check
// (a read) passes; with room again, the first write that succeeds makes
// it ready. Without writes it is ready again after Retry-After, so that a
// load balancer sends traffic back to find out.
func TestReadyzStoreRefusingWrites(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	st := testkit.NewSQLite(t)
	retry := 2 * time.Second
	b := setupHandlerOn(t, st, &httpapi.Config{RetryAfter: retry})
	require.Equal(t, http.StatusCreated, b.do(t, http.MethodPost, "/v1/events", eventJSON("before")).status)
	require.Equal(t, http.StatusOK, b.do(t, http.MethodGet, "/readyz", "").status)
	stored := int64(1)

	var pages int64
	require.NoError(t, st.DB().QueryRowContext(ctx, "PRAGMA page_count").Scan(&pages))
	require.NoError(t, st.DB().QueryRowContext(ctx, fmt.Sprintf("PRAGMA max_page_count = %d", pages)).Scan(&pages))
	full := func() { // the disk is full: the next write that needs a page fails
		t.Helper()
		for i := 0; ; i++ {
			require.Less(t, i, 5000, "the store never filled up")
			r := b.do(t, http.MethodPost, "/v1/events", eventJSON(fmt.Sprint("fill-", stored)))
			if r.status == http.StatusServiceUnavailable {
				require.Equal(t, httpapi.ProblemUnavailable, r.problem(t, http.StatusServiceUnavailable).Type)
				return
			}
			require.Equal(t, http.StatusCreated, r.status, "body: %s", r.body)
			stored++
		}
	}
	full()
	refused := time.Now()
	r := b.do(t, http.MethodGet, "/readyz", "")
	require.Equal(t, http.StatusServiceUnavailable, r.status)
	require.Equal(t, map[string]any{"status": "unavailable", "checks": map[string]any{"store": "refusing writes"}}, r.json(t))
	require.NoError(t, st.Ping(ctx), "the store's own check passes: it reads")
	b.requireStored(t, stored) // the refused write wrote nothing

	// Room again: the first write that succeeds makes it ready at once.
	_, err := st.DB().ExecContext(ctx, "PRAGMA max_page_count = 1073741823")
	require.NoError(t, err)
	require.Equal(t, http.StatusServiceUnavailable, b.do(t, http.MethodGet, "/readyz", "").status, "no write told it yet")
	require.Equal(t, http.StatusCreated, b.do(t, http.MethodPost, "/v1/events", eventJSON("after")).status)
	stored++
	require.Less(t, time.Since(refused), retry, "the write came before the hold ended: it, not the hold, made it ready")
	require.Equal(t, http.StatusOK, b.do(t, http.MethodGet, "/readyz", "").status)
	b.requireStored(t, stored)

	// Full again, and no write comes: ready after Retry-After, when the
	// next client write tells again.
	require.NoError(t, st.DB().QueryRowContext(ctx, "PRAGMA page_count").Scan(&pages))
	require.NoError(t, st.DB().QueryRowContext(ctx, fmt.Sprintf("PRAGMA max_page_count = %d", pages)).Scan(&pages))
	full()
	require.Equal(t, http.StatusServiceUnavailable, b.do(t, http.MethodGet, "/readyz", "").status)
	require.Eventually(t, func() bool { return b.do(t, http.MethodGet, "/readyz", "").status == http.StatusOK },
		2*retry, 50*time.Millisecond)
}
