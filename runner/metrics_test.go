package runner

import (
	"bufio"
	"cmp"
	"context"
	"fmt"
	"io"
	"net/http"
	"net/http/httptest"
	"os"
	"path/filepath"
	"regexp"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/outboxd/outboxd/internal/testkit"
)

// startRole runs `outboxd <args>` in this process, serving on addr, waits
// until it is ready, and stops it (like SIGTERM, exit 0) at cleanup.
func startRole(t *testing.T, addr string, args ...string) {
	t.Helper()
	startRoleWith(t, addr, nil, args...)
}

// startRoleWith is startRole for Run with opts; stop stops the role
// before the cleanup does (once), so that a test can look at what it
// leaves.
func startRoleWith(t *testing.T, addr string, opts []Option, args ...string) (stop func()) {
	t.Helper()
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan int, 1)
	stderr := &syncBuffer{}
	go func() {
		done <- Run(ctx, append(args, "--http-addr", addr, "--log-level", "error"), io.Discard, stderr, opts...)
	}()
	var once sync.Once
	stop = func() {
		once.Do(func() {
			cancel()
			select {
			case code := <-done:
				require.Equal(t, ExitOK, code, "%s: %s", args[0], stderr)
			case <-time.After(60 * time.Second):
				t.Errorf("%s did not stop", args[0])
			}
		})
	}
	t.Cleanup(stop)
	require.Eventually(t, func() bool {
		res, err := http.Get("http://" + addr + "/readyz")
		if err != nil {
			return false
		}
		res.Body.Close()
		return res.StatusCode == http.StatusOK
	}, 30*time.Second, 20*time.Millisecond, "%s did not become ready: %s", args[0], stderr)
	return stop
}

// scrape returns the metric names (histograms by their _bucket, _sum and
// _count series) of GET /metrics at addr, and the le values of each
// histogram's buckets.
func scrape(t *testing.T, addr string) (names map[string]bool, buckets map[string][]string) {
	t.Helper()
	res, err := http.Get("http://" + addr + "/metrics")
	require.NoError(t, err)
	defer res.Body.Close()
	require.Equal(t, http.StatusOK, res.StatusCode)
	names, buckets = map[string]bool{}, map[string][]string{}
	le := regexp.MustCompile(`le="([^"]+)"`)
	sc := bufio.NewScanner(res.Body)
	sc.Buffer(make([]byte, 1<<20), 1<<20)
	for sc.Scan() {
		line := sc.Text()
		if line == "" || strings.HasPrefix(line, "#") {
			continue
		}
		name := line[:strings.IndexAny(line, "{ ")]
		names[name] = true
		if base, ok := strings.CutSuffix(name, "_bucket"); ok {
			if m := le.FindStringSubmatch(line); m != nil {
				buckets[base] = append(buckets[base], m[1])
			}
			names[base] = true
		} else if base, ok := strings.CutSuffix(name, "_count"); ok {
			names[base] = true
		}
	}
	require.NoError(t, sc.Err())
	return names, buckets
}

// TestMetricsOfEveryRole runs each long-running role as its own process
// would (ingest, dispatch, work, reconcile --every) on one SQLite store,
// drives events and a dead letter through them, then scrapes /metrics of
// each and finds the metrics of the seeds, of the operations issue and of
// every alert rule and dashboard panel. The one-sweep reconcile writes the
// same metrics to --metrics-file.
func TestMetricsOfEveryRole(t *testing.T) {
	t.Parallel()
	pg := testkit.NewPostgres(t)
	_, prefix := testkit.NewRedis(t)
	stream := prefix + "-stream"
	storeURI := "sqlite:" + filepath.Join(t.TempDir(), "outboxd.db")
	common := []string{"--store", storeURI}
	redisFlags := []string{"--redis-url", testkit.RedisURL(), "--stream", stream}
	code, _, errOut := cli("migrate", "--store", storeURI, "--postgres-url", pg.URL, "--log-level", "warn")
	require.Equal(t, ExitOK, code, errOut)

	addrs := map[string]string{}
	for _, role := range []string{"ingest", "dispatch", "work", "reconcile"} {
		addrs[role] = freeAddr(t)
	}
	startRole(t, addrs["ingest"], append([]string{"ingest", "--stream", stream}, common...)...)
	startRole(t, addrs["dispatch"], append(append([]string{"dispatch"}, common...), redisFlags...)...)
	// The dead-letter hook and the redrive policy export their metrics
	// only where they are configured.
	hook := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, _ *http.Request) { w.WriteHeader(http.StatusNoContent) }))
	t.Cleanup(hook.Close)
	startRole(t, addrs["work"], append(append([]string{"work", "--postgres-url", pg.URL, "--group", "g",
		"--concurrency", "2", "--consumer", "w", "--batch-size", "auto", "--dlq-webhook", hook.URL}, common...), redisFlags...)...)
	startRole(t, addrs["reconcile"], append(append([]string{"reconcile", "--every", "100ms", "--postgres-url", pg.URL, "--audit-every", "1s",
		"--redrive", "infrastructure=10m:3"}, common...), redisFlags...)...)

	b := &devBundle{base: "http://" + addrs["ingest"], stream: stream, pg: pg, group: "g"}
	for i := range 5 {
		code, body := b.post(t, "/v1/events", fmt.Sprintf("m%d", i), event(i))
		require.Equal(t, http.StatusCreated, code, string(body))
	}
	b.deadLetters(t)
	require.Eventually(t, func() bool {
		s, err := b.status()
		return err == nil && s.Events != nil && s.Events.Synced == 5
	}, 30*time.Second, 20*time.Millisecond, "%+v", func() any { s, _ := b.status(); return s.Events }())
	// The admin API of a role without Redis says where to go.
	code, _, errOut = cli("dlq", "list", "--server", b.base)
	require.Equal(t, ExitUsage, code)
	require.Contains(t, errOut, "outboxd work")
	code, out, errOut := cli("dlq", "list", "--server", "http://"+addrs["work"])
	require.Equal(t, ExitOK, code, errOut)
	require.Contains(t, out, "2 shown of 2")

	status := []string{"outboxd_events", "outboxd_events_failed", "outboxd_oldest_unsynced_age_seconds",
		"outboxd_outbox_undispatched", "outboxd_http_requests_total", "outboxd_http_request_duration_seconds"}
	stream3 := []string{"outboxd_stream_length", "outboxd_stream_pending", "outboxd_dlq_length",
		"outboxd_replay_length", "outboxd_replay_pending", "outboxd_replay_lag"}
	want := map[string][]string{
		"ingest": slices.Concat(status, []string{"outboxd_ingest_group_events", "outboxd_ingest_created_total",
			"outboxd_ingest_duplicates_total", "outboxd_ingest_key_mismatches_total",
			"outboxd_store_writer_wait_seconds", "outboxd_store_writer_held_seconds"}),
		"dispatch": slices.Concat(status, stream3, []string{"outboxd_dispatcher_relayed_total", "outboxd_dispatcher_leader",
			"outboxd_dispatcher_term", "outboxd_dispatcher_checkpoint_timestamp_seconds", "outboxd_dispatcher_history_lost_total",
			"outboxd_dispatcher_feed_invalidated_total", "outboxd_dispatcher_fenced_total", "outboxd_dispatcher_breaker_state", "outboxd_paused"}),
		"work": slices.Concat(status, stream3, []string{"outboxd_worker_processed_total", "outboxd_pipeline_latency_seconds",
			"outboxd_worker_projection_seconds", "outboxd_worker_claimed_total", "outboxd_worker_dead_letters_total",
			"outboxd_error_streak", "outboxd_retries_halted", "outboxd_worker_breaker_state",
			"outboxd_reconciler_requeue_to_synced_seconds", "outboxd_worker_batch_size", "outboxd_worker_projection_target_seconds",
			"outboxd_worker_pg_timeouts_total", "outboxd_worker_replay_acked_total", "outboxd_worker_replay_rate_limit", "outboxd_paused",
			"outboxd_replay_duration_seconds", "outboxd_worker_lock_wait_seconds_total"}),
		"reconcile": slices.Concat(status, stream3, []string{"outboxd_reconciler_sweeps_total", "outboxd_reconciler_leader",
			"outboxd_reconciler_requeue_count", "outboxd_reconciler_requeue_exhausted_total",
			"outboxd_reconciler_last_sweep_timestamp_seconds", "outboxd_reconciler_min_age_seconds",
			"outboxd_reconciler_requeue_after_seconds", "outboxd_reconciler_max_requeues", "outboxd_reconciler_published_total",
			"outboxd_reconciler_interval_seconds", "outboxd_audit_checked_total", "outboxd_audit_drift_total",
			"outboxd_audit_last_run_timestamp_seconds", "outboxd_audit_errors_total"}),
	}
	exported := map[string]bool{}
	var latencyBuckets []string
	for role, names := range want {
		got, buckets := scrape(t, addrs[role])
		for _, name := range names {
			require.True(t, got[name], "%s does not export %s", role, name)
		}
		for name := range got {
			exported[name] = true
		}
		if role == "work" {
			latencyBuckets = buckets["outboxd_pipeline_latency_seconds"]
		}
	}
	// Counters with a label appear at their first count: the admin's once
	// an operator re-published something, the worker's retries at the
	// first retry.
	exported["outboxd_admin_published_total"] = true
	exported["outboxd_worker_retries_total"] = true
	exported["outboxd_dlq_hook_notices_total"] = true

	// --concurrency 2: two batch loops, each a consumer with its batch
	// size (auto: it starts at 2,000).
	res, err := http.Get("http://" + addrs["work"] + "/metrics")
	require.NoError(t, err)
	text, err := io.ReadAll(res.Body)
	res.Body.Close()
	require.NoError(t, err)
	for _, consumer := range []string{"w", "w-2"} {
		require.Regexp(t, `outboxd_worker_batch_size\{consumer="`+consumer+`",stream="[^"]+"\} 2000\n`, string(text))
	}
	require.Regexp(t, `outboxd_worker_replay_rate_limit\{stream="[^"]+"\} 5000\n`, string(text))

	// Every metric the alert rules and the dashboard use is exported by
	// some role, and the latency bucket the completion SLO reads exists.
	rules, err := os.ReadFile("../deploy/prometheus/outboxd.rules.yml")
	require.NoError(t, err)
	// What the rules record is a metric of Prometheus' own.
	for _, m := range regexp.MustCompile(`(?m)^\s*- record: (outboxd_[a-z_]+)`).FindAllStringSubmatch(string(rules), -1) {
		exported[m[1]] = true
	}
	dashboard, err := os.ReadFile("../deploy/grafana/outboxd.json")
	require.NoError(t, err)
	metric := regexp.MustCompile(`outboxd_[a-z_]+`)
	// histogramOf returns the histogram whose _bucket, _count or _sum
	// series name is, or "".
	histogramOf := func(name string) string {
		for _, suffix := range []string{"_bucket", "_count", "_sum"} {
			if b, ok := strings.CutSuffix(name, suffix); ok && exported[b+"_bucket"] {
				return b
			}
		}
		return ""
	}
	onDashboard := map[string]bool{}
	for _, src := range []struct {
		name string
		text []byte
	}{{"outboxd.rules.yml", rules}, {"outboxd.json", dashboard}} {
		for _, name := range metric.FindAllString(string(src.text), -1) {
			base := name
			for _, suffix := range []string{"_bucket", "_count", "_sum"} {
				if b, ok := strings.CutSuffix(name, suffix); ok && !exported[name] {
					base = b
					break
				}
			}
			require.True(t, exported[base], "%s uses %s, which no role exports", src.name, name)
			if src.name == "outboxd.json" {
				onDashboard[cmp.Or(histogramOf(base), base)] = true
			}
		}
	}
	// And every family of outboxd's own has a panel, or a reason here
	// for having none.
	var missing []string
	for name := range exported {
		if !strings.HasPrefix(name, "outboxd_") || histogramOf(name) != "" || onDashboard[name] {
			continue
		}
		if _, ok := offTheDashboard[name]; !ok {
			missing = append(missing, name)
		}
	}
	slices.Sort(missing)
	require.Empty(t, missing, "metrics without a panel in deploy/grafana/outboxd.json: add one, or list them in offTheDashboard with why")
	for name := range offTheDashboard {
		require.False(t, onDashboard[name], "%s has a panel: take it off offTheDashboard", name)
	}
	sloBucket := regexp.MustCompile(`outboxd_pipeline_latency_seconds_bucket\{le="([^"]+)"`).FindSubmatch(rules)
	require.NotNil(t, sloBucket)
	require.Contains(t, latencyBuckets, string(sloBucket[1]), "the completion SLO's bucket is gone from the latency histogram: update deploy/prometheus/outboxd.rules.yml")

	t.Run("OneSweepWritesMetricsFile", func(t *testing.T) {
		file := filepath.Join(t.TempDir(), "outboxd_reconcile.prom")
		code, out, errOut := cli(append(append([]string{"reconcile", "--metrics-file", file, "--json", "--log-level", "warn"}, common...), redisFlags...)...)
		require.Equal(t, ExitOK, code, errOut)
		require.Contains(t, out, `"scanned":`)
		text, err := os.ReadFile(file)
		require.NoError(t, err)
		for _, name := range []string{"outboxd_reconciler_sweeps_total", "outboxd_reconciler_requeue_count_bucket",
			"outboxd_reconciler_requeue_exhausted_total", "outboxd_reconciler_last_sweep_timestamp_seconds"} {
			require.Contains(t, string(text), name)
		}
		// The interval the overdue alert compares with: --expected-every
		// (5m by default) for the schedule that runs this sweep.
		require.Regexp(t, `outboxd_reconciler_interval_seconds\{stream="[^"]+"\} 300\n`, string(text))
	})
}

// offTheDashboard are the metric families of outboxd that
// deploy/grafana/outboxd.json shows no panel of, and why (what shows the
// same, or why a chart of it would tell an operator nothing):
// TestMetricsOfEveryRole fails for a family that has neither.
var offTheDashboard = map[string]string{
	"outboxd_reconciler_min_age_seconds":       "--min-age, a flag echoed for the alert rules to compare ages with",
	"outboxd_reconciler_requeue_after_seconds": "--requeue-after, a flag echoed for the alert rules",
	"outboxd_reconciler_max_requeues":          "--max-requeues, a flag echoed; the cap's effect is outboxd_reconciler_requeue_exhausted_total and the requeue-count heatmap",
}
