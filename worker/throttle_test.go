package worker_test

import (
	"testing"
	"time"

	"github.com/stretchr/testify/require"
	"golang.org/x/time/rate"

	"github.com/outboxd/outboxd/worker"
)

// TestWorkerProjectionRate: --projection-rate bounds the live projection
// of the whole group: two workers sharing 400 events/s take at least the
// time the rate asks for 1,000 events (about 2.5 s less the burst), where
// unbounded they take a fraction of it.
func TestWorkerProjectionRate(t *testing.T) {
	t.Parallel()
	const events, perSecond = 1000, 400
	b := setup(t)
	evs := b.write(t, "d", events)
	b.publish(t, evs...)
	started := time.Now()
	for _, name := range []string{"w1", "w2"} {
		cfg := b.config(name)
		cfg.BatchSize, cfg.ProjectionRate = 100, rate.Limit(perSecond)
		b.start(t, cfg)
	}
	b.waitConverged(t)
	took := time.Since(started)
	// The first batch of each worker and the burst go ahead of the rate.
	least := time.Duration(float64(events-2*100-perSecond/20) / perSecond * float64(time.Second))
	require.GreaterOrEqual(t, took, least, "the group projected faster than its rate")
	_, err := worker.New(b.st, b.rdb, b.pg.Pool, &worker.Config{ProjectionRate: -1}, nil)
	require.ErrorContains(t, err, "ProjectionRate")
}
