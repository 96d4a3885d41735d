package dispatcher_test

import (
	"context"
	"fmt"
	"os"
	"strconv"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/stretchr/testify/require"

	"github.com/outboxd/outboxd/internal/stream"
	"github.com/outboxd/outboxd/internal/testkit"
)

// envShow runs TestShowRedisBounded: OUTBOXD_SHOW_EVENTS=100000 go test
// -run TestShowRedisBounded -v ./dispatcher/ prints the figures that
// docs/operations.md ("Redis memory") quotes.
const envShow = "OUTBOXD_SHOW_EVENTS"

// TestShowRedisBounded prints XLEN and used_memory after a run of
// OUTBOXD_SHOW_EVENTS events with trimming off (before) and on,
// then the timeline of a Redis that fills up (maxmemory, noeviction) and
// recovers by itself. Skipped unless the variable is set; each run still
// ends with the checker.
func TestShowRedisBounded(t *testing.T) {
	n, _ := strconv.Atoi(os.Getenv(envShow))
	if n <= 0 {
		t.Skipf("set %s to run it", envShow)
	}
	ctx := context.Background()
	for _, trim := range []bool{false, true} {
		srv := testkit.NewRedisServer(t)
		b := setup(t, &setupOpts{redis: srv.Client()})
		cfg := b.config()
		cfg.TrimOff, cfg.BatchSize = !trim, 2000
		b.start(cfg)
		p := b.startWorker()
		began := time.Now()
		b.write(n, 1000)
		b.requireConverged(p)
		took := time.Since(began).Round(time.Second)
		show := func(when string) {
			mem, err := b.rc.Memory(ctx)
			require.NoError(t, err)
			xlen, err := b.rc.Len(ctx, b.stream)
			require.NoError(t, err)
			t.Logf("trimming %-5v %d events in %s, %s: XLEN %d, used_memory %d bytes (%.1f MiB)",
				trim, n, took, when, xlen, mem.Used, float64(mem.Used)/(1<<20))
		}
		show("converged")
		if trim { // the leader's next round once --stream-retention (1m) has passed
			_, err := b.rc.Trim(ctx, stream.NewKeys(b.stream, ""), 0)
			require.NoError(t, err)
			show("after the retention")
		}
	}

	// A Redis that fills up: 20 MB maxmemory with noeviction, a stream
	// that does not fit (the worker starts late), and the recovery.
	srv := testkit.NewRedisServer(t)
	b := setup(t, &setupOpts{redis: srv.Client()})
	keys := stream.NewKeys(b.stream, stream.GroupDefault)
	for _, k := range []stream.Keys{keys, keys.ReplayLane()} {
		require.NoError(t, b.rdb.XGroupCreateMkStream(ctx, k.Stream(), k.Group(), "0").Err())
	}
	require.NoError(t, b.rdb.ConfigSet(ctx, "maxmemory", "20mb").Err())
	cfg := b.config()
	cfg.Registerer, cfg.StreamRetention = prometheus.NewRegistry(), time.Millisecond
	d := b.start(cfg)
	began := time.Now()
	line := func(what string) {
		mem, _ := b.rc.Memory(ctx)
		xlen, _ := b.rc.Len(ctx, b.stream)
		t.Logf("%6.1fs %-34s XLEN %6d, used_memory %5.1f MiB, undispatched %6d, relay %q",
			time.Since(began).Seconds(), what, xlen, float64(mem.Used)/(1<<20), b.undispatched(), d.Backpressure())
	}
	b.write(n, 1000)
	require.Eventually(t, func() bool { return d.Backpressure() != "" }, time.Minute, 10*time.Millisecond)
	line("relay holds (Redis full)")
	var p testkit.Pipeline
	tick := time.NewTicker(time.Second)
	defer tick.Stop()
	for i := 0; ; i++ {
		if i == 2 {
			p = b.startWorker()
			line("worker started")
		}
		if i > 2 && b.undispatched() == 0 {
			break
		}
		require.Less(t, i, 600, "not converged within 10 minutes")
		<-tick.C
		line(fmt.Sprintf("t+%ds", i+1))
	}
	b.requireConverged(p)
	line("converged, maxmemory never raised")
}
