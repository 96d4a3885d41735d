package main

import (
	"context"
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"os"
	"slices"
	"time"
)

// Defaults and targets of the load run.
const (
	serverDefault      = "http://127.0.0.1:8080" // make run's --http-addr
	loadSingleDefault  = 60 * time.Second
	loadBatchDefault   = 30 * time.Second
	loadWindow         = 10 * time.Second
	loadSyncedTimeout  = 10 * time.Minute
	targetSingleRate   = 3_000
	targetSingleP99Ms  = 50
	targetStoreGrowsTo = 100_000
	targetBatchRate    = 20_000
	targetSyncedWithin = 30 * time.Second
)

// loadStatus is the part of GET /v1/status the load run reads.
type loadStatus struct {
	Events *struct {
		Total   int64 `json:"total"`
		Synced  int64 `json:"synced"`
		Pending int64 `json:"pending"`
		Failed  int64 `json:"failed"`
	} `json:"events"`
}

// runLoad is `outboxd-bench load`: the load run against a running outboxd.
func runLoad(ctx context.Context, out io.Writer, args []string) error {
	if len(args) > 0 {
		return fmt.Errorf("outboxd-bench load takes no arguments; set SERVER, LOAD_SINGLE, LOAD_BATCH, AUTH_TOKEN")
	}
	server := env(serverDefault, "SERVER")
	single, err := durationEnv("LOAD_SINGLE", loadSingleDefault)
	if err != nil {
		return err
	}
	batch, err := durationEnv("LOAD_BATCH", loadBatchDefault)
	if err != nil {
		return err
	}
	c := newClient(server, os.Getenv("AUTH_TOKEN"), singleClients)
	before, err := c.status(ctx)
	if err != nil {
		return fmt.Errorf("no outboxd answers at %s (start one with make run, or set SERVER): %w", server, err)
	}
	source := "load-" + newID()
	fmt.Fprintf(out, "load run against %s (store holds %d originals); events of source %s\n", server, before.Events.Total, source)

	fmt.Fprintf(out, "\nsingle events: %d clients for %s\n", singleClients, single)
	d := c.singles(source, 0)
	d.duration, d.window = single, loadWindow
	res, err := d.run(ctx)
	if err != nil {
		return err
	}
	lat := summarize(res.latencies)
	printWindows(out, res)
	fmt.Fprintf(out, "  %.0f ev/s (target ≥ %d), request p50 %.1f ms, p99 %.1f ms (target ≤ %d ms)\n",
		perSecond(res.events, res.elapsed), targetSingleRate, lat.p50, lat.p99, targetSingleP99Ms)
	if st, err := c.status(ctx); err == nil {
		fmt.Fprintf(out, "  the store holds %d originals (target: past %d)\n", st.Events.Total, targetStoreGrowsTo)
	}

	fmt.Fprintf(out, "\nbatches of %d: %d clients for %s\n", batchEvents, batchClients, batch)
	d = c.batches(source+"-batch", 0)
	d.duration, d.window = batch, loadWindow
	if res, err = d.run(ctx); err != nil {
		return err
	}
	lat = summarize(res.latencies)
	printWindows(out, res)
	fmt.Fprintf(out, "  %.0f ev/s (target ≥ %d), request p50 %.1f ms, p99 %.1f ms\n",
		perSecond(res.events, res.elapsed), targetBatchRate, lat.p50, lat.p99)

	stopped := time.Now()
	var last loadStatus
	err = waitFor(ctx, "every original synced", loadSyncedTimeout, 100*time.Millisecond, func(ctx context.Context) (bool, error) {
		st, err := c.status(ctx)
		if err != nil {
			return false, nil //nolint:nilerr // a slow status read is retried until the deadline
		}
		last = st
		return st.Events.Pending == 0, nil
	})
	if err != nil {
		return fmt.Errorf("%w (last status: %+v)", err, last.Events)
	}
	fmt.Fprintf(out, "\nall synced %s after the load stopped (target ≤ %s): %d originals, %d synced, %d failed\n",
		time.Since(stopped).Round(100*time.Millisecond), targetSyncedWithin, last.Events.Total, last.Events.Synced, last.Events.Failed)
	return nil
}

// printWindows prints the accepted events/s of each window; the requests
// that end just after the last full window (those in flight when the
// duration passed) count in it.
func printWindows(out io.Writer, res driven) {
	counts := slices.Clone(res.windows)
	last := len(counts) - 1
	if last > 0 && res.elapsed-time.Duration(last)*loadWindow < loadWindow/10 {
		counts[last-1] += counts[last]
		counts = counts[:last]
	}
	for k, n := range counts {
		from := time.Duration(k) * loadWindow
		to := min(from+loadWindow, res.elapsed)
		if k == len(counts)-1 {
			to = res.elapsed
		}
		fmt.Fprintf(out, "  %5.1f–%5.1f s: %8.0f ev/s\n", from.Seconds(), to.Seconds(), perSecond(n, to-from))
	}
}

// status reads GET /v1/status.
func (c *client) status(ctx context.Context) (loadStatus, error) {
	var st loadStatus
	out, err := c.request(ctx, http.MethodGet, "/v1/status", nil)
	if err != nil {
		return st, err
	}
	if err := json.Unmarshal(out, &st); err != nil {
		return st, fmt.Errorf("error decoding GET /v1/status: %w", err)
	}
	if st.Events == nil {
		return st, fmt.Errorf("GET /v1/status: the store's counts are unavailable")
	}
	return st, nil
}

// durationEnv reads a duration from the variable name, or def.
func durationEnv(name string, def time.Duration) (time.Duration, error) {
	v := os.Getenv(name)
	if v == "" {
		return def, nil
	}
	d, err := time.ParseDuration(v)
	if err != nil || d <= 0 {
		return 0, fmt.Errorf("%s must be a positive duration like 60s (got %q)", name, v)
	}
	return d, nil
}
