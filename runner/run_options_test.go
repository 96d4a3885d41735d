package runner

import (
	"context"
	"encoding/json"
	"net/http"
	"path/filepath"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/prometheus/client_golang/prometheus"
	"github.com/stretchr/testify/require"
	"go.uber.org/zap"
	"go.uber.org/zap/zaptest/observer"

	"github.com/outboxd/outboxd/internal/testkit"
	"github.com/outboxd/outboxd/outbox"
	"github.com/outboxd/outboxd/store"
	"github.com/outboxd/outboxd/store/sqlitestore"
	"github.com/outboxd/outboxd/worker"
)

// TestRunOptions runs ingest, dispatch and work through Run with a
// program's options, as a team's own binary would: every role uses the
// store the test opened (WithStore; --store names a file that cannot be
// opened) and leaves it open; ingest serves the program's route
// (WithRoute) behind the ingest token; the worker projects with the
// program's projector (WithProjector), serves the program's registry on
// /metrics beside its own metrics (WithRegistry) and logs through the
// program's logger (WithLogger).
func TestRunOptions(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	st, err := sqlitestore.Open(ctx, filepath.Join(t.TempDir(), "own.db"), nil)
	require.NoError(t, err)
	t.Cleanup(func() { _ = st.Close(context.Background()) })
	require.NoError(t, st.Migrate(ctx, nil))
	pg := testkit.NewPostgres(t)
	_, err = pg.Pool.Exec(ctx, `CREATE TABLE things (event_id text PRIMARY KEY, device text NOT NULL)`)
	require.NoError(t, err)
	_, prefix := testkit.NewRedis(t)
	common := []string{"--store", unopenableSQLite(t), "--stream", prefix + "-stream"}
	withStore := WithStore(st)

	const token = "ingest-secret"
	ingestAddr := freeAddr(t)
	stopIngest := startRoleWith(t, ingestAddr, []Option{withStore, WithRoute("POST /things", func(env *Env) http.Handler {
		return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
			res, err := env.Writer.Write(r.Context(), []outbox.Input{{SourceKey: "shop", DeviceKey: r.URL.Query().Get("device"),
				OccurredAt: "2026-11-04T10:00:00Z", Type: "thing"}})
			if err != nil {
				http.Error(w, err.Error(), http.StatusInternalServerError)
				return
			}
			w.WriteHeader(http.StatusCreated)
			_ = json.NewEncoder(w).Encode(res[0])
		})
	})}, append([]string{"ingest", "--ingest-token", token}, common...)...)
	stopDispatch := startRoleWith(t, freeAddr(t), []Option{withStore},
		append([]string{"dispatch", "--redis-url", testkit.RedisURL()}, common...)...)

	reg := prometheus.NewRegistry()
	own := prometheus.NewCounter(prometheus.CounterOpts{Name: "team_things_total", Help: "The program's own counter."})
	reg.MustRegister(own)
	own.Add(3)
	core, logs := observer.New(zap.InfoLevel)
	workAddr := freeAddr(t)
	stopWork := startRoleWith(t, workAddr, []Option{withStore, WithRegistry(reg), WithLogger(zap.New(core)),
		WithProjector(worker.ProjectorFunc(func(ctx context.Context, tx pgx.Tx, events []*outbox.Event) error {
			for _, ev := range events {
				if _, err := tx.Exec(ctx, `INSERT INTO things VALUES ($1, $2) ON CONFLICT DO NOTHING`, ev.ID, ev.DeviceKey); err != nil {
					return err
				}
			}
			return nil
		}))},
		append([]string{"work", "--redis-url", testkit.RedisURL(), "--postgres-url", pg.URL}, common...)...)

	post := func(bearer, device string) (int, outbox.Result) {
		code, body := withBearer(t, http.MethodPost, "http://"+ingestAddr+"/things?device="+device, bearer)
		var res outbox.Result
		if code == http.StatusCreated {
			require.NoError(t, json.Unmarshal(body, &res))
		}
		return code, res
	}
	code, _ := post("", "d-refused")
	require.Equal(t, http.StatusUnauthorized, code, "the route is behind the ingest token")
	code, _ = post("wrong", "d-refused")
	require.Equal(t, http.StatusUnauthorized, code)
	code, res := post(token, "d-1")
	require.Equal(t, http.StatusCreated, code)

	// The route's event went through the program's store and projector.
	require.Eventually(t, func() bool {
		var device string
		err := pg.Pool.QueryRow(ctx, `SELECT device FROM things WHERE event_id = $1`, res.ID).Scan(&device)
		return err == nil && device == "d-1"
	}, 30*time.Second, 20*time.Millisecond)

	// The program's registry is served beside the worker's metrics (the
	// worker counts the batch once it acknowledged it).
	deadline := time.Now().Add(30 * time.Second)
	names, _ := scrape(t, workAddr)
	for ; !names["outboxd_worker_processed_total"]; names, _ = scrape(t, workAddr) {
		require.True(t, time.Now().Before(deadline), "the worker's metrics in the program's registry: %v", names)
		time.Sleep(20 * time.Millisecond)
	}
	require.True(t, names["team_things_total"], "the program's own metric on /metrics")
	require.NotZero(t, logs.FilterMessage("starting").Len(), "the role logs through the program's logger")

	stopWork()
	stopDispatch()
	stopIngest()
	// Run left the program's store open: it answers, and holds the one
	// event the token let through, synced.
	n, err := st.CountEvents(ctx, store.EventQuery{})
	require.NoError(t, err)
	require.Equal(t, int64(1), n, "the refused requests wrote nothing")
	n, err = st.CountEvents(ctx, store.EventQuery{State: outbox.StateSynced})
	require.NoError(t, err)
	require.Equal(t, int64(1), n)
}
